"""The evidence behind docs/scorecard.md, kept in the repository.

    python3 -m grading.evidence pack   [--results results/scorecard] [--evidence docs/evidence]
    python3 -m grading.evidence unpack [--evidence docs/evidence] DEST
    python3 -m grading.evidence check  [--evidence docs/evidence]

The scorecard is made from lab results that `make scorecard` keeps in results/scorecard/<mode>/
<lab>/ (git ignores results/).  `pack` keeps what the scorecard reads from them, one archive per
mode, docs/evidence/<mode>.tar.xz:

- each lab's record.json, which names its runs and the SHA-256 of every file a run hashes;
- each run's hashed files (labkit.hashed_files: its tables, manifest.json and iperf3's JSON);
- lab 5's live log, live.csv.

Packet captures and the samplers' raw binary dumps stay out: the tables were made from them, and
the record does not hash them.  The archive is byte-for-byte reproducible (sorted members, no
times or owners), and docs/evidence/index.json names each archive's SHA-256, size, labs, kit
commits and kernels.  A lab that is not in the results is carried over from the archive already
there, so running one lab again never drops another lab's evidence.

`unpack` checks each archive against its hash before it extracts anything, refuses members that
are not plain files under their lab's folder, and writes DEST/<mode>/<lab>/ as results/scorecard
has it; `python3 -m grading.scorecard --evidence docs/evidence` makes the table from there, on a
fresh clone, without the VM.  Bad input gets one line on standard error and exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path, PurePosixPath

KIT = Path(__file__).resolve().parents[1]
if str(KIT / "notebooks") not in sys.path:
    sys.path.insert(0, str(KIT / "notebooks"))

MODES = ("quick", "full")
LABS = ("lab1", "lab2", "lab3", "lab4", "lab5")
INDEX = "index.json"
LIVE_LOG = "live.csv"                   # lab 5's evidence: its live connections' log
XZ_PRESET = 9
# An archive of tables is a few MB; anything far larger is not one of ours.
MAX_MEMBER_BYTES = 64 << 20
MAX_ARCHIVE_BYTES = 256 << 20


class EvidenceError(ValueError):
    """The evidence is missing, altered or malformed (the message is one line)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_json(path: Path, missing: str):
    """The JSON in `path`; a missing file says `missing`, a malformed one that it does not parse."""
    if not path.is_file():
        raise EvidenceError(f"{path}: {missing}")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise EvidenceError(f"{path}: does not parse ({e})") from None


# ---------------------------------------------------------------- what a lab's evidence is

def lab_files(lab_root: Path) -> dict[str, bytes]:
    """{path under the lab's folder: bytes} of the files the scorecard needs from one kept lab
    (lab 1-4: record.json and each run's hashed files; lab 5: its live log)."""
    import labkit
    lab_root = Path(lab_root)
    live = lab_root / LIVE_LOG
    if live.is_file():
        return {LIVE_LOG: live.read_bytes()}
    rec_path = lab_root / labkit.RECORD
    rec = _read_json(rec_path, f"neither {labkit.RECORD} nor {LIVE_LOG}: not a kept lab")
    out = {labkit.RECORD: rec_path.read_bytes()}
    for rel in rec.get("runs") or {}:
        run = lab_root / rel
        if not run.is_dir():
            raise EvidenceError(f"{run}: a run the record names is missing")
        for p in labkit.hashed_files(run):
            out[str(PurePosixPath(rel) / p.relative_to(run).as_posix())] = p.read_bytes()
    return out


def _commit_name(kit: dict) -> str:
    """A manifest's kit commit as the index names it: 10 digits, +dirty for a modified tree."""
    return kit["commit"][:10] + ("+dirty" if kit.get("dirty") else "")


def _summary(lab: str, files: dict[str, bytes]) -> dict:
    """What index.json says about one lab's evidence."""
    if LIVE_LOG in files:
        return {"files": 1, "bytes": len(files[LIVE_LOG]), "live_sha256": _sha256(files[LIVE_LOG])}
    rec = json.loads(files["record.json"])
    commits, kernels = set(), set()
    for rel in rec.get("runs") or {}:
        m = json.loads(files.get(f"{rel}/manifest.json", b"{}"))
        kit = m.get("kit") or {}
        if kit.get("commit"):
            src = kit.get("release_of") or {}
            commits.add(_commit_name(kit) + (f" (release of kit {_commit_name(src)})"
                                             if isinstance(src.get("commit"), str) else ""))
        if m.get("kernel"):
            kernels.add(m["kernel"])
    return {"files": len(files), "bytes": sum(map(len, files.values())),
            "record_sha256": _sha256(files["record.json"]), "runs": len(rec.get("runs") or {}),
            "mode": rec.get("mode"), "created": rec.get("created"),
            "commits": sorted(commits), "kernels": sorted(kernels)}


# ---------------------------------------------------------------- archives

def _archive(labs: dict[str, dict[str, bytes]]) -> bytes:
    """A reproducible tar.xz of {lab: {path: bytes}}: sorted, no times, owners or modes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=XZ_PRESET, format=tarfile.PAX_FORMAT) as tar:
        for lab in sorted(labs):
            for rel in sorted(labs[lab]):
                data = labs[lab][rel]
                info = tarfile.TarInfo(f"{lab}/{rel}")
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def read_index(evidence: Path) -> dict:
    path = Path(evidence) / INDEX
    index = _read_json(path, "no evidence index")
    if not isinstance(index, dict) or set(index) - set(MODES):
        raise EvidenceError(f"{path}: keys must be among {', '.join(MODES)}")
    return index


def read_archive(evidence: Path, mode: str, entry: dict) -> dict[str, dict[str, bytes]]:
    """{lab: {path: bytes}} from one mode's archive, once its SHA-256 matches the index."""
    path = Path(evidence) / str(entry.get("archive", ""))
    if path.name != f"{mode}.tar.xz" or not path.is_file():
        raise EvidenceError(f"{path}: the {mode}-mode archive the index names is missing")
    if path.stat().st_size > MAX_ARCHIVE_BYTES:
        raise EvidenceError(f"{path}: {path.stat().st_size} bytes, over {MAX_ARCHIVE_BYTES}")
    data = path.read_bytes()
    if _sha256(data) != entry.get("sha256"):
        raise EvidenceError(f"{path}: SHA-256 {_sha256(data)[:12]} is not the index's "
                            f"{str(entry.get('sha256'))[:12]}: the archive was altered")
    labs: dict[str, dict[str, bytes]] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
            for info in tar:
                parts = PurePosixPath(info.name).parts
                if (not info.isfile() or len(parts) < 2 or parts[0] not in LABS
                        or any(p in ("", ".", "..") for p in parts) or info.name.startswith("/")):
                    raise EvidenceError(f"{path}: member {info.name!r} is not a file under a lab's folder")
                if info.size > MAX_MEMBER_BYTES:
                    raise EvidenceError(f"{path}: member {info.name} is {info.size} bytes")
                labs.setdefault(parts[0], {})["/".join(parts[1:])] = tar.extractfile(info).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise EvidenceError(f"{path}: not a readable tar.xz ({e})") from None
    return labs


def pack(results: Path, evidence: Path) -> dict:
    """Write docs/evidence/<mode>.tar.xz and index.json from the kept results (labs not kept
    there carried over from the archives already written).  Returns the new index."""
    results, evidence = Path(results), Path(evidence)
    old = read_index(evidence) if (evidence / INDEX).is_file() else {}
    index = {}
    for mode in MODES:
        labs = read_archive(evidence, mode, old[mode]) if mode in old else {}
        ran = [lab for lab in LABS if (results / mode / lab).is_dir()]
        if labs and not ran:
            index[mode] = old[mode]         # checked above; nothing new: the archive stays as it is
            continue
        for lab in ran:
            labs[lab] = lab_files(results / mode / lab)
        if not labs:
            continue
        data = _archive(labs)
        evidence.mkdir(parents=True, exist_ok=True)
        tmp = evidence / f".{mode}.tar.xz.tmp"
        tmp.write_bytes(data)
        tmp.replace(evidence / f"{mode}.tar.xz")
        index[mode] = {"archive": f"{mode}.tar.xz", "sha256": _sha256(data), "bytes": len(data),
                       "labs": {lab: _summary(lab, files) for lab, files in sorted(labs.items())}}
    if not index:
        raise EvidenceError(f"{results}: no kept lab results (<mode>/<lab>/) and no evidence yet")
    tmp = evidence / f".{INDEX}.tmp"
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    tmp.replace(evidence / INDEX)
    return index


def unpack(evidence: Path, dest: Path) -> dict:
    """Extract every mode's evidence into DEST/<mode>/<lab>/ after checking it; returns the index."""
    evidence, dest = Path(evidence), Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise EvidenceError(f"{dest}: not an empty folder (unpack writes nothing over a user's files)")
    index = read_index(evidence)
    modes = {mode: read_archive(evidence, mode, entry) for mode, entry in index.items()}
    for mode, labs in modes.items():
        for lab, files in labs.items():
            want = index[mode].get("labs", {}).get(lab)
            if want is None or _summary(lab, files) != want:
                raise EvidenceError(f"{evidence / INDEX}: {mode}/{lab} does not match its archive")
            for rel, data in files.items():
                p = dest / mode / lab / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
    return index


def describe(index: dict) -> list[str]:
    """One line per archive, for the scorecard's header."""
    out = []
    for mode in MODES:
        if mode in index:
            e = index[mode]
            out.append(f"`docs/evidence/{e['archive']}` ({mode} mode; {e['bytes'] / 1e6:.1f} MB; "
                       f"labs {', '.join(sorted(e['labs']))}; SHA-256 `{e['sha256']}`)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="keep, check and unpack the scorecard's evidence")
    ap.add_argument("action", choices=("pack", "unpack", "check"))
    ap.add_argument("dest", nargs="?", help="unpack: the folder to write <mode>/<lab>/ into")
    ap.add_argument("--results", default=str(KIT / "results" / "scorecard"))
    ap.add_argument("--evidence", default=str(KIT / "docs" / "evidence"))
    a = ap.parse_args(argv)
    try:
        if a.action == "pack":
            index = pack(Path(a.results), Path(a.evidence))
        elif a.action == "unpack":
            if not a.dest:
                raise EvidenceError("unpack needs a destination folder")
            index = unpack(Path(a.evidence), Path(a.dest))
        else:
            import tempfile
            with tempfile.TemporaryDirectory() as tmp:
                index = unpack(Path(a.evidence), Path(tmp) / "results")
    except EvidenceError as e:
        print(f"evidence: {e}", file=sys.stderr)
        return 2
    for line in describe(index):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

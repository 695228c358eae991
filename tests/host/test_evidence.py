"""The scorecard's evidence, kept in the repository (grading/evidence.py): docs/scorecard.md is
made again from docs/evidence/ on this host, without a VM, and matches; the archives are
reproducible; altered, unsafe or misplaced evidence gets one line and a non-zero exit, and
nothing a user kept is written over."""
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
EVIDENCE = KIT / "docs" / "evidence"
sys.path.insert(0, str(KIT))

from grading import evidence as ev  # noqa: E402


def scorecard(*args, cwd=KIT):
    return subprocess.run([sys.executable, "-m", "grading.scorecard", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def one_line_error(p, *words):
    assert p.returncode != 0, p.stdout[-500:]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    dest = tmp_path_factory.mktemp("evidence") / "results"
    index = ev.unpack(EVIDENCE, dest)
    return dest, index


def test_the_committed_scorecard_is_made_again_from_the_kept_evidence(tmp_path):
    out = tmp_path / "scorecard.md"
    p = scorecard("--evidence", EVIDENCE, "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert out.read_text() == (KIT / "docs" / "scorecard.md").read_text(), \
        "docs/scorecard.md is not what its evidence makes: run `make scorecard` or regenerate it"


def test_the_evidence_holds_current_runs_of_every_lab(unpacked):
    dest, index = unpacked
    assert "quick" in index
    labs = index["quick"]["labs"]
    assert sorted(labs) == ["lab1", "lab2", "lab3", "lab4", "lab5"]
    for lab in ("lab1", "lab2", "lab3", "lab4"):
        s = labs[lab]
        assert s["mode"] == "quick" and s["runs"] > 0, (lab, s)
        # measured on one committed state of the kit, not a modified tree
        assert len(s["commits"]) == 1 and "+dirty" not in s["commits"][0], (lab, s)
    # small enough for the repository: tables, not captures
    total = sum(e["bytes"] for e in index.values())
    print(f"evidence: {total / 1e6:.2f} MB in {len(index)} archive(s)")
    assert total < 20e6
    assert not list(dest.rglob("*.pcap*")) and not list(dest.rglob("*.bin"))


def test_each_run_in_the_evidence_passes_the_labs_own_record_check(unpacked):
    dest, index = unpacked
    sys.path.insert(0, str(KIT / "notebooks"))
    sys.path.insert(0, str(KIT / "labs"))
    import kmodlab
    import labkit
    for mode in index:
        for lab in ("lab1", "lab2", "lab3", "lab4"):
            if (dest / mode / lab).is_dir():
                check = kmodlab.verify if lab in ("lab3", "lab4") else labkit.verify
                assert check(lab, dest / mode) == [], (mode, lab)


def test_packing_again_gives_the_same_bytes(unpacked, tmp_path):
    """Quick mode's runs packed again into an empty folder give the committed archive, byte for
    byte (full mode's go through the same code: packing its 9 MB again would only take longer)."""
    dest, index = unpacked
    out = tmp_path / "evidence"
    res = tmp_path / "results"
    shutil.copytree(dest / "quick", res / "quick")
    again = ev.pack(res, out)
    assert list(again) == ["quick"] and again["quick"] == index["quick"]
    assert (out / "quick.tar.xz").read_bytes() == (EVIDENCE / "quick.tar.xz").read_bytes()


def test_a_mode_not_packed_again_keeps_its_archive_untouched(unpacked, tmp_path):
    """Packing quick-mode results leaves the full-mode archive as it was: same file, same entry."""
    dest, index = unpacked
    if "full" not in index:
        pytest.skip("no full-mode evidence kept")
    out = tmp_path / "evidence"
    shutil.copytree(EVIDENCE, out)
    before = (out / "full.tar.xz").stat().st_mtime_ns
    res = tmp_path / "results"
    shutil.copytree(dest / "quick" / "lab2", res / "quick" / "lab2")
    new = ev.pack(res, out)
    assert new["full"] == index["full"]
    assert (out / "full.tar.xz").stat().st_mtime_ns == before
    assert (out / "full.tar.xz").read_bytes() == (EVIDENCE / "full.tar.xz").read_bytes()


def test_a_lab_not_run_again_keeps_its_evidence(unpacked, tmp_path):
    """Packing results that hold only lab 1 replaces lab 1 and carries every other lab over."""
    dest, index = unpacked
    out = tmp_path / "evidence"
    shutil.copytree(EVIDENCE, out)
    only = tmp_path / "results"
    shutil.copytree(dest / "quick" / "lab1", only / "quick" / "lab1")
    rec = only / "quick" / "lab1" / "record.json"
    r = json.loads(rec.read_text())
    r["created"] = "a later run"
    rec.write_text(json.dumps(r))
    new = ev.pack(only, out)
    assert new["quick"]["labs"]["lab1"]["created"] == "a later run"
    for lab in ("lab2", "lab3", "lab4", "lab5"):
        assert new["quick"]["labs"][lab] == index["quick"]["labs"][lab], lab


def test_an_altered_archive_is_refused_in_one_line(tmp_path):
    out = tmp_path / "evidence"
    shutil.copytree(EVIDENCE, out)
    arch = out / "quick.tar.xz"
    data = bytearray(arch.read_bytes())
    data[len(data) // 2] ^= 0xFF
    arch.write_bytes(bytes(data))
    one_line_error(scorecard("--evidence", out, "--out", tmp_path / "s.md"), "quick.tar.xz", "altered")
    assert not (tmp_path / "s.md").exists()
    p = subprocess.run([sys.executable, "-m", "grading.evidence", "check", "--evidence", str(out)],
                       cwd=KIT, capture_output=True, text=True)
    assert p.returncode == 2
    one_line_error(p, "altered")


def test_a_table_edited_and_packed_again_fails_the_record_check(unpacked, tmp_path):
    """Editing a run's table and packing it again makes a consistent archive, but the table no
    longer matches the hash the run's record keeps: the scorecard refuses the lab."""
    dest, _ = unpacked
    res = tmp_path / "results"
    shutil.copytree(dest / "quick", res / "quick")
    flows = sorted((res / "quick" / "lab3").rglob("flows.csv"))[0]
    flows.write_text(flows.read_text().replace("spline", "bbr", 1) + "\n")
    out = tmp_path / "evidence"
    ev.pack(res, out)
    p = scorecard("--evidence", out, "--out", tmp_path / "s.md")
    assert p.returncode != 0
    assert "lab3 quick results" in p.stderr and "hash differs" in p.stderr, p.stderr[-1500:]
    assert not (tmp_path / "s.md").exists()


def _bad_archive(tmp_path, add):
    out = tmp_path / "evidence"
    out.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        add(tar)
    data = buf.getvalue()
    (out / "quick.tar.xz").write_bytes(data)
    (out / "index.json").write_text(json.dumps(
        {"quick": {"archive": "quick.tar.xz", "sha256": ev._sha256(data), "bytes": len(data), "labs": {}}}))
    return out


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "no-lab"])
def test_unsafe_members_are_refused_before_anything_is_written(tmp_path, kind):
    def add(tar):
        name = {"dotdot": "lab1/../../escape", "absolute": "/tmp/escape",
                "symlink": "lab1/link", "no-lab": "elsewhere/x.csv"}[kind]
        info = tarfile.TarInfo(name)
        if kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 2
            tar.addfile(info, io.BytesIO(b"x\n"))
    out = _bad_archive(tmp_path, add)
    dest = tmp_path / "dest"
    p = subprocess.run([sys.executable, "-m", "grading.evidence", "unpack", str(dest), "--evidence", str(out)],
                       cwd=KIT, capture_output=True, text=True)
    assert p.returncode == 2
    one_line_error(p, "not a file under a lab's folder")
    assert not dest.exists()
    assert not (tmp_path / "escape").exists()


def test_an_index_that_does_not_match_its_archive_is_refused(tmp_path):
    out = tmp_path / "evidence"
    shutil.copytree(EVIDENCE, out)
    index = json.loads((out / "index.json").read_text())
    lab = sorted(index["quick"]["labs"])[0]
    index["quick"]["labs"][lab]["runs"] = 999
    (out / "index.json").write_text(json.dumps(index))
    one_line_error(scorecard("--evidence", out, "--out", tmp_path / "s.md"), f"quick/{lab}", "does not match")


def test_unpack_writes_nothing_over_a_users_folder(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    p = subprocess.run([sys.executable, "-m", "grading.evidence", "unpack", str(dest)],
                       cwd=KIT, capture_output=True, text=True)
    assert p.returncode == 2
    one_line_error(p, "not an empty folder")
    assert sorted(x.name for x in dest.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("what", ["missing", "garbage", "wrong-key"])
def test_a_missing_or_malformed_index_is_one_line(tmp_path, what):
    out = tmp_path / "evidence"
    out.mkdir()
    if what == "garbage":
        (out / "index.json").write_bytes(b"\xff\xfe not json")
    elif what == "wrong-key":
        (out / "index.json").write_text(json.dumps({"nightly": {}}))
    one_line_error(scorecard("--evidence", out, "--out", tmp_path / "s.md"), "index.json")


def test_a_release_run_names_the_kit_commit_it_came_from():
    """index.json's commits: a run made in a student release names the release's commit and the
    kit commit the release was made from; a kit run names its commit alone."""
    evidence = ev
    def files(kit):
        return {"record.json": json.dumps({"mode": "quick", "runs": {"exp/r1": {}}}).encode(),
                "exp/r1/manifest.json": json.dumps({"kit": kit, "kernel": "6.1.0"}).encode()}
    s = evidence._summary("lab1", files({"commit": "a" * 40, "dirty": False,
                                         "release_of": {"commit": "b" * 40, "dirty": True}}))
    assert s["commits"] == ["aaaaaaaaaa (release of kit bbbbbbbbbb+dirty)"]
    assert evidence._summary("lab1", files({"commit": "c" * 40}))["commits"] == ["cccccccccc"]

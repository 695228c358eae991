"""What the grader checks in a submission's results beyond its hidden tests, in the trusted
parent, on the copy taken before any student code ran (grading/grade.py calls it):

* the record: every file the answers read is listed in `submission/<lab>/record.json` with its
  SHA-256, and still has it -- the engine's tables, manifest and raw iperf3 JSON of each run
  (labkit.write_record), lab 5's `live.csv` (tuner_support.record_live);
* cross-checks between sources the run wrote independently, which a record rewritten with the
  public labkit.write_record does not fix: iperf3's own JSON (its per-interval byte counts)
  against iperf.csv, the sockets' bytes_acked in ss.csv against the bytes iperf3 received, and
  the link's physics (no flow faster than the link's configured rate, no socket's minimum RTT
  below the path's configured delays);
* a digest per raw file (raw/* of every run, live.csv), so that `duplicates()` finds the same raw
  log in two students' submissions.

    problems(submission_dir, lab) -> [one-line problem, ...]     ([] for a genuine run)
    raw_digests(submission_dir)   -> {relative path: sha256}
    duplicates({student: digests}) -> {student: [other students with a same raw file]}
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

HASHED_SUFFIXES = (".csv", ".json")
RATE_SLACK = 1.05           # a flow may not beat the configured rate by more than this
RTT_SLACK = 0.97            # nor a socket's minimum RTT undercut the path's delays by more
ACKED = (0.8, 1.2)          # ss's bytes_acked over iperf3's received bytes, per flow
MIN_RAW_BYTES = 64          # smaller raw files (an empty table) say nothing about who ran them


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _hashed(run_dir: Path) -> list[Path]:
    """As labkit.hashed_files: the run's tables and manifest, and iperf3's raw JSON."""
    out = [p for p in sorted(run_dir.iterdir()) if p.is_file() and p.suffix in HASHED_SUFFIXES]
    if (run_dir / "raw").is_dir():
        out += sorted((run_dir / "raw").glob("iperf-*.json"))
    return out


def _record(lab_dir: Path):
    p = lab_dir / "record.json"
    if not p.is_file():
        return None
    try:
        rec = json.loads(p.read_text())
    except ValueError:
        return {}
    return rec if isinstance(rec, dict) else {}


def problems(submission: Path, lab: str) -> list[str]:
    lab_dir = Path(submission) / lab
    if not lab_dir.is_dir():
        return [f"no submission/{lab}/ folder"]
    rec = _record(lab_dir)
    if rec is None:
        return [f"no submission/{lab}/record.json (run the experiment cell in the lab VM)"]
    if not rec:
        return [f"submission/{lab}/record.json does not parse"]
    bad: list[str] = []
    # lab 5: the live log
    live = lab_dir / "live.csv"
    files = rec.get("files") if isinstance(rec.get("files"), dict) else {}
    if live.is_file() or "live.csv" in files:
        if "live.csv" not in files:
            bad.append("live.csv is not in the record")
        elif not live.is_file():
            bad.append("live.csv: missing")
        elif sha256(live) != files["live.csv"]:
            bad.append("live.csv: changed after the run (hash differs)")
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    for rel, hashes in runs.items():
        d = lab_dir / rel
        if not d.is_dir() or ".." in Path(rel).parts:
            bad.append(f"{rel}: missing")
            continue
        hashes = hashes if isinstance(hashes, dict) else {}
        for p in _hashed(d):
            name = str(p.relative_to(d))
            if name not in hashes:
                bad.append(f"{rel}/{name}: not in the record")
            elif sha256(p) != hashes[name]:
                bad.append(f"{rel}/{name}: changed after the run (hash differs)")
        for name in hashes:
            if not (d / name).is_file():
                bad.append(f"{rel}/{name}: missing")
        bad += [f"{rel}: {p}" for p in cross_check(d)]
    return bad


def _max_rate(m: dict) -> float | None:
    prof = m.get("profile") or {}
    rates = [float(v) for side in ("down", "up") for v in [(prof.get(side) or {}).get("rate")] if v]
    for key in ("down_rate", "up_rate"):
        rates += [float(x) for x in ((prof.get("dynamics") or {}).get(key) or []) if x]
    return max(rates) if rates else None


def _receiver_seconds(doc: dict) -> float:
    """The receiver's own span of a flow in iperf3's end sums (0 when it is not there)."""
    try:
        return float(((doc.get("end") or {}).get("sum_received") or {}).get("seconds") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0.0


def cross_check(d: Path) -> list[str]:
    """The run's independent sources against each other (one line each)."""
    import pandas as pd
    bad = []
    try:
        m = json.loads((d / "manifest.json").read_text())
        flows = pd.read_csv(d / "flows.csv", low_memory=False)     # as labkit reads them: the
        iperf = pd.read_csv(d / "iperf.csv", low_memory=False)     # grading process's memo serves both
        ss = pd.read_csv(d / "ss.csv", low_memory=False)
    except (OSError, ValueError) as e:
        return [f"a table does not read ({type(e).__name__})"]
    rate, rtt = _max_rate(m), _base_rtt(m)
    for _, f in flows.iterrows():
        n = int(f["flow"])
        raw = d / "raw" / f"iperf-{n}.json"
        try:
            j = json.loads(raw.read_text())
        except (OSError, ValueError):
            bad.append(f"flow {n}: no iperf3 JSON")
            continue
        intervals = j.get("intervals") if isinstance(j, dict) else None
        if not intervals or not (j.get("start") or {}).get("timestamp"):
            bad.append(f"flow {n}: raw/iperf-{n}.json is not iperf3's output (no intervals, no "
                       "timestamp): a synthetic run")
            continue
        try:
            own = sum(int(i["sum"]["bytes"]) for i in intervals)
        except (KeyError, TypeError, ValueError):
            bad.append(f"flow {n}: iperf3's intervals do not parse")
            continue
        rows = iperf[(iperf["flow"] == n) & (iperf["side"] == "sender")]
        table = int(rows["bytes"].sum())
        if abs(own - table) > max(1448, 0.001 * own):
            bad.append(f"flow {n}: iperf.csv's sender bytes ({table}) differ from iperf3's own "
                       f"intervals ({own})")
        got = float(f.get("received_bytes") or 0)
        tcp = str(f.get("protocol", "tcp")) in ("tcp", "nan")
        s = ss[ss["flow"] == n] if "flow" in ss.columns else ss.iloc[0:0]
        if "bytes_acked" not in ss.columns:
            bad.append("ss.csv has no bytes_acked column: not the engine's socket samples")
        elif tcp and got > 0 and len(s):        # (no samples: a UDP flow, or sampling off)
            acked = float(s.groupby("local_port")["bytes_acked"].max().sum())
            if not ACKED[0] <= acked / got <= ACKED[1]:
                bad.append(f"flow {n}: the sockets acknowledged {acked:.0f} B, iperf3 says "
                           f"{got:.0f} B were received")
        # The receiver counts until the client's final control message reaches it, which a
        # lost segment can hold back (kept lab 3 runs at 10 % loss: 2.0 s of sending, up to
        # 2.3 s of receiving what the sender's buffer still held): the bound is the link's rate
        # over the longer of the sender's span and the receiver's own.
        span = max(float(f.get("t_end", 0) or 0) - float(f.get("t_start", 0) or 0),
                   _receiver_seconds(j))
        if rate and span > 0 and got * 8 / span > RATE_SLACK * rate:
            bad.append(f"flow {n}: {got * 8 / span / 1e6:.1f} Mbit/s on a {rate / 1e6:g} Mbit/s link")
        # ... and no packet crosses the path faster than its propagation delay
        if rtt and "min_rtt_ms" in s.columns:
            seen = pd.to_numeric(s["min_rtt_ms"], errors="coerce")
            seen = seen[seen > 0]
            if len(seen) and seen.min() < RTT_SLACK * rtt * 1e3:
                bad.append(f"flow {n}: a {seen.min():.1f} ms RTT on a path of {rtt * 1e3:g} ms")
    return sorted(set(bad), key=bad.index)


def _base_rtt(m: dict) -> float | None:
    """The shortest RTT the path allows (s): both directions' delays less their jitter (netem
    draws each packet's delay within delay +- jitter); None when dynamics change the delay."""
    prof = m.get("profile") or {}
    if prof.get("dynamics"):
        return None
    try:
        return sum(max(0.0, float(d.get("delay") or 0) - float(d.get("jitter") or 0))
                   for d in (prof.get(side) or {} for side in ("down", "up"))) or None
    except (TypeError, ValueError, AttributeError):
        return None


def raw_digests(submission: Path) -> dict[str, str]:
    """{path under submission/: sha256} of every raw log (runs' raw/ files, lab 5's live.csv)."""
    out = {}
    sub = Path(submission)
    if not sub.is_dir():
        return out
    for p in sorted(sub.rglob("*")):
        if not p.is_file() or p.is_symlink() or p.stat().st_size < MIN_RAW_BYTES:
            continue
        rel = p.relative_to(sub)
        if "raw" in rel.parts[:-1] or p.name == "live.csv":
            out[str(rel)] = sha256(p)
    return out


def duplicates(digests: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """{student: sorted other students who handed in at least one same raw file}."""
    owners: dict[str, set[str]] = {}
    for student, files in digests.items():
        for h in set(files.values()):
            owners.setdefault(h, set()).add(student)
    out: dict[str, set[str]] = {}
    for who in owners.values():
        if len(who) > 1:
            for s in who:
                out.setdefault(s, set()).update(who - {s})
    return {s: sorted(o) for s, o in sorted(out.items())}


def reads_results(test_source: str) -> bool:
    """Whether a test file's cases read the submission's own results (its measured answers)."""
    return any(k in test_source for k in ("verify(", "live.csv", "submission", "SUB /"))

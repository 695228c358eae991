"""What the grader checks in a submission's results beyond its hidden tests, in the trusted
parent, on the copy taken before any student code ran (grading/grade.py calls it):

* the record: every file the answers read is listed in `submission/<lab>/record.json` with its
  SHA-256, and still has it -- the engine's tables, manifest and raw iperf3 JSON of each run
  (labkit.write_record), lab 5's `live.csv` (tuner_support.record_live);
* cross-checks between sources the run wrote independently, which a record rewritten with the
  public labkit.write_record does not fix: iperf3's own JSON (its per-interval byte counts)
  against iperf.csv, the sockets' bytes_acked in ss.csv against the bytes iperf3 received, and
  the link's physics (no flow faster than the link's configured rate, no socket's minimum RTT
  below the path's configured delays), and what the kernel and the wire saw: tcp_probe's
  acknowledged sequence and its congestion windows (cwnd over srtt), the capture's highest
  sequence (tsg.csv) and each bottleneck's qdisc byte counter against the bytes iperf3's
  receivers got;
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
# What the kernel and the wire saw of a flow against iperf3's received bytes.  Genuine runs (the
# kit's kept runs of labs 1-4, 23-27 Nov 2026): tcp_probe's acknowledged advance 1.000 of them;
# the capture's highest sequence 1.01-1.02 (0.91 in a 23 Nov run whose capture stopped before the
# flow's last bytes); each bottleneck's root qdisc over the run 1.05-1.23 of the bytes its flows'
# receivers got (headers and retransmissions).  tcp_probe's advance may exceed iperf3's count:
# the receiver stops counting at the end of its test while the kernel still delivers and
# acknowledges what was in flight, and behind a full 8-BDP queue that is much (a browser test's
# lab 4 run, 28 Nov 2026: Cubic without HyStart on GEO, 1.074).  The lower bound is what catches
# bytes added to iperf3's tables; the upper one allows a drained queue of 8 BDP and more.
PROBE_ACKED = (0.95, 1.25)
# ... and against what the flow's congestion windows allowed: per socket, cwnd x MSS / srtt over
# time (a window-limited sender delivers at most about one window per smoothed RTT).  No kept
# genuine run has tcp_probe samples (labs 1-3 turn it off, only lab 4 has it on), so the ratio was
# measured on the same two kernel variables as ss.csv samples them (cwnd, rtt_ms = srtt) at
# 10-20 Hz, every flow of the kit's reference runs and the student-link run (34 flows, labs 1-2,
# 22-27 Nov 2026): received / allowed 0.91-1.02 for single-stream Reno, CUBIC, Vegas, Hybla and
# Westwood (the highest, 1.017, a lab 2 p1 Reno flow), 0.51-0.79 for BBR (its cwnd is twice the
# BDP) and 0.57-0.77 for lab 2's 10-stream flows.  The margin is 8 % over the highest: a flow
# 25 % faster than it ran is caught when its own ratio was 0.88 or more (every single-stream
# loss- or delay-based flow measured; 20 % faster: 0.92 or more, all but the Hybla flow's 0.914),
# not a BBR or a 10-stream flow.  (The per-socket minimum RTT instead of srtt spreads them more:
# 0.08-0.93.)  On tcp_probe's own per-ACK samples, a genuine lab 4 quick run (28 Nov 2026, seven
# experiments, GEO and Wi-Fi, an ACK stall among them): 0.50-0.96
# (tests/host/data/lab4-run.tar.xz).  A flow without tcp_probe samples is bounded by its ss
# samples, the data the constant was measured on.  tcp_probe has no MSS column: 1448 B, every profile's (MTU 1500, TCP
# timestamps; ss.csv's mss on every run).
WINDOW_SLACK = 1.10
WINDOW_MSS = 1448
CAPTURE_MIN = 0.85
QDISC_MIN = 0.99
# ss's bytes_acked over iperf3's received bytes, per flow.  The lower bound counts what was in
# flight at each socket's last sample as well: a receiver that closes with a hole in its data
# resets the sender's socket, whose last sample can come before the ACKs for the last read
# bytes (a lab 3 run at 20 % loss, CI 29 Nov 2026: the hole filled in the test's last 48 ms,
# 37,648 of its 92,672 B read then; the last sample, 50 ms before the reset, had 55,062 B
# acknowledged and 28 segments in flight).
ACKED = (0.8, 1.2)
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


def _in_flight(ss) -> float:
    """Bytes a flow's sockets had sent but not seen acknowledged at each one's last sample."""
    import pandas as pd
    if "unacked" not in ss.columns or "t" not in ss.columns:
        return 0.0
    last = ss.sort_values("t").groupby("local_port").last()
    mss = pd.to_numeric(last["mss"], errors="coerce") if "mss" in last else None
    mss = WINDOW_MSS if mss is None else mss.fillna(WINDOW_MSS)
    segs = pd.to_numeric(last["unacked"], errors="coerce").fillna(0).clip(lower=0)
    return float((segs * mss).sum())


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
    probe, tsg, qdisc = _optional(d, "probe.csv"), _optional(d, "tsg.csv"), _optional(d, "qdisc.csv")
    ports = {}                                  # the manifest's record of each flow's iperf3 port
    for mf in m.get("flows") or []:
        try:
            ports[int(mf["flow"])] = int(mf["port"])
        except (KeyError, TypeError, ValueError):
            pass
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
            flight = _in_flight(s)
            if not (ACKED[0] * got <= acked + flight and acked <= ACKED[1] * got):
                bad.append(f"flow {n}: the sockets acknowledged {acked:.0f} B"
                           + (f" (and had {flight:.0f} B in flight at their last sample)"
                              if flight else "") + f", iperf3 says {got:.0f} B were received")
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
        if got > 0:
            bad += [f"flow {n}: {x}" for x in _flow_sources(n, ports.get(n), got, probe, tsg)]
        # without tcp_probe samples (labs 1-3 turn it off), ss's: the same two variables at 20 Hz
        if tcp and got > 0 and len(s) and not _probed(probe, n) and \
                {"local_port", "t", "cwnd", "rtt_ms"} <= set(s.columns):
            allowed = _window_allowed(pd.DataFrame({
                "local_port": s["local_port"], "t": s["t"], "snd_cwnd": s["cwnd"],
                "srtt_us": pd.to_numeric(s["rtt_ms"], errors="coerce") * 1000}))
            if allowed > 0 and got > WINDOW_SLACK * allowed:
                bad.append(f"flow {n}: its congestion windows (ss's cwnd over rtt) allowed "
                           f"{allowed:.0f} B, iperf3 says {got:.0f} B were received")
    bad += _bottleneck(flows, qdisc)
    return sorted(set(bad), key=bad.index)


def _optional(d: Path, name: str):
    """A table the run may not have written (its measurement off): None when absent or empty."""
    import pandas as pd
    try:
        df = pd.read_csv(d / name, low_memory=False)
    except (OSError, ValueError):
        return None
    return df if len(df) else None


def _advance(seq) -> float:
    """How far a 32-bit sequence number moved over its samples (wrap-around undone)."""
    step = seq.astype("float64").diff().dropna() % 2 ** 32
    return float(step[step < 2 ** 31].sum())


def _flow_sources(n: int, port: int | None, got: float, probe, tsg) -> list[str]:
    """A flow's received bytes against what the kernel and the wire saw of it: tcp_probe's
    snd_una, the ACKed sequence (every ACK of the flow's sockets), and its congestion windows
    over their smoothed RTTs; the capture's highest sequence number (at the sender, so at least
    what arrived)."""
    bad = []
    if probe is not None and {"flow", "local_port", "snd_una", "t"} <= set(probe.columns):
        p = probe[probe["flow"] == n]
        if len(p):
            acked = sum(_advance(g.sort_values("t")["snd_una"]) for _, g in p.groupby("local_port"))
            if not PROBE_ACKED[0] <= acked / got <= PROBE_ACKED[1]:
                bad.append(f"tcp_probe saw {acked:.0f} B acknowledged, iperf3 says {got:.0f} B "
                           "were received")
    if probe is not None and {"flow", "local_port", "t", "snd_cwnd", "srtt_us"} <= set(probe.columns):
        allowed = _window_allowed(probe[probe["flow"] == n])
        if allowed > 0 and got > WINDOW_SLACK * allowed:
            bad.append(f"its congestion windows (tcp_probe's cwnd over srtt) allowed {allowed:.0f} B, "
                       f"iperf3 says {got:.0f} B were received")
    if port is not None and tsg is not None and {"sport", "dport", "seq", "len"} <= set(tsg.columns):
        t = tsg[((tsg["sport"] == port) | (tsg["dport"] == port)) & (tsg["len"] > 0)]
        if len(t):
            sent = sum(float((g["seq"] + g["len"]).max()) for _, g in t.groupby(["sport", "dport"]))
            if sent < CAPTURE_MIN * got:
                bad.append(f"the capture saw {sent:.0f} B sent, iperf3 says {got:.0f} B were received")
    return bad


def _probed(probe, n: int) -> bool:
    """Whether tcp_probe recorded flow `n`'s windows (then its samples, per ACK, are the ones
    the window bound reads)."""
    return (probe is not None and {"flow", "snd_cwnd", "srtt_us"} <= set(probe.columns)
            and bool((probe["flow"] == n).any()))


def _window_allowed(p) -> float:
    """The bytes a flow's congestion windows allowed, as tcp_probe saw them: per socket, over its
    samples in time order, cwnd x WINDOW_MSS / srtt held until the next sample, summed over the
    sockets.  A sample without a window or an RTT (srtt 0 before the first measurement, a blank)
    is left out; 0 when no socket has two usable samples (no verdict)."""
    import pandas as pd
    total = 0.0
    for _, g in p.groupby("local_port"):
        s = pd.DataFrame({"t": pd.to_numeric(g["t"], errors="coerce"),
                          "cwnd": pd.to_numeric(g["snd_cwnd"], errors="coerce"),
                          "srtt": pd.to_numeric(g["srtt_us"], errors="coerce")}).dropna()
        s = s[(s["cwnd"] > 0) & (s["srtt"] > 0)].sort_values("t", kind="stable")
        dt = -s["t"].diff(-1).fillna(0)                 # to the next usable sample (s)
        total += float((s["cwnd"] * WINDOW_MSS / (s["srtt"] / 1e6) * dt).sum())   # srtt_us: us
    return total


def _bottleneck(flows, qdisc) -> list[str]:
    """Each direction's bottleneck (its root qdisc's byte counter, over the whole run) carried at
    least the bytes its flows' receivers got: every one crossed it, with its headers.  Over the
    whole run, not flow by flow: in a kept lab 2 run of 22 Nov 2026 the counter of a tbf
    bottleneck stood still for a second while a flow's receiver got 0.5 MB, so one flow's window
    held 0.76 of its bytes (the whole run: 1.08)."""
    need = {"direction", "parent", "node", "dev", "bytes"}
    if qdisc is None or not need <= set(qdisc.columns) or "received_bytes" not in flows.columns:
        return []
    bad = []
    dirn = (flows["direction"] if "direction" in flows.columns else flows["flow"].map(lambda _: "down"))
    for side in ("down", "up"):
        got = float(_number_sum(flows.loc[dirn == side, "received_bytes"]))
        root = qdisc[(qdisc["direction"] == side) & (qdisc["parent"] == "root")]
        if got <= 0 or not len(root):
            continue
        carried = max(float(g["bytes"].max() - g["bytes"].min()) for _, g in root.groupby(["node", "dev"]))
        if carried < QDISC_MIN * got:
            bad.append(f"the {side} bottleneck carried {carried:.0f} B, its flows' receivers got {got:.0f} B")
    return bad


def _number_sum(values) -> float:
    """The sum of a column's numbers (blanks count 0)."""
    import pandas as pd
    return float(pd.to_numeric(values, errors="coerce").fillna(0).sum())


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

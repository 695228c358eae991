"""Small, real-looking lab 1 result folders for the grading tests and the benchmark.

    from grading import fixtures
    fixtures.lab1_submission(folder, notebook, tamper=None)

writes `folder/lab1.ipynb` (a copy of `notebook`) and `folder/submission/lab1/` with three runs
(wired, wifi, loss) laid out as the engine writes them -- manifest.json, its fidelity verdict beside it,
the tables, raw iperf3 JSON, tsg.csv -- and the record of their hashes, as labkit.run_lab leaves
them.  The links are the kit's profiles (topologies/wired.toml: 50 Mbit/s, 40 ms RTT; wifi.toml:
50 Mbit/s, 6 ms RTT); as in labs/lab1/*/, each experiment's first flow starts 2 s into the run,
after the idle pings.  Every number follows from simple models (a sawtooth cwnd for Cubic and
Reno, a few queued packets for Vegas in its own vegas:(...) block, BBR's gains), and the numbers
the autograder holds against reference bands (throughput, Vegas' Diff and queue) are put at the
middle of the bands in labs/lab1/reference.csv, so its checks pass whatever the reference runs gave.
`tamper="edit"` then multiplies BBR's bytes in the wired iperf.csv by 1.5 after the record was
written: a fabricated result.

These runs are synthetic: the grader's cross-checks (grading/integrity.py) find them (iperf3's
raw JSON has no intervals, ss.csv no bytes_acked), so their measured answers score 0.  A genuine
run for the tests and the benchmark is `real_lab1_results(folder)`: a quick-mode lab 1 run made
in the lab VM, kept in tests/host/data/reference-runs.tar.xz.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

KIT = Path(__file__).resolve().parents[1]
CCAS = ("reno", "cubic", "vegas", "bbr")
LINK = {"wired": (50e6, 0.020), "wifi": (50e6, 0.003)}       # (rate bit/s, one-way delay s)
LEAD = 2.0              # s of idle pings before the first flow
SHARE = {"reno": 0.9, "cubic": 0.92, "vegas": 0.6, "bbr": 0.94}
QUEUE_MS = {"reno": 12.0, "cubic": 14.0, "vegas": 1.0, "bbr": 4.0}


def _labkit():
    sys.path.insert(0, str(KIT / "notebooks"))
    import labkit
    return labkit


def _write(d: Path, name: str, rows: list[dict]) -> None:
    sys.path.insert(0, str(KIT))
    from cclab.results import TABLES
    cols = TABLES.get(name) or list(rows[0].keys())
    pd.DataFrame(rows, columns=cols).to_csv(d / f"{name}.csv", index=False)


def _mid(metric: str, key: str) -> float | None:
    """The middle of lab 1's quick-mode reference band for (metric, key), if there is one."""
    ref = pd.read_csv(KIT / "labs" / "lab1" / "reference.csv", comment="#")
    row = ref[(ref["mode"] == "quick") & (ref["metric"] == metric) & (ref["key"] == key)]
    return float((row["lo"].iloc[0] + row["hi"].iloc[0]) / 2) if len(row) else None


def _run(base: Path, experiment: str, profile: str, ccas, dur: float, gap: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    d = base / experiment / f"20260101-00000{seed}-1"
    (d / "raw").mkdir(parents=True)
    rate, delay = LINK[profile] if profile in LINK else (20e6, 0.010)
    rtt = 2 * delay
    flows, iperf, ss, ping = [], [], [], []
    for k, cca in enumerate(ccas):
        n = k + 1
        t0 = LEAD + k * (dur + gap)
        mid = _mid("throughput_mbps", f"{profile}/{cca}") if experiment != "lab1-loss" else None
        bps = mid * 1e6 if mid is not None else rate * SHARE[cca]
        sent = 0
        for i in range(int(dur / 0.1)):
            b = int(bps * 0.1 / 8 * (1 + 0.02 * rng.standard_normal()))
            sent += b
            iperf.append({"flow": n, "side": "sender", "stream": 5, "t_start": round(t0 + i * 0.1, 3),
                          "t_end": round(t0 + (i + 1) * 0.1, 3), "bytes": b, "bits_per_second": b * 80,
                          "retransmits": 0, "snd_cwnd": 0, "rtt_us": int(rtt * 1e6)})
        recv = sent - 1448 * 3
        rcv = [dict(r, side="receiver", retransmits=None, snd_cwnd=None, rtt_us=None)
               for r in iperf if r["flow"] == n and r["side"] == "sender"]
        rcv[-1]["bytes"] -= 1448 * 3
        iperf += rcv
        mean_rtt = rtt * 1e3 + QUEUE_MS[cca]
        flows.append({"flow": n, "cca": cca, "direction": "down", "pair": 1, "sender": "cc-s1",
                      "receiver": "cc-c1", "port": 5201 + k, "protocol": "tcp", "streams": 1,
                      "start": t0, "duration": dur, "cca_iperf": cca, "cca_ss": cca,
                      "t_start": t0, "t_end": t0 + dur, "sent_bytes": sent, "received_bytes": recv,
                      "throughput_bps": recv * 8 / dur, "retransmits": 30, "exit_code": 0})
        bdp = rate * rtt / 8 / 1448
        vq, vd = _mid("vegas_queue_pkts", f"{profile}/vegas"), _mid("vegas_diff_pkts", f"{profile}/vegas")
        vq = 12.0 if vq is None else vq
        vd = 3.0 if vd is None else vd
        for j, t in enumerate(np.arange(t0 + 0.05, t0 + dur, 0.05)):
            info = None
            if cca in ("cubic", "reno"):
                cyc = (t - t0) % 1.5
                cw = int(2 * bdp * (0.7 + 0.3 * cyc / 1.5)) if t - t0 > 0.4 else int(10 * 2 ** ((t - t0) / rtt))
                cw = min(cw, int(2 * bdp))
            elif cca == "vegas":
                cw = int(bdp + 4)
                base_us = int(rtt * 1e6)
                info = (f"vegas:(enabled:1,rttcnt:{20 + j % 60},rtt:{base_us},"
                        f"minrtt:{int(base_us * (1 + vd / cw))})")
            else:
                cw = int(2 * bdp)
                g = 2.88672 if t - t0 < 0.3 else (0.34657 if t - t0 < 0.35 else [1.25, 0.75, 1, 1, 1, 1, 1, 1][j % 8])
                info = f"bbr:(bw:{bps / 1e6:.1f}Mbps,mrtt:{rtt * 1e3:g},pacing_gain:{g},cwnd_gain:2)"
            r = mean_rtt + 0.5 * rng.standard_normal()
            if cca == "vegas":        # the smoothed RTT that shows vq packets queued
                r = rtt * 1e3 / (1 - vq / cw) + 0.05 * rng.standard_normal()
            ss.append({"t": round(float(t), 3), "flow": n, "host": "cc-s1", "local_port": 40000 + k,
                       "peer_port": 5201 + k, "cca": cca, "cwnd": cw, "mss": 1448,
                       "rtt_ms": round(r, 3), "rttvar_ms": 0.5, "min_rtt_ms": rtt * 1e3,
                       "module_info": info})
        (d / "raw" / f"iperf-{n}.json").write_text(json.dumps({
            "start": {"connected": [{"local_port": 40000 + k}]},
            "end": {"sum_sent": {"bytes": sent}, "sum_received": {"bytes": recv},
                    "sender_tcp_congestion": cca}}))
    for i, t in enumerate(np.arange(-0.4, LEAD + len(ccas) * (dur + gap), 0.2)):
        ping.append({"t": round(float(t), 3), "src": "cc-c1", "dst": "cc-s1", "seq": i + 1,
                     "rtt_ms": round(rtt * 1e3 + 0.05 + (QUEUE_MS["cubic"] if t >= LEAD else 0), 3)})
    for name, rows in (("flows", flows), ("iperf", iperf), ("ss", ss), ("ping", ping)):
        _write(d, name, rows)
    for name in ("probe", "qdisc", "changes"):
        sys.path.insert(0, str(KIT))
        from cclab.results import BESIDE, TABLES
        pd.DataFrame(columns=TABLES[name]).to_csv(d / f"{name}.csv", index=False)
    if experiment == "lab1-loss":
        rows, seq = [], 1
        for i, t in enumerate(np.arange(LEAD + 0.05, LEAD + dur, 0.001)):
            retrans = 1 if abs(t - LEAD - 1.2) < 5e-4 else 0
            rows.append({"t": round(float(t), 6), "sport": 5201, "dport": 40000, "seq": seq,
                         "ack": 1, "len": 1448, "retrans": retrans, "dupack": 0})
            rows.append({"t": round(float(t) + rtt, 6), "sport": 40000, "dport": 5201, "seq": 1,
                         "ack": seq, "len": 0, "retrans": 0, "dupack": 0})
            seq += 1448
        pd.DataFrame(rows).to_csv(d / "tsg.csv", index=False)
    manifest = {
        "experiment": experiment, "repetition": 1, "repetitions": 1, "status": "complete",
        "error": None, "seed": 1, "start": "2026-01-01T00:00:00.000+00:00", "start_epoch": 1767225600.0,
        "end": "2026-01-01T00:01:00.000+00:00", "kernel": "6.1.0-28-amd64",
        "kit": {"commit": "0" * 40, "dirty": False}, "tools": {"iperf3": "iperf 3.12"},
        "spec": {"name": experiment, "profile": profile,
                 "flow": [{"cca": c, "start": f"{LEAD + k * (dur + gap):g}s", "duration": f"{dur:g}s"}
                          for k, c in enumerate(ccas)]},
        "profile": {"name": profile, "pairs": 1,
                    "down": {"rate": rate, "delay": delay}, "up": {"rate": rate, "delay": delay}},
        "ccas": {c: {"module": f"tcp_{c}", "file": "(built in)", "sha256": None, "loaded": True} for c in ccas},
        "flows": json.loads(pd.read_csv(d / "flows.csv").to_json(orient="records")),
        "beside": dict(BESIDE),
    }
    # the manifest's flows as the engine writes them: ints stay ints
    for f in manifest["flows"]:
        for k in ("sent_bytes", "received_bytes"):
            f[k] = int(f[k])
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (d / "fidelity.json").write_text(json.dumps(
        {"ok": True, "checks": [], "failed": [], "unknown": [], "reasons": []}, indent=2))
    return d


def lab1_results(folder: Path) -> Path:
    """submission/lab1 under `folder` (quick mode), with its record."""
    base = Path(folder) / "submission" / "lab1"
    dirs = [_run(base, "lab1-wired", "wired", CCAS, 5.0, 1.0, 1),
            _run(base, "lab1-wifi", "wifi", CCAS, 5.0, 1.0, 2),
            _run(base, "lab1-loss", "wired", ("cubic",), 4.0, 0.0, 3)]
    _labkit().write_record("lab1", "quick", dirs, root=Path(folder) / "submission")
    return base


REAL_RUNS = KIT / "tests" / "host" / "data" / "reference-runs.tar.xz"


def real_lab1_results(folder, variant: int = 0) -> Path:
    """`folder/submission/` holding a genuine lab 1 quick-mode run from the lab VM (lab1-10 in
    tests/host/data/reference-runs.tar.xz); returns that submission folder.  `variant` > 0 gives
    the same run with other raw-file bytes (iperf3's session cookies rewritten, the raw files the
    record does not keep left out, the record written again), so that several copies graded
    together are not duplicates of each other: the class-wide check compares exact raw files."""
    import tarfile
    import tempfile
    dest = Path(folder) / "submission"
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(REAL_RUNS) as t:
        members = [m for m in t.getmembers() if m.name.startswith("lab1-10/")]
        try:
            t.extractall(tmp, members=members, filter="data")
        except TypeError:       # Python before 3.11.4 has no extraction filters (Debian 12's
            t.extractall(tmp, members=members)     # 3.11.2); the archive is the kit's own
        shutil.copytree(Path(tmp) / "lab1-10", dest)
    if variant:
        labkit = _labkit()
        runs = labkit.run_dirs("lab1", dest)
        for d in runs:
            for p in sorted((d / "raw").iterdir()):
                if p.name.startswith("iperf") and p.suffix == ".json":
                    j = json.loads(p.read_text())
                    j.setdefault("start", {})["cookie"] = f"variant{variant:04d}{p.stem}".ljust(36, "x")[:36]
                    p.write_text(json.dumps(j, indent=2))
                else:
                    p.unlink()
        labkit.write_record("lab1", labkit.run_modes("lab1", dest) or "quick", runs, dest)
    return dest


def lab1_submission(folder, notebook, tamper: str | None = None, results_from: Path | None = None,
                    real: int | None = None) -> Path:
    """`real`: a genuine run (real_lab1_results, that variant) instead of synthetic results."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(notebook, folder / "lab1.ipynb")
    if real is not None:
        real_lab1_results(folder, real)
    elif results_from is not None:
        shutil.copytree(results_from, folder / "submission")
    else:
        lab1_results(folder)
    if tamper == "edit":
        p = next((folder / "submission" / "lab1" / "lab1-wired").glob("*/iperf.csv"))
        df = pd.read_csv(p)
        flows = pd.read_csv(p.parent / "flows.csv")
        bbr = int(flows.loc[flows["cca"] == "bbr", "flow"].iloc[0])
        df.loc[df["flow"] == bbr, "bytes"] = (df.loc[df["flow"] == bbr, "bytes"] * 1.5).astype(int)
        df.to_csv(p, index=False)
    return folder

"""Results: one folder per run, a manifest, tidy CSV tables, and loaders returning DataFrames.

    results/<experiment>/<YYYYmmdd-HHMMSS>-<rep>/
        manifest.json   what ran, where, with what ("status": "complete" or "incomplete");
                        written by the runner alone.  Its "beside" names the files that later
                        steps add next to it (BESIDE):
        fidelity.json   the analysis's fidelity verdict (cclab.analysis.fidelity)
        module_params.json  the kit's module parameters the kernel had during the run (labs 3, 4)
        flows.csv       one row per flow: what was asked, what ran, what it achieved (t_spawn:
                        its iperf3 client started; t_start .. t_end: its test ran)
        iperf.csv       iperf3 intervals, one row per flow, side (sender/receiver), stream, interval
        ss.csv          socket samples (ss -ti) of every sending socket
        probe.csv       per-ACK tcp:tcp_probe events
        qdisc.csv       bottleneck qdisc statistics over time
        ping.csv        ping RTT (idle before the first flow, then under load)
        changes.csv     link changes applied on time-varying links
        holds.csv       the spec's holds as applied: plug block / release_indefinite steps
        cpu.csv         CPU busy fraction per CPU ("all": the machine) during the run
        spline.csv      spline:spline_mode events (when the spec enables that tracepoint)
        search.csv      search:search_exit events (likewise)
        raw/            the tools' own output the tables were made from (and capture pcaps)

Every time column `t` is seconds since the run's start (manifest "start_epoch").  Every file is
written to a temporary name and renamed, so a reader never sees half a file; a run that was
interrupted keeps what it has with "status": "incomplete".

    from cclab import results
    ss = results.load(run_dir, "ss")          # a pandas DataFrame
    runs = results.runs("results/my-exp")     # run folders, oldest first
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from .files import write_atomic  # noqa: F401  (results.write_atomic: the tables' writer)

TABLES = {
    "flows": ["flow", "cca", "direction", "pair", "sender", "receiver", "port", "protocol",
              "streams", "start", "duration", "bytes_requested", "cca_iperf", "cca_ss",
              "t_spawn", "t_start", "t_end", "sent_bytes", "received_bytes", "throughput_bps",
              "retransmits", "mean_rtt_us", "min_rtt_us", "lost_percent", "exit_code"],
    "iperf": ["flow", "side", "stream", "t_start", "t_end", "bytes", "bits_per_second",
              "retransmits", "snd_cwnd", "rtt_us", "rttvar_us", "lost_packets", "packets"],
    "ss": ["t", "flow", "host", "local_port", "peer_port", "cca", "cwnd", "ssthresh", "mss",
           "rtt_ms", "rttvar_ms", "min_rtt_ms", "pacing_rate_bps", "delivery_rate_bps",
           "bytes_acked", "bytes_sent", "bytes_retrans", "retrans", "retrans_total", "lost",
           "unacked", "data_segs_out", "delivered", "app_limited", "module_info"],
    "probe": ["t", "flow", "local_port", "peer_port", "snd_cwnd", "ssthresh", "srtt_us",
              "snd_wnd", "snd_nxt", "snd_una", "data_len"],
    "qdisc": ["t", "node", "dev", "direction", "kind", "handle", "parent", "bytes", "packets",
              "drops", "overlimits", "requeues", "backlog_bytes", "backlog_packets"],
    "ping": ["t", "src", "dst", "seq", "rtt_ms"],
    "changes": ["t_planned", "t_applied", "direction", "rate_bps", "delay_s", "loss_percent",
                "why"],
    "holds": ["t_planned", "t_applied", "direction", "action"],
    "cpu": ["t", "cpu", "busy_frac"],
    "spline": ["t", "flow", "sport", "dport", "old", "new", "cwnd", "bw", "min_rtt_us",
               "fairness"],
    "search": ["t", "flow", "sport", "dport", "reason", "cwnd", "norm_diff", "elapsed_us",
               "bin_us"],
}


def write_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_table(run_dir: Path, name: str, rows: list[dict]) -> Path:
    """Write a table with its standard columns (missing values empty)."""
    columns = TABLES[name]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    # csv writes None as an empty field; keys outside the columns are left out
    w.writerows([r.get(k) for k in columns] for r in rows)
    path = Path(run_dir) / f"{name}.csv"
    write_atomic(path, buf.getvalue())
    return path


# What later steps write beside a run's manifest, by the key a reader finds it under.  The
# runner puts this table in every manifest ("beside"), so a reader without the engine (labkit in
# a student's download, the grader) finds the files from the manifest alone.
BESIDE = {"fidelity": "fidelity.json", "module_params": "module_params.json"}


def beside_name(name) -> str | None:
    """A "beside" entry's file name, if it is a plain JSON file name in the run folder itself."""
    if not isinstance(name, str) or not name.endswith(".json") or name != Path(name).name:
        return None
    return None if name == "manifest.json" or name.startswith(".") else name


def read_manifest(run_dir) -> dict:
    """The manifest, with each file its "beside" names read in under its key.  Runs made before
    the files existed kept those keys inside the manifest; the manifest's own value is then used."""
    run_dir = Path(run_dir)
    with open(run_dir / "manifest.json") as f:
        m = json.load(f)
    beside = m.get("beside") if isinstance(m, dict) else None
    for key, name in (beside.items() if isinstance(beside, dict) else ()):
        name = beside_name(name)
        if name and (run_dir / name).is_file():
            with open(run_dir / name) as f:
                m[key] = json.load(f)
    return m


def write_beside(run_dir, key: str, value) -> Path:
    """Write one of the BESIDE files of a run (atomically).  The manifest is left as it is."""
    path = Path(run_dir) / BESIDE[key]
    write_json(path, value)
    return path


def load(run_dir, table: str = "flows"):
    """One table of a run as a pandas DataFrame (empty, with its columns, if absent)."""
    import pandas as pd
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r} (tables: {', '.join(TABLES)})")
    path = Path(run_dir) / f"{table}.csv"
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=TABLES[table])
    # whole-file type inference: in a long table, a column that is text in some rows and empty in
    # others (ss's module_info: BBR's block, nothing for Cubic) would otherwise get mixed types
    # chunk by chunk and a DtypeWarning
    return pd.read_csv(path, low_memory=False)


def load_all(run_dir) -> dict:
    """Every table of a run, by name."""
    return {name: load(run_dir, name) for name in TABLES}


SUPERSEDED = ".superseded-"      # a run made again (runner.RERUNS): kept, but not one of the runs


def runs(path) -> list[Path]:
    """Run folders under `path` (a run folder, an experiment folder or a results folder); runs
    that were made again (<folder>.superseded-<k>) only when `path` names one."""
    path = Path(path)
    if (path / "manifest.json").exists():
        return [path]
    return sorted(p.parent for p in path.rglob("manifest.json") if SUPERSEDED not in p.parent.name)


def load_runs(path, table: str = "flows", complete_only: bool = True):
    """One table across many runs, with columns experiment, run and repetition prepended."""
    import pandas as pd
    frames = []
    for r in runs(path):
        m = read_manifest(r)
        if complete_only and m.get("status") != "complete":
            continue
        df = load(r, table)
        df.insert(0, "repetition", m.get("repetition"))
        df.insert(0, "run", r.name)
        df.insert(0, "experiment", m.get("experiment"))
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["experiment", "run", "repetition"] + TABLES[table])
    return pd.concat(frames, ignore_index=True)

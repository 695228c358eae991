"""CPU load during a run, as cpu.csv (t, cpu, busy_frac), for the CPU-headroom check
(cclab.analysis.fidelity reads it).

The engine runs it during every run (the `cpu` measurement); it can also run beside other code:

    with CpuSampler(hz=10) as cpu:
        dirs = runner.run(experiment)
    for d in dirs:
        cpu.write(d)          # rows within the run's time span, t relative to its start

busy_frac = 1 - (idle + iowait) / total jiffies since the previous sample, per CPU ("cpu0",
...) and for the machine ("all").  Reading /proc/stat ten times a second costs well under 1 %.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from . import files, results


def read_stat(path: str = "/proc/stat") -> dict[str, tuple[int, int]]:
    """{cpu name: (busy jiffies, total jiffies)}; "cpu" (all) is renamed "all"."""
    out = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("cpu"):
                continue
            p = line.split()
            vals = [int(x) for x in p[1:]]
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
            total = sum(vals[:8])              # guest time is already in user/nice
            out["all" if p[0] == "cpu" else p[0]] = (total - idle, total)
    return out


def busy_fractions(prev: dict, cur: dict) -> dict[str, float]:
    out = {}
    for k, (b, t) in cur.items():
        if k in prev:
            db, dt = b - prev[k][0], t - prev[k][1]
            if dt > 0:
                out[k] = max(0.0, min(1.0, db / dt))
    return out


class CpuSampler:
    def __init__(self, hz: float = 10.0, stat_path: str = "/proc/stat"):
        self.period = 1.0 / hz
        self.stat_path = stat_path
        self.rows: list[tuple[float, str, float]] = []      # (epoch, cpu, busy_frac)
        self._stop = threading.Event()
        self._thread = None

    def _loop(self):
        prev = read_stat(self.stat_path)
        while not self._stop.wait(self.period):
            cur = read_stat(self.stat_path)
            now = time.time()
            for k, v in busy_fractions(prev, cur).items():
                self.rows.append((now, k, v))
            prev = cur

    def start(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def write(self, run_dir, margin: float = 1.0) -> Path:
        """cpu.csv for one run: samples from its start_epoch - margin to its end."""
        m = results.read_manifest(run_dir)
        t0 = float(m["start_epoch"])
        end = m.get("end")
        t_end = None
        if end:
            from datetime import datetime
            try:
                t_end = datetime.fromisoformat(end).timestamp()
            except ValueError:
                t_end = None
        lines = ["t,cpu,busy_frac"]
        for e, k, v in self.rows:
            if e < t0 - margin or (t_end is not None and e > t_end + margin):
                continue
            lines.append(f"{e - t0:.3f},{k},{v:.4f}")
        path = Path(run_dir) / "cpu.csv"
        files.write_atomic(path, "\n".join(lines) + "\n")
        return path

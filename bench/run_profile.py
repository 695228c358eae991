#!/usr/bin/env python3
"""Where a run's time goes, outside its flows: profiles `cclab.runner.run` on one experiment
file, twice in one process (the second run is what each further experiment of a lab notebook
costs), and prints the wall time of each run against its planned timeline and the functions
with the most cumulative time.

    vm/run.sh -- python3 bench/run_profile.py labs/lab3/quick/loss-00.toml [--top 40]
"""
import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))
sys.path.insert(0, str(KIT / "labs"))
sys.path.insert(0, str(KIT / "notebooks"))

from cclab import runner  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    import kmodlab                      # reads lab 3/4 files (their [lab] table) and plain ones
    exp, _ = kmodlab.load_experiment(Path(a.experiment))
    out = Path(tempfile.mkdtemp(prefix="cclab-profile-"))
    for i in (1, 2):
        prof = cProfile.Profile()
        t = time.monotonic()
        prof.enable()
        runner.run(exp, out=out)
        prof.disable()
        took = time.monotonic() - t
        print(f"\n=== run {i}: {took:.1f} s wall, timeline {exp.planned_length():.1f} s, "
              f"outside the timeline {took - exp.planned_length():.1f} s", flush=True)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

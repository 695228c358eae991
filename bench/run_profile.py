#!/usr/bin/env python3
"""Where a run's time goes, outside its flows: profiles `cclab.runner.run` on experiment
files in one process, inside runner.keep_network() as a lab runs them (the first run builds
the network; each later one of the same shape takes it over: what each further experiment of a
lab costs), and prints the wall time of each run against its planned timeline, whether its
network was built or kept, and the functions with the most cumulative time.  One file is run
twice.

    vm/run.sh -- python3 bench/run_profile.py labs/lab3/quick/loss-00.toml [MORE.toml ...] [--top 40]
"""
import argparse
import cProfile
import json
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
    ap.add_argument("experiment", nargs="+")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    import kmodlab                      # reads lab 3/4 files (their [lab] table) and plain ones
    files = a.experiment if len(a.experiment) > 1 else a.experiment * 2
    out = Path(tempfile.mkdtemp(prefix="cclab-profile-"))
    with runner.keep_network():
        for i, f in enumerate(files, 1):
            exp, _ = kmodlab.load_experiment(Path(f))
            prof = cProfile.Profile()
            t = time.monotonic()
            prof.enable()
            d = runner.run(exp, out=out)[-1]
            prof.disable()
            took = time.monotonic() - t
            network = json.loads((d / "manifest.json").read_text()).get("network")
            print(f"\n=== run {i} ({exp.name}, network {network}): {took:.1f} s wall, timeline "
                  f"{exp.planned_length():.1f} s, outside the timeline "
                  f"{took - exp.planned_length():.1f} s", flush=True)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

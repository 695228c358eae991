#!/usr/bin/env python3
"""The highest bottleneck rate at which a run still passes the fidelity verdict in this guest.

    vm/run.sh -- python3 bench/max_fidelity_rate.py [--rates 100,200,300,500,700,1000] [--duration 8]

Runs one bulk cubic flow over the wired profile at each rate (Mbit/s, ascending) with full
instrumentation and CPU sampling, computes the verdict (cclab.analysis.fidelity) and prints a
line per rate with the failed checks.  Stops after two consecutive failures.  Prints the highest
passing rate; target >= 500 Mbit/s.  Exit status 0 if the target is met, 1 if not.
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cclab import runner  # noqa: E402
from cclab.analysis import cpu, fidelity  # noqa: E402
from cclab.spec import Experiment, Flow, Measure  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="100,200,300,500,700,1000")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--target", type=float, default=500.0)
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="cclab-bench-"))
    best, fails = None, 0
    for mbit in sorted(float(r) for r in a.rates.split(",")):
        rate = f"{mbit:g}mbit"
        e = Experiment(name=f"maxrate-{mbit:g}", profile="wired",
                       override={"down": {"rate": rate}, "up": {"rate": rate}},
                       flows=[Flow(cca="cubic", start=2, duration=a.duration)],
                       measure=Measure(ping_interval=0.1), tail=0.5)
        with cpu.CpuSampler(hz=10) as sampler:
            (d,) = runner.run(e, out=out)
        sampler.write(d)
        v = fidelity.write_verdict(d)
        checks = {c["name"]: c for c in v["checks"]}
        lim = checks.get("link_limited", {}).get("measured")
        busy = checks.get("cpu_headroom", {}).get("measured")
        print(f"{mbit:7g} Mbit/s: {'PASS' if v['ok'] else 'FAIL'}  utilisation {lim}  busiest CPU {busy}"
              + ("" if v["ok"] else f"  failed: {', '.join(v['failed'])}"), flush=True)
        if v["ok"]:
            best, fails = mbit, 0
        else:
            fails += 1
            if fails >= 2:
                break
    print(f"\nhighest rate passing the fidelity verdict: {best if best is not None else 'none'} Mbit/s "
          f"(target >= {a.target:g}: {'met' if best and best >= a.target else 'NOT met'})")
    return 0 if best and best >= a.target else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where the time between a lab's runs goes: lab 3/4 experiment files run as the lab command
runs them (kmodlab's module-parameter hooks, one kept network, the fidelity judge), with the
wall time of each named step printed in order, from one clock, without a profiler's overhead.

    vm/run.sh -- python3 bench/run_phases.py labs/lab3/quick/loss-00.toml labs/lab3/quick/loss-01.toml

Each line: seconds since the start, the step's own seconds, the step.  A run's t = 0 is where
its first flow's client starts less that flow's start time; compare it with the end of the
run before (Run.execute's end) for the gap between two runs.
"""
import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(KIT / "notebooks"), str(KIT / "labs"), str(KIT)]

import kmodlab  # noqa: E402
import labkit  # noqa: E402
from cclab import measure, measurements, provenance, results, runner, topo  # noqa: E402
from cclab.analysis import fidelity  # noqa: E402

T0 = time.monotonic()
LOG: list[tuple[float, float, str]] = []
WRAPPED: list[str] = []

STEPS = [(labkit, "_fidelity"), (fidelity, "write_verdict"), (kmodlab, "set_params"),
         (kmodlab, "restore_params"), (kmodlab, "_modprobe"), (runner, "preflight"),
         (runner, "ensure_ccas"), (measure, "missing_events"), (provenance, "tool_versions"),
         (provenance, "loaded_modules"), (topo.Network, "start"), (topo.Network, "reconfigure"),
         (runner.Run, "_snapshot"), (runner.Run, "_cleanup"), (runner.Run, "_tables"),
         (runner.Run, "execute"), (measurements.Iperf, "start_client"), (results, "write_beside")]
MEASUREMENTS = (measurements.Cpu, measurements.Tracer, measurements._Sampler,
                measurements.Capture, measurements.Ping, measurements.Iperf)


def timed(owner, name: str, label: str) -> None:
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def step(*a, **kw):
        began = time.monotonic()
        try:
            return inner(*a, **kw)
        finally:
            LOG.append((began - T0, time.monotonic() - began, label))
    setattr(owner, name, step)
    WRAPPED.append(label)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", nargs="+", help="lab 3 or 4 experiment files, in lab order")
    a = ap.parse_args()
    for owner, name in STEPS:
        timed(owner, name, f"{getattr(owner, '__name__', owner)}.{name}")
    for cls in MEASUREMENTS:
        for name in ("start", "settle", "stop", "tables"):
            if name in cls.__dict__:
                timed(cls, name, f"{cls.__name__}.{name}")
    hooks = kmodlab.ModuleParams()
    out = Path(tempfile.mkdtemp(prefix="cclab-phases-"))
    hooks.begin()
    with runner.keep_network():
        for f in a.experiment:
            exp, extra = hooks.load(Path(f), None, None)
            with hooks.around(exp, extra) as held:
                made = runner.run(exp, out=out, progress=None, judge=labkit.untrusted)
            for d in made:
                hooks.after(d, extra, held)
            LOG.append((time.monotonic() - T0, 0.0,
                        f"=== {exp.name} done (timeline {exp.planned_length():.2f} s)"))
    for began, took, label in LOG:
        print(f"{began:8.2f} {took:7.3f}  {label}")
    # a step that is called through a reference taken before it was wrapped (or that the
    # engine no longer calls) is not timed: say so rather than leave it out of the table
    called = {label for _, _, label in LOG}
    missed = [label for label in WRAPPED if label not in called]
    if missed:
        print(f"not timed (never called through the wrapper): {', '.join(missed)}")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

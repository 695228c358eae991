"""Cellular link traces in mahimahi's format, and a small generator for them.

A trace is a text file with one integer per line: a millisecond at which the link can deliver
one 1500-byte packet.  A millisecond repeated k times delivers k packets; the trace loops when
it ends.  Real traces (e.g. recorded with mahimahi's saturatr) can be dropped into
topologies/traces/ and named in a profile.

The engine does not deliver packet by packet: it averages the trace over windows of `step`
(default 100 ms) and changes the bottleneck rate in place at every window (see dynamics.py).

Generate a trace:
    python3 -m cclab.traces --seconds 60 --mean 10mbit --seed 1 > topologies/traces/mine.down
"""

from __future__ import annotations

import argparse
import bisect
import math
import random
import sys
from pathlib import Path

from . import units
from .schema import MTU
from .units import SpecError

PACKET_BITS = MTU * 8


def parse(text: str, field: str = "trace") -> list[int]:
    """Millisecond timestamps of a trace; refuses anything that is not one."""
    out = []
    last = 0
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if not line.isdigit():
            raise SpecError(field, f"line {n}: expected a whole number of milliseconds, got {line!r}")
        ms = int(line)
        if ms < last:
            raise SpecError(field, f"line {n}: timestamps must not go backwards ({ms} after {last})")
        out.append(ms)
        last = ms
    if not out:
        raise SpecError(field, "the trace is empty")
    if out[-1] == 0:
        raise SpecError(field, "the trace must last at least 1 ms")
    return out


def read(path: Path, field: str = "trace") -> list[int]:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(field, f"cannot read trace {path}: {getattr(e, 'strerror', None) or e}") from None
    return parse(text, field)


def period(trace: list[int]) -> int:
    """The trace's length in ms (it repeats after that)."""
    return trace[-1]


def rates(trace: list[int], step: float, seconds: float) -> list[float]:
    """The rate (bit/s) of each window of `step` seconds over `seconds`, looping the trace."""
    length = period(trace)
    step_ms = step * 1000.0
    n = max(1, math.ceil(seconds / step))
    out = []
    for i in range(n):
        lo, hi = i * step_ms, (i + 1) * step_ms
        out.append(opportunities(trace, lo, hi, length) * PACKET_BITS / step)
    return out


def opportunities(trace: list[int], lo: float, hi: float, length: int) -> int:
    """How many delivery opportunities fall in [lo, hi) ms of the looped trace
    (entry t of loop k stands for the time k * length + t)."""
    count = 0
    loop = max(0, int(lo // length) - 1)
    while loop * length < hi:
        base = loop * length
        count += bisect.bisect_left(trace, hi - base) - bisect.bisect_left(trace, lo - base)
        loop += 1
    return count


def mean_rate(trace: list[int]) -> float:
    return len(trace) * PACKET_BITS / (period(trace) / 1000.0)


def generate(seconds: float, mean: float, seed: int, *, low: float | None = None,
             high: float | None = None, hold: float = 1.0, sigma: float = 0.6) -> list[int]:
    """A synthetic cellular trace: the rate holds for exponentially distributed times
    (mean `hold` s) at log-normal levels around `mean`, clipped to [low, high]; within a hold
    the opportunities are evenly spaced.  Deterministic for a given seed."""
    rng = random.Random(seed)
    low = mean / 10 if low is None else low
    high = mean * 3 if high is None else high
    out = []
    t = 0.0                  # ms
    credit = 0.0             # fractional packets carried between ms
    end = seconds * 1000.0
    while t < end:
        level = min(high, max(low, mean * math.exp(rng.gauss(-sigma * sigma / 2, sigma))))
        span = min(end - t, max(50.0, rng.expovariate(1.0 / (hold * 1000.0))))
        per_ms = level / PACKET_BITS / 1000.0
        stop = t + span
        while t < stop:
            credit += per_ms
            t += 1
            while credit >= 1.0:
                out.append(int(t))
                credit -= 1.0
    if not out or out[-1] < int(end):
        out.append(int(end))          # the trace must span its full length
    return out


def format_trace(trace: list[int]) -> str:
    return "".join(f"{ms}\n" for ms in trace)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m cclab.traces", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--mean", default="10mbit", help="mean rate, e.g. 10mbit")
    ap.add_argument("--low", help="lowest rate (default mean/10)")
    ap.add_argument("--high", help="highest rate (default 3 x mean)")
    ap.add_argument("--hold", type=float, default=1.0, help="mean seconds a rate holds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", help="file to write (default: standard output)")
    a = ap.parse_args(argv)
    try:
        mean = units.rate(a.mean, "--mean")
        low = units.rate(a.low, "--low") if a.low else None
        high = units.rate(a.high, "--high") if a.high else None
    except SpecError as e:
        print(f"cclab.traces: error: {e}", file=sys.stderr)
        return 2
    text = format_trace(generate(a.seconds, mean, a.seed, low=low, high=high, hold=a.hold))
    if a.output:
        from .files import write_atomic
        write_atomic(Path(a.output), text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

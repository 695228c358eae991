"""Time-varying links: the schedule of in-place changes a profile's [dynamics] asks for.

Pure: `schedule()` turns a profile, a seed and the run's start time into a list of changes;
the runner applies them with the commands from tc.change() at their instants.

reconfigure (LEO)   at every instant T with (T - offset) mod period = 0 (wall-clock seconds,
                    so period 15 and offset 12 give :12, :27, :42, :57 of each minute; with
                    align = "start", counted from the run's start), rate and delay are re-drawn
                    uniformly from their ranges.  A handover first drops `outage_loss` % of
                    packets for `outage` seconds, then the new values apply.
trace (cellular)    the rate of each direction follows its trace, averaged per `step`.

An experiment's [[hold]] tables add plug steps (hold_steps): block, then release, on the
interfaces of the direction's senders.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from . import traces
from .profiles import Profile, Reconfigure, TraceReplay
from .tc import LinkState

MIN_RATE = 16_000.0        # bit/s: htb's floor for a trace window with no delivery at all


@dataclass(frozen=True)
class Change:
    t: float                # s after the run's start
    direction: str          # down | up
    state: LinkState
    rate_changed: bool
    why: str                # handover | reconfigure | trace


@dataclass(frozen=True)
class HoldStep:
    t: float                # s after the run's start
    direction: str          # down | up: whose senders' interfaces are plugged
    action: str             # block | release_indefinite (tc's plug actions)


def hold_steps(holds) -> list[HoldStep]:
    """The plug actions of an experiment's [[hold]] tables, in time order."""
    out = []
    for h in holds:
        out.append(HoldStep(h.start, h.direction, "block"))
        out.append(HoldStep(round(h.start + h.duration, 6), h.direction, "release_indefinite"))
    out.sort(key=lambda s: (s.t, s.action == "block"))
    return out


def instants(r: Reconfigure, start_epoch: float, length: float) -> list[float]:
    """Run-relative times of the reconfigurations within [0, length)."""
    if r.align == "start":
        first = r.offset
    else:
        k = math.ceil((start_epoch - r.offset) / r.period)
        first = k * r.period + r.offset - start_epoch
    out = []
    t = first
    while t < length:
        if t >= 0:
            out.append(round(t, 6))
        t += r.period
    return out


def initial(profile: Profile, direction: str, length: float = 1.0) -> LinkState:
    """The state a direction starts in."""
    d = getattr(profile, direction)
    dyn = profile.dynamics
    if isinstance(dyn, TraceReplay) and getattr(dyn, direction) is not None:
        trace = traces.read(dyn.path(direction), direction)
        first = traces.rates(trace, dyn.step, dyn.step)[0]
        return LinkState(max(MIN_RATE, first), d.delay, d.loss)
    return LinkState.of(d)


def schedule(profile: Profile, seed: int, start_epoch: float, length: float) -> list[Change]:
    dyn = profile.dynamics
    if dyn is None:
        return []
    if isinstance(dyn, TraceReplay):
        return _trace(profile, dyn, length)
    return _reconfigure(profile, dyn, seed, start_epoch, length)


def on_wall_clock(profile: Profile) -> bool:
    """Whether the link's changes depend on the time of day the run starts."""
    dyn = profile.dynamics
    return isinstance(dyn, Reconfigure) and dyn.align != "start"


def _reconfigure(profile: Profile, r: Reconfigure, seed: int, start_epoch: float,
                 length: float) -> list[Change]:
    rng = random.Random(seed)
    names = list(profile.directions())
    state = {d: initial(profile, d) for d in names}
    out = []
    for t in instants(r, start_epoch, length):
        delay = rng.uniform(*r.delay) if r.delay else None
        new = {}
        for d in names:
            span = getattr(r, f"{d}_rate")
            rate = rng.uniform(*span) if span else state[d].rate
            new[d] = LinkState(round(rate, -3), round(delay, 4) if delay is not None
                               else state[d].delay, state[d].loss)
        for d in names:
            if r.outage > 0:
                out.append(Change(t, d, LinkState(state[d].rate, state[d].delay, r.outage_loss),
                                  False, "handover"))
                out.append(Change(round(t + r.outage, 6), d, new[d], True, "reconfigure"))
            else:
                out.append(Change(t, d, new[d], True, "reconfigure"))
            state[d] = new[d]
    out.sort(key=lambda c: c.t)
    return out


def _trace(profile: Profile, tr: TraceReplay, length: float) -> list[Change]:
    out = []
    for d in ("down", "up"):
        base = getattr(profile, d)
        if getattr(tr, d) is None or base is None:
            continue
        trace = traces.read(tr.path(d), d)
        last = None
        for i, rate in enumerate(traces.rates(trace, tr.step, length)):
            rate = max(MIN_RATE, rate)
            if rate != last and i > 0:
                out.append(Change(round(i * tr.step, 6), d, LinkState(rate, base.delay, base.loss),
                                  True, "trace"))
            last = rate
    out.sort(key=lambda c: c.t)
    return out

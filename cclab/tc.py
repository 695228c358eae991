"""Traffic control: the qdiscs that make a link look like a profile's direction.

Pure functions: they return `tc` command lines and never run them, so tests can read them.

Layouts, one per `shaper`:

    htb (default)   root 1: htb, class 1:1 (the rate), child 10: netem (delay, loss)
    tbf             root 1: tbf (the rate),          child 10: netem (delay, loss)
    netem           root 1: netem (rate, delay, jitter, loss, slot)

With htb and tbf the rate is enforced at dequeue, so changing it takes effect at once; netem
sits below the rate limiter and holds both the packets in flight on the "wire" (rate x delay)
and the queue, so its limit is rate x delay / MTU + buffer.  When a direction has no delay,
jitter, loss or dynamics, a pfifo of `buffer` packets replaces netem.

Only `shaper = "netem"` supports jitter and slots: with netem's own rate, netem keeps packets
in order whatever the jitter.

Changes (time-varying links) use `tc class change` / `tc qdisc change`, which keep the queue;
a netem change restates every field, because netem resets the fields it is not given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .profiles import MTU, Direction
from .schema import WIRE_PACKET
from .units import tc_percent, tc_rate, tc_size, tc_time

@dataclass(frozen=True)
class LinkState:
    """The values of a direction at one moment (they change on time-varying links)."""
    rate: float
    delay: float
    loss: float

    @classmethod
    def of(cls, d: Direction) -> "LinkState":
        return cls(d.rate, d.delay, d.loss)


def default_burst(rate: float) -> int:
    """Token bucket depth: 4 ms at the rate, at least two full packets."""
    return max(2 * WIRE_PACKET, int(rate / 8 * 0.004))


def netem_limit(d: Direction, s: LinkState, buffer: int) -> int:
    """Packets netem must hold: those in the delay line plus the buffer."""
    if d.limit is not None:
        return d.limit
    hold = s.delay + d.jitter + (d.slot.max if d.slot else 0.0)    # longest stay in netem
    in_flight = math.ceil(s.rate * hold / (8 * MTU))
    return in_flight + buffer


def netem_args(d: Direction, s: LinkState, buffer: int) -> list[str]:
    """Every netem field this direction uses, for `add` and `change` alike."""
    args = []
    if d.shaper == "netem":
        args += ["rate", tc_rate(s.rate)]
    args += ["delay", tc_time(s.delay)]
    if d.jitter:
        args += [tc_time(d.jitter)]
    if s.loss:
        args += ["loss", tc_percent(s.loss)]
        if d.loss_correlation:
            args += [tc_percent(d.loss_correlation)]
    if d.slot is not None:
        args += ["slot", tc_time(d.slot.min), tc_time(d.slot.max)]
        if d.slot.packets:
            args += ["packets", str(d.slot.packets)]
        if d.slot.bytes:
            args += ["bytes", str(d.slot.bytes)]
    args += ["limit", str(netem_limit(d, s, buffer))]
    return args


def uses_netem(d: Direction, dynamic: bool) -> bool:
    return (d.shaper == "netem" or dynamic or d.delay > 0 or d.jitter > 0 or d.loss > 0
            or d.slot is not None)


def _rate_args(d: Direction, s: LinkState, buffer: int, child: bool) -> list[str]:
    burst = d.burst or default_burst(s.rate)
    if d.shaper == "htb":
        return ["htb", "rate", tc_rate(s.rate), "ceil", tc_rate(s.rate),
                "burst", tc_size(burst), "cburst", tc_size(burst), "quantum", str(WIRE_PACKET)]
    # tbf: its limit sizes the fifo it creates itself, which a netem child replaces.
    args = ["tbf", "rate", tc_rate(s.rate), "burst", tc_size(burst)]
    if d.latency is not None:
        args += ["latency", tc_time(d.latency)]
    else:
        args += ["limit", str(buffer * WIRE_PACKET if not child else burst + buffer * WIRE_PACKET)]
    return args


def setup(d: Direction, dev: str, buffer: int, dynamic: bool = False,
          state: LinkState | None = None) -> list[list[str]]:
    """Commands that install this direction's qdiscs on `dev` (from a clean root)."""
    s = state or LinkState.of(d)
    netem = uses_netem(d, dynamic)
    base = ["tc", "qdisc", "add", "dev", dev]
    if d.shaper == "netem":
        return [["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem"]
                + netem_args(d, s, buffer)]
    cmds = []
    if d.shaper == "htb":
        cmds.append(base + ["root", "handle", "1:", "htb", "default", "1"])
        cmds.append(["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1"]
                    + _rate_args(d, s, buffer, netem)[0:])
        parent = "1:1"
    else:
        cmds.append(base + ["root", "handle", "1:"] + _rate_args(d, s, buffer, netem))
        parent = "1:1"
    if netem:
        cmds.append(base + ["parent", parent, "handle", "10:", "netem"] + netem_args(d, s, buffer))
    else:
        cmds.append(base + ["parent", parent, "handle", "10:", "pfifo", "limit", str(buffer)])
    return cmds


def change(d: Direction, dev: str, buffer: int, state: LinkState,
           rate_changed: bool = True) -> list[list[str]]:
    """Commands that move the qdiscs on `dev` to `state` in place, keeping the queue."""
    if d.shaper == "netem":
        return [["tc", "qdisc", "change", "dev", dev, "root", "handle", "1:", "netem"]
                + netem_args(d, state, buffer)]
    cmds = []
    if rate_changed:
        if d.shaper == "htb":
            cmds.append(["tc", "class", "change", "dev", dev, "parent", "1:", "classid", "1:1"]
                        + _rate_args(d, state, buffer, True))
        else:
            cmds.append(["tc", "qdisc", "change", "dev", dev, "root", "handle", "1:"]
                        + _rate_args(d, state, buffer, True))
    cmds.append(["tc", "qdisc", "change", "dev", dev, "parent", "1:1", "handle", "10:", "netem"]
                + netem_args(d, state, buffer))
    return cmds


def teardown(dev: str) -> list[str]:
    return ["tc", "qdisc", "del", "dev", dev, "root"]

"""Link profiles: what a path looks like, read from topologies/<name>.toml.

A profile describes a dumbbell: `pairs` sender/receiver pairs, the server side on the left,
the client side on the right, two routers in the middle.  The bottleneck is the link between
the routers, shaped on each router's egress:

    down  server side -> client side   (the data of a download, the ACKs of an upload)
    up    client side -> server side

Each direction has a rate, a one-way delay, jitter, random loss and a buffer; see
topologies/wired.toml for every key with a comment.  A profile may also be time-varying
(`[dynamics]`): `kind = "reconfigure"` re-draws rate and delay periodically (LEO), and
`kind = "trace"` replays a mahimahi trace (cellular).

Adding a profile means writing one TOML file; the engine needs no change.
"""

from __future__ import annotations

import copy
import math
import os
import sys
from dataclasses import dataclass, field, asdict
from pathlib import Path

from . import units
from .units import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MTU = 1500                      # bytes per packet, for buffer and delay-line sizes
KIT_DIR = Path(__file__).resolve().parent.parent
TOPOLOGY_DIR = KIT_DIR / "topologies"
SHAPERS = ("htb", "tbf", "netem")


def check_keys(table: dict, allowed, where: str = "") -> None:
    """Refuse keys this table does not know: a typo must not be silently ignored."""
    if not isinstance(table, dict):
        raise SpecError(where, f"expected a table, got {table!r}")
    for key in table:
        if key not in allowed:
            name = f"{where}.{key}" if where else key
            raise SpecError(name, f"unknown key (known keys: {', '.join(sorted(allowed))})")


def load_toml(path: Path, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise SpecError(str(path), f"cannot read {what}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(str(path), f"not valid TOML: {e}") from None


# ---------------------------------------------------------------- one direction

@dataclass
class Slot:
    """netem slotting: packets leave in bursts, as with Wi-Fi frame aggregation."""
    min: float                  # s, shortest gap between slots
    max: float                  # s, longest gap between slots
    packets: int | None = None  # most packets per slot
    bytes: int | None = None    # most bytes per slot

    def __post_init__(self):
        self.min = units.duration(self.min, "min")
        self.max = units.duration(self.max, "max")
        if self.max < self.min:
            raise SpecError("max", "must not be below min")
        if self.packets is not None:
            self.packets = units.integer(self.packets, "packets", minimum=1)
        if self.bytes is not None:
            self.bytes = units.size(self.bytes, "bytes")


@dataclass
class Direction:
    """One direction of the bottleneck link."""
    rate: float                     # bit/s
    delay: float = 0.0              # s, one way
    jitter: float = 0.0             # s (never reorders: see tc.py)
    loss: float = 0.0               # % of packets dropped at random
    buffer: object = "1bdp"         # packets (int) or BDP multiples ("2bdp")
    limit: int | None = None        # netem limit in packets; default: delay line + buffer
    shaper: str = "htb"             # htb | tbf | netem: which qdisc enforces the rate
    burst: int | None = None        # bytes, htb/tbf token bucket; default: rate x 4 ms
    latency: float | None = None    # s, tbf's own latency parameter (tbf only)
    slot: Slot | None = None        # netem slotting (bursty delivery)
    at: str = "router"              # router: on the router egress; host: on the sender's NIC

    def __post_init__(self):
        self.rate = units.rate(self.rate, "rate")
        self.delay = units.duration(self.delay, "delay")
        self.jitter = units.duration(self.jitter, "jitter")
        self.loss = units.percent(self.loss, "loss")
        if isinstance(self.buffer, str) and self.buffer.strip().lower().endswith("bdp"):
            k = units.number(self.buffer.strip()[:-3].strip() or "1", "buffer", minimum=0)
            if k <= 0:
                raise SpecError("buffer", f"must be greater than zero, got {self.buffer!r}")
            self.buffer = f"{k:g}bdp"
        else:
            self.buffer = units.integer(self.buffer, "buffer", minimum=1)
        if self.limit is not None:
            self.limit = units.integer(self.limit, "limit", minimum=1)
        if self.shaper not in SHAPERS:
            raise SpecError("shaper", f"must be one of {', '.join(SHAPERS)}, got {self.shaper!r}")
        if self.burst is not None:
            self.burst = units.size(self.burst, "burst")
            if self.burst < MTU:
                raise SpecError("burst", f"must hold one packet ({MTU} bytes), got {self.burst}")
        if self.latency is not None:
            if self.shaper != "tbf":
                raise SpecError("latency", "only applies to shaper = \"tbf\"")
            self.latency = units.duration(self.latency, "latency", positive=True)
        if isinstance(self.slot, dict):
            check_keys(self.slot, Slot.__dataclass_fields__, "slot")
            try:
                self.slot = Slot(**self.slot)
            except SpecError as e:
                raise e.under("slot") from None
            except TypeError as e:
                raise SpecError("slot", str(e)) from None
        if self.at not in ("router", "host"):
            raise SpecError("at", f"must be \"router\" or \"host\", got {self.at!r}")
        if (self.jitter or self.slot) and self.shaper != "netem":
            # Only netem's own rate keeps jittered packets in order.
            raise SpecError("jitter" if self.jitter else "slot",
                            "needs shaper = \"netem\" (so jitter does not reorder packets)")

    def buffer_packets(self, base_rtt: float) -> int:
        """The buffer in packets; BDP multiples use this direction's rate and the base RTT."""
        if isinstance(self.buffer, int):
            return self.buffer
        k = float(self.buffer[:-3])
        return max(2, math.ceil(k * self.rate * base_rtt / (8 * MTU)))


# ---------------------------------------------------------------- dynamics

@dataclass
class Reconfigure:
    """Starlink-style: every `period`, rate and delay are re-drawn (uniformly within the
    ranges), with an outage (or loss burst) of `outage` at each handover."""
    period: float = 15.0
    offset: float = 12.0                # first instant, s past the minute (or past the start)
    align: str = "wallclock"            # wallclock: :12/:27/:42/:57; start: from run start
    down_rate: tuple = ()               # (low, high) bit/s; empty: keep the profile's
    up_rate: tuple = ()
    delay: tuple = ()                   # (low, high) one-way s, both directions
    outage: float = 0.0                 # s of handover outage
    outage_loss: float = 100.0          # % lost during the outage (100: nothing passes)

    def __post_init__(self):
        self.period = units.duration(self.period, "period", positive=True)
        self.offset = units.duration(self.offset, "offset")
        if self.align not in ("wallclock", "start"):
            raise SpecError("align", f"must be \"wallclock\" or \"start\", got {self.align!r}")
        self.down_rate = self._range(self.down_rate, "down_rate", units.rate)
        self.up_rate = self._range(self.up_rate, "up_rate", units.rate)
        self.delay = self._range(self.delay, "delay", units.duration)
        self.outage = units.duration(self.outage, "outage")
        if self.outage >= self.period:
            raise SpecError("outage", "must be shorter than the period")
        self.outage_loss = units.percent(self.outage_loss, "outage_loss")

    @staticmethod
    def _range(value, name, parse):
        if value in ((), [], None):
            return ()
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise SpecError(name, f"expected [low, high], got {value!r}")
        lo, hi = parse(value[0], f"{name}[0]"), parse(value[1], f"{name}[1]")
        if hi < lo:
            raise SpecError(name, "high must not be below low")
        return (lo, hi)


@dataclass
class TraceReplay:
    """Cellular: the rate follows mahimahi traces, updated every `step`."""
    down: str | None = None             # trace file (relative to the profile's folder)
    up: str | None = None
    step: float = 0.1                   # s between rate updates
    base: str = ""                      # folder the trace paths are relative to (set by loader)

    def __post_init__(self):
        from . import traces
        self.step = units.duration(self.step, "step", positive=True)
        if self.down is None and self.up is None:
            raise SpecError("down", "a trace replay needs a down and/or an up trace")
        for name in ("down", "up"):
            value = getattr(self, name)
            if value is None:
                continue
            units.text(value, name)
            traces.read(self.path(name), name)       # unreadable or malformed: refuse now

    def path(self, name: str) -> Path:
        p = Path(os.path.expanduser(getattr(self, name)))
        return p if p.is_absolute() else Path(self.base or TOPOLOGY_DIR) / p


DYNAMICS = {"reconfigure": Reconfigure, "trace": TraceReplay}


# ---------------------------------------------------------------- the profile

@dataclass
class Profile:
    name: str
    down: Direction | None              # None: that direction is not shaped at all
    up: Direction | None
    summary: str = ""
    pairs: int = 1
    dynamics: Reconfigure | TraceReplay | None = None
    sysctl: dict = field(default_factory=dict)   # per-host sysctls, e.g. tcp_rmem
    offloads: bool = False                       # leave TSO/GSO/GRO on (only for loss-free links)
    source: str = ""                             # the file it was read from

    def __post_init__(self):
        units.text(self.name, "name")
        self.pairs = units.integer(self.pairs, "pairs", minimum=1, maximum=16)
        for d in ("down", "up"):
            if isinstance(getattr(self, d), dict):
                setattr(self, d, _direction(getattr(self, d), d))
        if self.down is None and self.up is None:
            raise SpecError("down", "missing: a profile shapes at least one direction")
        if not isinstance(self.summary, str):
            raise SpecError("summary", "expected a string")
        self.offloads = units.boolean(self.offloads, "offloads")
        if self.offloads and (any(d.loss for d in self.directions().values()) or self.dynamics):
            raise SpecError("offloads", "must stay false on a lossy or time-varying link "
                            "(netem would drop whole GSO super-packets)")
        check_sysctls(self.sysctl, "sysctl")
        for d in ("down", "up"):
            wants = (getattr(self.dynamics, d, None) if isinstance(self.dynamics, TraceReplay)
                     else getattr(self.dynamics, f"{d}_rate", None))
            if wants and getattr(self, d) is None:
                raise SpecError(f"dynamics.{d}", f"the profile does not shape {d} (no [{d}] table)")

    def directions(self) -> dict[str, Direction]:
        """The shaped directions by name."""
        return {n: d for n, d in (("down", self.down), ("up", self.up)) if d is not None}

    @property
    def base_rtt(self) -> float:
        return sum(d.delay for d in self.directions().values())

    @property
    def worst_rtt(self) -> float:
        """The base RTT plus the time to drain a full buffer in the slower-draining direction:
        how long a packet (a SYN, a control message) can take to cross a saturated path once."""
        drain = 0.0
        for d in self.directions().values():
            if d.rate:
                drain = max(drain, d.buffer_packets(self.base_rtt) * MTU * 8 / d.rate)
        return self.base_rtt + drain

    @property
    def handshake_loss(self) -> float:
        """The chance (0-1) that a SYN or its SYN-ACK is lost to the profile's random loss."""
        keep = 1.0
        for d in self.directions().values():
            keep *= 1.0 - d.loss / 100.0
        return 1.0 - keep

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.dynamics is not None:
            kind = {v: k for k, v in DYNAMICS.items()}[type(self.dynamics)]
            d["dynamics"] = {"kind": kind, **d["dynamics"]}
        return d


def check_sysctls(table, where: str) -> None:
    if not isinstance(table, dict):
        raise SpecError(where, f"expected a table of sysctl = value, got {table!r}")
    for key, value in table.items():
        if not key.startswith("net.") or not all(p and p.replace("_", "").isalnum()
                                                 for p in key.split(".")):
            raise SpecError(f"{where}.{key}", "expected a network sysctl such as net.ipv4.tcp_ecn")
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise SpecError(f"{where}.{key}", f"expected a number or a string, got {value!r}")


def _direction(table: dict, where: str) -> Direction:
    check_keys(table, Direction.__dataclass_fields__, where)
    if "rate" not in table:
        raise SpecError(f"{where}.rate", "missing (every direction needs a rate)")
    try:
        return Direction(**table)
    except SpecError as e:
        raise e.under(where) from None


def _dynamics(table: dict, base: Path) -> Reconfigure | TraceReplay:
    table = dict(table)
    kind = table.pop("kind", None)
    if kind not in DYNAMICS:
        raise SpecError("dynamics.kind", f"must be one of {', '.join(DYNAMICS)}, got {kind!r}")
    cls = DYNAMICS[kind]
    allowed = [k for k in cls.__dataclass_fields__ if k != "base"]
    check_keys(table, allowed, "dynamics")
    if cls is TraceReplay:
        table["base"] = str(base)
    try:
        return cls(**table)
    except SpecError as e:
        raise e.under("dynamics") from None


PROFILE_KEYS = ("name", "summary", "pairs", "down", "up", "dynamics", "sysctl", "offloads")


def from_dict(table: dict, name: str, base: Path = TOPOLOGY_DIR, source: str = "") -> Profile:
    """Build and validate a profile from a parsed TOML table."""
    check_keys(table, PROFILE_KEYS)
    table = dict(table)
    if "down" not in table and "up" not in table:
        raise SpecError("down", "missing: a profile needs a [down] and/or an [up] table")
    for d in ("down", "up"):
        table[d] = _direction(table[d], d) if d in table else None
    if "dynamics" in table:
        table["dynamics"] = _dynamics(table["dynamics"], base)
    table.setdefault("name", name)
    return Profile(**table, source=source)


def merge(base: dict, override: dict) -> dict:
    """Deep-merge override into a copy of base (tables merge, values replace)."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def search_path() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("CCLAB_TOPOLOGIES", "").split(os.pathsep) if p]
    return extra + [TOPOLOGY_DIR]


def find(name: str) -> Path:
    """The file of a profile given by name (or by path to a .toml file)."""
    if name.endswith(".toml") or os.sep in name:
        p = Path(name)
        if p.is_file():
            return p
        raise SpecError("profile", f"no profile file {name}")
    for d in search_path():
        p = d / f"{name}.toml"
        if p.is_file():
            return p
    raise SpecError("profile", f"unknown profile {name!r} (known: {', '.join(names())})")


def names() -> list[str]:
    seen = []
    for d in search_path():
        if d.is_dir():
            for p in sorted(d.glob("*.toml")):
                if p.stem not in seen:
                    seen.append(p.stem)
    return seen


def raw(name: str) -> tuple[dict, Path]:
    path = find(name)
    return load_toml(path, "profile"), path


def load(name: str, override: dict | None = None) -> Profile:
    """Read, merge the experiment's overrides into, and validate a profile."""
    table, path = raw(name)
    if override:
        check_keys(override, PROFILE_KEYS, "override")
        try:
            from_dict(table, path.stem, path.parent, str(path))
        except SpecError as e:
            raise SpecError(f"{path}: {e.field}", e.message) from None
        try:
            return from_dict(merge(table, override), path.stem, path.parent, str(path))
        except SpecError as e:
            raise e.under("override") from None
    try:
        return from_dict(table, path.stem, path.parent, str(path))
    except SpecError as e:
        raise SpecError(f"{path}: {e.field}", e.message) from None

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

Adding a profile means writing one TOML file; the engine needs no change.  The file's schema
is cclab/schema.py's ProfileModel (docs/profile.schema.json for editors); the dataclasses here
validate through it, whether read from a file or built in Python.
"""

from __future__ import annotations

import copy
import math
import os
import re
import sys
from dataclasses import dataclass, field, asdict, fields
from pathlib import Path

from . import schema
from .units import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MTU = schema.MTU                # bytes per packet, for buffer and delay-line sizes


def _kit_dir() -> Path:
    """The kit's checkout, which holds topologies/ (and traces): the folder the package sits in
    (run from the checkout, an editable install, the VM's /kit), else CCLAB_KIT (a `pip
    install .` copies only the package)."""
    here = Path(__file__).resolve().parent.parent
    if (here / "topologies").is_dir() or not os.environ.get("CCLAB_KIT"):
        return here
    return Path(os.environ["CCLAB_KIT"]).resolve()


KIT_DIR = _kit_dir()
TOPOLOGY_DIR = KIT_DIR / "topologies"
SHAPERS = ("htb", "tbf", "netem")


def load_toml(path: Path, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise SpecError(str(path), f"cannot read {what}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        line, key = _place(e.object, e.start)
        raise SpecError(key, f"not UTF-8 text (TOML files are): byte 0x{e.object[e.start]:02x} "
                        f"on line {line}", str(path)) from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(str(path), f"not valid TOML: {e}") from None


def _place(data: bytes, offset: int) -> tuple[int, str]:
    """The line of `offset` in a TOML file and the key written there, under its table
    ("flow[1].cca"), as far as the lines before it tell."""
    lines = data[:offset].split(b"\n")
    table, arrays = "", {}
    for text in lines[:-1]:
        m = re.match(rb"\s*(\[\[?)\s*([^\]]+?)\s*\]", text)
        if m:
            table = m.group(2).decode("utf-8", "replace")
            if m.group(1) == b"[[":
                arrays[table] = arrays.get(table, -1) + 1
                table = f"{table}[{arrays[table]}]"
    m = re.match(rb"\s*([A-Za-z0-9_.\"-]+)\s*=", lines[-1])
    key = m.group(1).decode("utf-8", "replace").replace('"', "") if m else ""
    return len(lines), ".".join(k for k in (table, key) if k)


def given(obj, model) -> dict:
    """A dataclass's fields that `model` checks, as the table a file would hold (nested
    dataclasses as tables too)."""
    out = {}
    for f in fields(obj):
        if f.name in model.model_fields:
            value = getattr(obj, f.name)
            out[f.name] = _table(value)
    return out


def _table(value):
    if isinstance(value, (Slot, Direction)):
        return given(value, schema.SlotModel if isinstance(value, Slot) else schema.DirectionModel)
    if isinstance(value, Reconfigure):
        return dict(given(value, schema.ReconfigureModel), kind="reconfigure")
    if isinstance(value, TraceReplay):
        return dict(given(value, schema.TraceModel), kind="trace")
    return value


def store(obj, checked, **convert) -> None:
    """Put a validated model's values back into the dataclass `obj` (nested tables through
    `convert[name]`)."""
    mine = {f.name for f in fields(obj)}
    for name in type(checked).model_fields:
        if name in mine:
            value = getattr(checked, name)
            setattr(obj, name, convert[name](value) if name in convert else value)


# ---------------------------------------------------------------- one direction

@dataclass
class Slot:
    """netem slotting: packets leave in bursts, as with Wi-Fi frame aggregation."""
    min: float                  # s, shortest gap between slots
    max: float                  # s, longest gap between slots
    packets: int | None = None  # most packets per slot
    bytes: int | None = None    # most bytes per slot

    def __post_init__(self):
        store(self, schema.validate(schema.SlotModel, given(self, schema.SlotModel)))


@dataclass
class Direction:
    """One direction of the bottleneck link."""
    rate: float                     # bit/s
    delay: float = 0.0              # s, one way
    jitter: float = 0.0             # s (never reorders: see tc.py)
    loss: float = 0.0               # % of packets dropped at random
    loss_correlation: float = 0.0   # %, netem's correlation of successive loss draws
    buffer: object = "1bdp"         # packets (int) or BDP multiples ("2bdp")
    limit: int | None = None        # netem limit in packets; default: delay line + buffer
    shaper: str = "htb"             # htb | tbf | netem: which qdisc enforces the rate
    burst: int | None = None        # bytes, htb/tbf token bucket; default: rate x 4 ms
    latency: float | None = None    # s, tbf's own latency parameter (tbf only)
    slot: Slot | None = None        # netem slotting (bursty delivery)
    at: str = "router"              # router: on the router egress; host: on the sender's NIC

    def __post_init__(self):
        store(self, schema.validate(schema.DirectionModel, given(self, schema.DirectionModel)),
              slot=lambda m: None if m is None else Slot(**m.model_dump()))

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
        whole = lambda r: () if r is None else tuple(r)
        store(self, schema.validate(schema.ReconfigureModel, given(self, schema.ReconfigureModel)),
              down_rate=whole, up_rate=whole, delay=whole)


@dataclass
class TraceReplay:
    """Cellular: the rate follows mahimahi traces, updated every `step`."""
    down: str | None = None             # trace file (relative to the profile's folder)
    up: str | None = None
    step: float = 0.1                   # s between rate updates
    base: str = ""                      # folder the trace paths are relative to (set by loader)

    def __post_init__(self):
        from . import traces
        store(self, schema.validate(schema.TraceModel, given(self, schema.TraceModel)))
        for name in ("down", "up"):
            if getattr(self, name) is not None:
                traces.read(self.path(name), name)       # unreadable or malformed: refuse now

    def path(self, name: str) -> Path:
        p = Path(os.path.expanduser(getattr(self, name)))
        return p if p.is_absolute() else Path(self.base or TOPOLOGY_DIR) / p


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
        checked = schema.validate(schema.ProfileModel, given(self, schema.ProfileModel))
        if checked.name is None:
            raise SpecError("name", "missing")
        direction = lambda m: None if m is None else Direction(**m.model_dump())
        store(self, checked, down=direction, up=direction,
              dynamics=lambda m: self.dynamics if m is None or not isinstance(self.dynamics, dict)
              else _dynamics(m, Path(TOPOLOGY_DIR)))

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


def _dynamics(checked, base: Path) -> Reconfigure | TraceReplay:
    """The dataclass of a validated [dynamics] table (trace paths relative to `base`)."""
    table = checked.model_dump(exclude={"kind"})
    try:
        if isinstance(checked, schema.TraceModel):
            return TraceReplay(**table, base=str(base))
        return Reconfigure(**table)
    except SpecError as e:
        raise e.under("dynamics") from None


DYNAMICS = {"reconfigure": Reconfigure, "trace": TraceReplay}
PROFILE_KEYS = tuple(schema.ProfileModel.model_fields)


def from_dict(table: dict, name: str, base: Path = TOPOLOGY_DIR, source: str = "") -> Profile:
    """Build and validate a profile from a parsed TOML table."""
    checked = schema.validate(schema.ProfileModel, table)
    direction = lambda m: None if m is None else Direction(**m.model_dump())
    return Profile(name=checked.name or name, summary=checked.summary, pairs=checked.pairs,
                   down=direction(checked.down), up=direction(checked.up),
                   dynamics=None if checked.dynamics is None else _dynamics(checked.dynamics, base),
                   sysctl=checked.sysctl, offloads=checked.offloads, source=source)


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
    try:
        profile = from_dict(table, path.stem, path.parent, str(path))
    except SpecError as e:
        raise e.in_file(path) from None
    if not override:
        return profile
    if not isinstance(override, dict):
        raise SpecError("override", f"expected a table, got {override!r}")
    try:
        return from_dict(merge(table, override), path.stem, path.parent, str(path))
    except SpecError as e:
        raise e.under("override") from None

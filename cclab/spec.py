"""Experiments: a profile, flows and measurements, read from a TOML file or built in Python.

    name = "cubic-vs-bbr"
    profile = "wired"            # a file in topologies/ (or a path to one)
    repetitions = 3
    seed = 1

    [override]                   # change profile fields for this experiment only
    pairs = 2
    down.rate = "50mbit"

    [[flow]]
    cca = "cubic"
    start = "0s"
    duration = "20s"             # bulk for 20 s ... or: bytes = "10MB" (size-limited)
    streams = 1                  # parallel TCP connections (iperf3 -P)
    direction = "down"           # down: server side sends to client side; up: the reverse

    [[hold]]                     # optional: keep a direction's packets back, then release
    direction = "up"             # them at once (up: the ACKs of downloads, an ACK stall)
    start = "7s"
    duration = "2s"

    rto_min = "5s"               # optional: every host's retransmission-timeout floor (route)

    [measure]
    ss_hz = 20                   # socket sampling rate
    cpu = true                   # CPU load (cpu.csv), on by default
    events = ["spline:spline_mode", "search:search_exit"]   # the kit's modules' tracepoints

The same in Python:

    Experiment(name="x", profile="wired", flows=[Flow(cca="bbr", duration="20s")])

Everything is validated when the object is built; a bad value raises SpecError naming the field
as the file writes it (`flow[0].rate`, lists counted from 0), before anything touches the system.
The file's schema is cclab/schema.py's ExperimentModel (docs/experiment.schema.json for editors),
with an upper bound on every duration, rate and count; the dataclasses here validate through it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, asdict, replace
from pathlib import Path

from . import profiles, schema
from .profiles import Profile, given, store
from .schema import KNOWN_CCAS, MODULE_EVENTS  # noqa: F401  (the kit's lists, re-exported)
from .units import SpecError

BASE_PORT = 5201


def available_ccas() -> list[str]:
    """What the running kernel offers now (reading it changes nothing)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().split()
    except OSError:
        return []


@dataclass
class Flow:
    cca: str
    start: float = 0.0               # s after the run starts
    duration: float | None = None    # whole s of bulk transfer (default 10 s unless bytes is set)
    bytes: int | None = None         # size-limited transfer instead of a duration
    streams: int = 1                 # parallel connections
    direction: str = "down"          # down | up
    pair: int | None = None          # which sender/receiver pair (1-based)
    protocol: str = "tcp"            # tcp | udp (iperf3 opens a UDP stream with one datagram
                                     # and never resends it: on a lossy link a run can stop
                                     # with "never sent data"; running it again is the fix)
    rate: float | None = None        # udp target rate, or a tcp rate cap (iperf3 -b)
    length: int | None = None        # udp datagram payload in bytes

    def __post_init__(self):
        store(self, schema.validate(schema.FlowModel, given(self, schema.FlowModel)))


@dataclass
class Hold:
    """The packets of one direction kept back from `start` for `duration` s, then released at
    once: on each host that sends in that direction, a plug qdisc blocks and then releases its
    interface.  With data flowing down, a hold of "up" is an ACK stall (what Wi-Fi's contention
    or a satellite's handover can do to a path's ACKs): the data still arrives, the sender hears
    nothing, then every ACK at once."""
    start: float
    duration: float
    direction: str = "up"

    def __post_init__(self):
        store(self, schema.validate(schema.HoldModel, given(self, schema.HoldModel)))


@dataclass
class Measure:
    iperf_interval: float = 0.1      # s between iperf3 reports
    ss: bool = True                  # socket state (ss -ti) on every sender
    ss_hz: float = 20.0
    tcp_probe: bool = True           # per-ACK tcp:tcp_probe tracepoint
    qdisc: bool = True               # tc -s qdisc statistics on the bottleneck
    qdisc_hz: float = 10.0
    ping: bool = True                # ping RTT, idle and under load, pair 1
    ping_interval: float = 0.2
    capture: bool = False            # tcpdump on each data sender's interface
    snaplen: int = 128
    cpu: bool = True                 # CPU busy fraction from /proc/stat (cpu.csv)
    cpu_hz: float = 10.0
    events: list = field(default_factory=list)   # module tracepoints: "spline:spline_mode",
                                                 # "search:search_exit" (spline.csv, search.csv)

    def __post_init__(self):
        store(self, schema.validate(schema.MeasureModel, given(self, schema.MeasureModel)))


@dataclass
class Experiment:
    name: str
    profile: object                  # a profile name, a path to one, or a Profile
    flows: list = field(default_factory=list)
    override: dict = field(default_factory=dict)
    measure: Measure = field(default_factory=Measure)
    repetitions: int = 1
    seed: int = 1
    modules: list = field(default_factory=list)   # .ko files to insmod if their CCA is missing
    sysctl: dict = field(default_factory=dict)    # extra per-host sysctls
    tail: float = 1.0                # s measured after the last flow ends
    time_limit: float = 300.0        # s a run may take at most (size-limited flows)
    description: str = ""
    hold: list = field(default_factory=list)      # Hold: a direction's packets kept back a while
    rto_min: float | None = None     # s, every host's retransmission-timeout floor (route rto_min)
    base: str = "."                  # folder relative paths are read from (set by load())

    def __post_init__(self):
        # The same table a file would hold (flows under its key "flow"), checked by the schema.
        table = {k: v for k, v in given(self, schema.ExperimentModel).items() if k != "profile"}
        table["profile"] = self.profile if not isinstance(self.profile, Profile) else "-"
        table["flow"] = ([given(f, schema.FlowModel) if isinstance(f, Flow) else f
                          for f in self.flows] if isinstance(self.flows, list) else self.flows)
        if isinstance(self.measure, Measure):
            table["measure"] = given(self.measure, schema.MeasureModel)
        if isinstance(self.hold, list):
            table["hold"] = [given(h, schema.HoldModel) if isinstance(h, Hold) else h
                             for h in self.hold]
        checked = schema.validate(schema.ExperimentModel, table)
        if checked.name is None:
            raise SpecError("name", "missing")
        store(self, checked, measure=lambda m: Measure(**m.model_dump()))
        self.flows = [Flow(**f.model_dump()) for f in checked.flow]
        self.hold = [Hold(**h.model_dump()) for h in checked.hold]
        if isinstance(self.profile, Profile):
            self.link = self.profile
            if self.override:
                raise SpecError("override", "only applies to a profile given by name")
        else:
            self.link = profiles.load(self.profile, self.override)
        known = set(KNOWN_CCAS) | set(available_ccas()) | {Path(m).stem.removeprefix("tcp_")
                                                            for m in self.modules}
        flows = []
        for i, f in enumerate(self.flows):
            where = f"flow[{i}]"
            if f.cca not in known and f.protocol == "tcp":
                raise SpecError(f"{where}.cca", f"unknown congestion control {f.cca!r} "
                                f"(known: {', '.join(sorted(known))})")
            f = replace(f) if f.pair is not None else replace(f, pair=i % self.link.pairs + 1)
            if f.pair > self.link.pairs:
                raise SpecError(f"{where}.pair", f"the profile has {self.link.pairs} pair(s), "
                                f"got pair {f.pair}")
            flows.append(f)
        self.flows = flows
        for i, h in enumerate(self.hold):
            d = getattr(self.link, h.direction)
            if d is not None and d.at != "router":
                # the plug would replace the qdiscs that shape this direction on the hosts
                raise SpecError(f"hold[{i}].direction", f"the profile shapes {h.direction} on "
                                "the hosts; a hold needs it shaped at the router")
            end = h.start + h.duration
            limit = (self.time_limit if any(f.bytes is not None for f in self.flows)
                     else self.planned_length())
            if end > limit:
                raise SpecError(f"hold[{i}]", f"ends at {end:g} s, after the run ({limit:g} s)")
            for j, o in enumerate(self.hold[:i]):
                if o.direction == h.direction and h.start < o.start + o.duration and o.start < end:
                    raise SpecError(f"hold[{i}]", f"overlaps hold[{j}] (one plug per interface)")

    # ------------------------------------------------------------ derived

    def port(self, index: int) -> int:
        """The iperf3 port of flow `index` (0-based)."""
        return BASE_PORT + index

    def planned_length(self) -> float:
        """Seconds from the start to the end of the last bulk flow, plus the tail."""
        ends = [f.start + (f.duration or 0.0) for f in self.flows]
        return max(ends) + self.tail

    def quick(self, longest: float = 10.0) -> "Experiment":
        """One repetition, with every start and duration scaled so the run lasts about
        `longest` s at most (durations rounded to whole seconds, at least 1, for iperf3)."""
        e = copy.copy(self)
        e.repetitions = 1
        span = max(f.start + (f.duration or 0.0) for f in self.flows)
        k = min(1.0, longest / span) if span > 0 else 1.0
        e.flows = [replace(f, start=round(f.start * k, 3),
                           duration=None if f.duration is None else max(1.0, round(f.duration * k)))
                   for f in self.flows]
        e.hold = [replace(h, start=round(h.start * k, 3), duration=round(h.duration * k, 3))
                  for h in self.hold]
        return e

    def as_given(self) -> dict:
        """The spec as a plain table (what the manifest records)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("profile", "base")}
        d["profile"] = self.profile if isinstance(self.profile, str) else self.link.to_dict()
        d["flows"] = [asdict(f) for f in self.flows]
        return d


EXPERIMENT_KEYS = tuple(schema.ExperimentModel.model_fields)


def from_dict(table: dict, name: str, base: Path = Path(".")) -> Experiment:
    """Build and validate an experiment from a parsed TOML table (relative paths in it are read
    from `base`).  The `lab` table is the lab's own and is left out."""
    checked = schema.validate(schema.ExperimentModel, table)
    given_keys = set(table)
    kwargs = {k: getattr(checked, k) for k in EXPERIMENT_KEYS
              if k in given_keys and k not in ("flow", "lab", "measure", "hold")}
    kwargs.setdefault("name", name)
    if "measure" in given_keys:
        kwargs["measure"] = Measure(**checked.measure.model_dump())
    kwargs["modules"] = [m if Path(m).is_absolute() else str(base / m) for m in checked.modules]
    prof = checked.profile
    if prof.endswith(".toml") and not Path(prof).is_absolute() and (base / prof).is_file():
        kwargs["profile"] = str(base / prof)
    # the flows as written (their pairs are worked out against the profile)
    flows = [Flow(**f.model_dump()) for f in checked.flow]
    kwargs["hold"] = [Hold(**h.model_dump()) for h in checked.hold]
    return Experiment(flows=flows, base=str(base), **kwargs)


def load(path) -> Experiment:
    """Read and validate an experiment file; a bad one raises SpecError naming the file and the
    field."""
    path = Path(path)
    table = profiles.load_toml(path, "experiment")
    try:
        exp = from_dict(table, path.stem, path.parent)
    except SpecError as e:
        raise e.in_file(path) from None
    exp.given = table              # the spec as written, for the manifest
    return exp

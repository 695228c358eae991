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

    [measure]
    ss_hz = 20                   # socket sampling rate
    cpu = true                   # CPU load (cpu.csv), on by default
    events = ["spline:spline_mode", "search:search_exit"]   # the kit's modules' tracepoints

The same in Python:

    Experiment(name="x", profile="wired", flows=[Flow(cca="bbr", duration="20s")])

Everything is validated when the object is built; a bad value raises SpecError naming the field,
before anything touches the system.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, asdict, replace
from pathlib import Path

from . import profiles, units
from .profiles import Profile, check_keys, check_sysctls
from .units import SpecError

# Congestion controls that Linux ships (loadable as tcp_<name>) and the kit's own modules.
KNOWN_CCAS = ("bbr", "bic", "cdg", "cubic", "dctcp", "highspeed", "htcp", "hybla", "illinois",
              "lp", "nv", "reno", "scalable", "vegas", "veno", "westwood", "yeah",
              "spline", "search")
BASE_PORT = 5201
# The kit's modules' tracepoints a spec may enable (measure.events), and the table of each.
MODULE_EVENTS = {"spline:spline_mode": "spline", "search:search_exit": "search"}


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
        units.text(self.cca, "cca")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.cca):
            raise SpecError("cca", f"not a congestion control name: {self.cca!r}")
        self.start = units.duration(self.start, "start")
        if self.duration is not None and self.bytes is not None:
            raise SpecError("bytes", "give either duration or bytes, not both")
        if self.bytes is not None:
            self.bytes = units.size(self.bytes, "bytes")
        else:
            self.duration = units.duration(10.0 if self.duration is None else self.duration,
                                           "duration", positive=True)
            if self.duration != int(self.duration):
                # iperf3 -t takes whole seconds (it would run 1.5 s as 1 s, 0.5 s forever)
                raise SpecError("duration", f"iperf3 runs whole seconds: got {self.duration:g} s")
        self.streams = units.integer(self.streams, "streams", minimum=1, maximum=64)
        if self.direction not in ("down", "up"):
            raise SpecError("direction", f"must be \"down\" or \"up\", got {self.direction!r}")
        if self.pair is not None:
            self.pair = units.integer(self.pair, "pair", minimum=1)
        if self.protocol not in ("tcp", "udp"):
            raise SpecError("protocol", f"must be \"tcp\" or \"udp\", got {self.protocol!r}")
        if self.rate is not None:
            self.rate = units.rate(self.rate, "rate")
        elif self.protocol == "udp":
            self.rate = 1e6
        if self.length is not None:
            self.length = units.integer(self.length, "length", minimum=16, maximum=65000)


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
        self.iperf_interval = units.duration(self.iperf_interval, "iperf_interval", positive=True)
        if self.iperf_interval < 0.1:
            raise SpecError("iperf_interval", "iperf3 reports at most every 0.1 s")
        for name in ("ss", "tcp_probe", "qdisc", "ping", "capture", "cpu"):
            setattr(self, name, units.boolean(getattr(self, name), name))
        self.ss_hz = units.number(self.ss_hz, "ss_hz", minimum=1)
        self.qdisc_hz = units.number(self.qdisc_hz, "qdisc_hz", minimum=1)
        self.ping_interval = units.duration(self.ping_interval, "ping_interval", positive=True)
        self.snaplen = units.integer(self.snaplen, "snaplen", minimum=64)
        self.cpu_hz = units.number(self.cpu_hz, "cpu_hz", minimum=1)
        if not isinstance(self.events, (list, tuple)):
            raise SpecError("events", f"expected a list of tracepoints, got {self.events!r}")
        for i, e in enumerate(self.events):
            if e not in MODULE_EVENTS:
                raise SpecError(f"events[{i}]", f"unknown tracepoint {e!r} (known: "
                                f"{', '.join(MODULE_EVENTS)})")
        self.events = list(dict.fromkeys(self.events))


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
    base: str = "."                  # folder relative paths are read from (set by load())

    def __post_init__(self):
        units.text(self.name, "name")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise SpecError("name", "use letters, digits, '-', '_' and '.' only")
        if not isinstance(self.override, dict):
            raise SpecError("override", "expected a table")
        if isinstance(self.profile, Profile):
            self.link = self.profile
            if self.override:
                raise SpecError("override", "only applies to a profile given by name")
        else:
            units.text(self.profile, "profile")
            self.link = profiles.load(self.profile, self.override)
        if isinstance(self.measure, dict):
            check_keys(self.measure, Measure.__dataclass_fields__, "measure")
            try:
                self.measure = Measure(**self.measure)
            except SpecError as e:
                raise e.under("measure") from None
        self.repetitions = units.integer(self.repetitions, "repetitions", minimum=1)
        self.seed = units.integer(self.seed, "seed", minimum=0)
        self.tail = units.duration(self.tail, "tail")
        self.time_limit = units.duration(self.time_limit, "time_limit", positive=True)
        if not isinstance(self.modules, list):
            raise SpecError("modules", "expected a list of .ko files")
        for i, m in enumerate(self.modules):
            units.text(m, f"modules[{i}]")
            if not m.endswith(".ko"):
                raise SpecError(f"modules[{i}]", f"expected a .ko file, got {m!r}")
        check_sysctls(self.sysctl, "sysctl")
        if not self.flows:
            raise SpecError("flow", "an experiment needs at least one [[flow]]")
        known = set(KNOWN_CCAS) | set(available_ccas()) | {Path(m).stem.removeprefix("tcp_")
                                                            for m in self.modules}
        flows = []
        for i, f in enumerate(self.flows, 1):
            where = f"flow[{i}]"
            if isinstance(f, dict):
                check_keys(f, Flow.__dataclass_fields__, where)
                if "cca" not in f:
                    raise SpecError(f"{where}.cca", "missing")
                try:
                    f = Flow(**f)
                except SpecError as e:
                    raise e.under(where) from None
            elif not isinstance(f, Flow):
                raise SpecError(where, "expected a table")
            if f.cca not in known and f.protocol == "tcp":
                raise SpecError(f"{where}.cca", f"unknown congestion control {f.cca!r} "
                                f"(known: {', '.join(sorted(known))})")
            f = replace(f) if f.pair is not None else replace(f, pair=(i - 1) % self.link.pairs + 1)
            if f.pair > self.link.pairs:
                raise SpecError(f"{where}.pair", f"the profile has {self.link.pairs} pair(s), "
                                f"got pair {f.pair}")
            flows.append(f)
        self.flows = flows

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
        return e

    def as_given(self) -> dict:
        """The spec as a plain table (what the manifest records)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("profile", "base")}
        d["profile"] = self.profile if isinstance(self.profile, str) else self.link.to_dict()
        d["flows"] = [asdict(f) for f in self.flows]
        return d


EXPERIMENT_KEYS = ("name", "description", "profile", "override", "flow", "measure", "repetitions",
                   "seed", "modules", "sysctl", "tail", "time_limit")


def from_dict(table: dict, name: str, base: Path = Path(".")) -> Experiment:
    check_keys(table, EXPERIMENT_KEYS)
    table = dict(table)
    if "profile" not in table:
        raise SpecError("profile", "missing: name the link profile, e.g. profile = \"wired\"")
    flows = table.pop("flow", [])
    if not isinstance(flows, list):
        raise SpecError("flow", "write flows as [[flow]] tables")
    table.setdefault("name", name)
    modules = [str((base / m)) if not Path(m).is_absolute() else m
               for m in table.get("modules", [])] if isinstance(table.get("modules"), list) else table.get("modules")
    if modules is not None:
        table["modules"] = modules
    prof = table.get("profile")
    if isinstance(prof, str) and prof.endswith(".toml") and not Path(prof).is_absolute():
        candidate = base / prof
        if candidate.is_file():
            table["profile"] = str(candidate)
    return Experiment(flows=flows, base=str(base), **table)


def load(path) -> Experiment:
    path = Path(path)
    table = profiles.load_toml(path, "experiment")
    exp = from_dict(table, path.stem, path.parent)
    exp.given = table              # the spec as written, for the manifest
    return exp

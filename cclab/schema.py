"""The schema of experiment and profile files, as pydantic models.

Every table of an experiment file (examples/, labs/) and of a profile file (topologies/) has a
model here that refuses unknown keys (extra="forbid"), wrong types and out-of-range values.
The dataclasses the rest of the kit uses (spec.Experiment, spec.Flow, profiles.Profile, ...)
validate through these models too, so a file and the same experiment built in Python are
checked by the same rules.

A bad value raises units.SpecError with one line naming the field the way the file writes it:
`flow[0].rate: ...`, `override.down.delay: ...`, `measure.ss_hz: ...` (lists count from 0).

Every duration, delay, rate, size and count has an upper bound, below.  The JSON Schema of both
kinds of file (`python3 -m cclab schema`, docs/experiment.schema.json and
docs/profile.schema.json) lets an editor check a TOML file as it is typed.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr,
                      StringConstraints, ValidationError, WithJsonSchema, field_validator,
                      model_validator)

from . import units
from .units import SpecError

# ---------------------------------------------------------------- bounds

# The packet geometry every part of the kit counts with (one source: the engine's qdiscs, the
# trace player, the analysis and the labs import these).
MTU = 1500                      # bytes per IP packet on every emulated link
WIRE_OVERHEAD = 14              # the Ethernet header htb, tbf and netem count with each packet
WIRE_PACKET = MTU + WIRE_OVERHEAD     # bytes a full-size packet costs a qdisc
TCP_IP_HEADERS = 52             # IPv4 20 + TCP 20 + the timestamps option 12
MSS = MTU - TCP_IP_HEADERS      # 1448: payload bytes of a full-size segment

MAX_RATE = 10e9                 # bit/s, any link rate (10 Gbit/s: beyond what the emulator carries)
MAX_DELAY = 10.0                # s, one-way delay, jitter, tbf latency, netem slot gaps (GEO: 0.3)
MAX_FLOW_TIME = 3600.0          # s, a flow's start and its duration, the tail, dynamics periods
MAX_TIME_LIMIT = 4 * 3600.0     # s, how long one run may take (size-limited flows)
MAX_INTERVAL = 60.0             # s, sampling intervals and a trace's step (iperf3 allows 60 s)
MIN_IPERF_INTERVAL = 0.1        # s, iperf3 reports at most this often
MAX_SAMPLE_HZ = 1000.0          # samples per second of ss, qdisc and cpu sampling
MAX_BYTES = 10e9                # bytes in one size-limited flow (10 GB)
MAX_BURST = 64 << 20            # bytes in a token bucket or a netem slot
MAX_PACKETS = 1_000_000         # packets in a buffer, a netem limit or a netem slot
MAX_BDP = 100                   # a buffer in multiples of the bandwidth-delay product
MAX_PAIRS = 16                  # sender/receiver pairs of a dumbbell
MAX_FLOWS = 64                  # [[flow]] tables in one experiment (one iperf3 port each)
MAX_STREAMS = 64                # parallel connections of one flow (iperf3 -P)
MAX_REPETITIONS = 100           # runs of one experiment
MAX_SEED = 2**32 - 1
MAX_MODULES = 16                # .ko files an experiment may load
MIN_LENGTH, MAX_LENGTH = 16, 65000   # bytes of a UDP datagram's payload
MIN_SNAPLEN, MAX_SNAPLEN = 64, 65535  # bytes of each captured packet
MAX_NAME = 64                   # characters of an experiment or profile name
MAX_TEXT = 2000                 # characters of a summary or a description
MAX_HOLDS = 16                  # [[hold]] tables in one experiment
MAX_HOLD = 60.0                 # s, how long one hold keeps a direction's packets back
MAX_RTO_MIN = 120.0             # s, a route's rto_min (Linux's TCP_RTO_MAX)

# Congestion controls that Linux ships (loadable as tcp_<name>) and the kit's own modules.
KNOWN_CCAS = ("bbr", "bic", "cdg", "cubic", "dctcp", "highspeed", "htcp", "hybla", "illinois",
              "lp", "nv", "reno", "scalable", "vegas", "veno", "westwood", "yeah",
              "spline", "search")
# The kit's modules' tracepoints a spec may enable (measure.events), and the table of each.
MODULE_EVENTS = {"spline:spline_mode": "spline", "search:search_exit": "search"}


# ---------------------------------------------------------------- value types

def _unit_type(parse, units_table: dict, number: dict, describe: str, optional: bool,
               **bounds):
    """A value written as a number or as a string with a unit, parsed to float by `parse`."""
    def check(value):
        if value is None and optional:
            return None
        return parse(value, "", **bounds)
    schema = {"anyOf": [dict(type="number", **number),
                        {"type": "string", "pattern": units.unit_pattern(units_table)}],
              "description": describe}
    return Annotated[Optional[float], BeforeValidator(check), WithJsonSchema(schema)]


def Rate(describe: str = "bit/s: a number, or a string such as \"10mbit\", \"50 Mbit/s\", "
         "\"6MB/s\" (megabytes)", optional: bool = False):
    return _unit_type(units.rate, units._RATE_UNITS,
                      {"exclusiveMinimum": 0, "maximum": MAX_RATE},
                      f"{describe}; at most {units.tc_rate(MAX_RATE)}", optional, maximum=MAX_RATE)


def Duration(maximum: float, describe: str, positive: bool = False, minimum: float = 0.0,
             optional: bool = False):
    number = {"exclusiveMinimum": 0} if positive else {"minimum": minimum}
    return _unit_type(units.duration, units._TIME_UNITS, dict(number, maximum=maximum),
                      f"{describe}: seconds, or a string such as \"50ms\", \"1.5s\"; "
                      f"at most {maximum:g} s", optional, positive=positive, minimum=minimum,
                      maximum=maximum)


def Size(maximum: float, describe: str, minimum: int = 0, optional: bool = True):
    def check(value):
        if value is None and optional:
            return None
        return units.size(value, "", minimum=minimum, maximum=maximum)
    schema = {"anyOf": [{"type": "integer", "minimum": max(1, minimum), "maximum": maximum},
                        {"type": "string", "pattern": units.unit_pattern(units._SIZE_UNITS)}],
              "description": f"{describe}: bytes, or a string such as \"10MB\", \"64MiB\", "
                             f"\"32kbit\"; at most {maximum:,.0f} bytes"}
    return Annotated[Optional[int], BeforeValidator(check), WithJsonSchema(schema)]


def _whole(value):
    # TOML and Python both may give 4.0 for a count; anything else goes to strict int checking
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def Count(minimum: int, maximum: int, describe: str):
    return Annotated[int, BeforeValidator(_whole),
                     Field(strict=True, ge=minimum, le=maximum, description=describe)]


def _percent(value):
    return units.percent(value, "")


Percent = Annotated[float, BeforeValidator(_percent),
                    WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0, "maximum": 100},
                                              {"type": "string",
                                               "pattern": rf"^\s*{units.NUMBER_PATTERN}\s*%?\s*$"}],
                                    "description": "percent: 2, 0.5 or \"2%\" (0 to 100)"})]


def _strict_number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {_shown(value)}")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return value


Hz = Annotated[float, BeforeValidator(_strict_number), Field(ge=1, le=MAX_SAMPLE_HZ)]

Name = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=MAX_NAME,
                                        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
Text = Annotated[str, StringConstraints(strict=True, max_length=MAX_TEXT)]
FilePath = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=4096)]
CcaName = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=15,
                                           pattern=r"^[a-z][a-z0-9_]*$")]
Module = Annotated[str, StringConstraints(strict=True, min_length=4, max_length=4096,
                                          pattern=r"\.ko$")]
SysctlName = Annotated[str, StringConstraints(strict=True, max_length=200,
                                              pattern=r"^net(\.[A-Za-z0-9_]+)+$")]


def _sysctl_value(value):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a number or a string, got {_shown(value)}")
    return value


SysctlValue = Annotated[Union[int, str], BeforeValidator(_sysctl_value),
                        WithJsonSchema({"type": ["integer", "string"]})]
Sysctls = Annotated[dict[SysctlName, SysctlValue],
                    Field(description="per-host network sysctls, e.g. "
                                      "\"net.ipv4.tcp_ecn\" = 1")]


def _buffer(value):
    if isinstance(value, str) and value.strip().endswith("bdp"):
        k = units.number(value.strip()[:-3].strip() or "1", "", minimum=0)
        if k <= 0:
            raise ValueError(f"must be greater than zero, got {value!r}")
        if k > MAX_BDP:
            raise ValueError(f"must be at most {MAX_BDP} BDP, got {value!r}")
        return f"{k:g}bdp"
    value = _whole(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected packets (150) or BDP multiples (\"2bdp\"), got "
                         f"{_shown(value)}")
    if value < 1:
        raise ValueError(f"must be at least 1 packet, got {value}")
    if value > MAX_PACKETS:
        raise ValueError(f"must be at most {MAX_PACKETS} packets, got {value}")
    return value


Buffer = Annotated[Union[int, str], BeforeValidator(_buffer),
                   WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1,
                                              "maximum": MAX_PACKETS},
                                             {"type": "string",
                                              "pattern": rf"^\s*({units.NUMBER_PATTERN})?\s*bdp\s*$"}],
                                   "description": "queue size: packets (150) or multiples of "
                                                  f"the BDP (\"2bdp\", at most {MAX_BDP})"})]


class Model(BaseModel):
    """A table of a file: unknown keys are refused."""
    model_config = ConfigDict(extra="forbid")


def _refuse(field: str, message: str):
    """A cross-field error from a model validator, naming the field it is about."""
    raise SpecError(field, message)


# ---------------------------------------------------------------- profiles

class SlotModel(Model):
    """netem slotting: packets leave in bursts, as with Wi-Fi frame aggregation."""
    min: Duration(MAX_DELAY, "shortest gap between slots")
    max: Duration(MAX_DELAY, "longest gap between slots")
    packets: Optional[Count(1, MAX_PACKETS, "most packets per slot")] = None
    bytes: Size(MAX_BURST, "most bytes per slot") = None

    @model_validator(mode="after")
    def _order(self):
        if self.max < self.min:
            _refuse("max", "must not be below min")
        return self


class DirectionModel(Model):
    """One direction of the bottleneck link."""
    rate: Rate()
    delay: Duration(MAX_DELAY, "one-way propagation delay") = 0.0
    jitter: Duration(MAX_DELAY, "delay variation (needs shaper = \"netem\")") = 0.0
    loss: Percent = 0.0
    # netem's correlation of successive loss draws ("loss 20% 5%": 5 %); needs loss
    loss_correlation: Percent = 0.0
    buffer: Buffer = "1bdp"
    limit: Optional[Count(1, MAX_PACKETS, "netem's limit in packets")] = None
    shaper: Literal["htb", "tbf", "netem"] = "htb"
    burst: Size(MAX_BURST, "htb/tbf token bucket", minimum=MTU) = None
    latency: Duration(MAX_DELAY, "tbf's latency (tbf only)", positive=True, optional=True) = None
    slot: Optional[SlotModel] = None
    at: Literal["router", "host"] = "router"

    @model_validator(mode="after")
    def _shaper(self):
        if self.loss_correlation and not self.loss:
            _refuse("loss_correlation", "needs loss (it correlates netem's loss draws)")
        if self.latency is not None and self.shaper != "tbf":
            _refuse("latency", "only applies to shaper = \"tbf\"")
        if (self.jitter or self.slot) and self.shaper != "netem":
            # Only netem's own rate keeps jittered packets in order.
            _refuse("jitter" if self.jitter else "slot",
                    "needs shaper = \"netem\" (so jitter does not reorder packets)")
        return self


def _range(value):
    if value in ((), [], None):
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"expected [low, high], got {_shown(value)}")
    return value


def RateRange(describe):
    return Annotated[Optional[tuple[Rate(), Rate()]], BeforeValidator(_range),
                     Field(description=f"{describe}: [low, high]; empty: keep the profile's")]


class ReconfigureModel(Model):
    """Starlink-style: every `period`, rate and delay are re-drawn (uniformly within the
    ranges), with an outage (or loss burst) of `outage` at each handover."""
    kind: Literal["reconfigure"] = "reconfigure"
    period: Duration(MAX_FLOW_TIME, "time between reconfigurations", positive=True) = 15.0
    offset: Duration(MAX_FLOW_TIME, "first instant, past the minute or the start") = 12.0
    align: Literal["wallclock", "start"] = "wallclock"
    down_rate: RateRange("down rate range") = None
    up_rate: RateRange("up rate range") = None
    delay: Annotated[Optional[tuple[Duration(MAX_DELAY, "low"), Duration(MAX_DELAY, "high")]],
                     BeforeValidator(_range),
                     Field(description="one-way delay range, both directions")] = None
    outage: Duration(MAX_FLOW_TIME, "handover outage") = 0.0
    outage_loss: Percent = 100.0

    @field_validator("down_rate", "up_rate", "delay")
    @classmethod
    def _ordered(cls, value):
        if value is not None and value[1] < value[0]:
            raise ValueError("high must not be below low")
        return value

    @model_validator(mode="after")
    def _outage(self):
        if self.outage >= self.period:
            _refuse("outage", "must be shorter than the period")
        return self


class TraceModel(Model):
    """Cellular: the rate follows mahimahi traces, updated every `step`."""
    kind: Literal["trace"] = "trace"
    down: Optional[FilePath] = Field(None, description="trace file, relative to the profile's folder")
    up: Optional[FilePath] = None
    step: Duration(MAX_INTERVAL, "time between rate updates", positive=True) = 0.1

    @model_validator(mode="after")
    def _one(self):
        if self.down is None and self.up is None:
            _refuse("down", "a trace replay needs a down and/or an up trace")
        return self


Dynamics = Annotated[Union[ReconfigureModel, TraceModel], Field(discriminator="kind")]


class ProfileModel(Model):
    """A link profile: a file in topologies/."""
    name: Optional[Name] = None
    summary: Text = ""
    pairs: Count(1, MAX_PAIRS, "sender/receiver pairs") = 1
    down: Optional[DirectionModel] = Field(None, description="server side -> client side")
    up: Optional[DirectionModel] = Field(None, description="client side -> server side")
    dynamics: Optional[Dynamics] = None
    sysctl: Sysctls = {}
    offloads: StrictBool = False

    @model_validator(mode="after")
    def _whole_profile(self):
        if self.down is None and self.up is None:
            _refuse("down", "missing: a profile needs a [down] and/or an [up] table")
        if self.offloads and (any(d.loss for d in (self.down, self.up) if d) or self.dynamics):
            _refuse("offloads", "must stay false on a lossy or time-varying link "
                    "(netem would drop whole GSO super-packets)")
        for d in ("down", "up"):
            wants = (getattr(self.dynamics, d, None) if isinstance(self.dynamics, TraceModel)
                     else getattr(self.dynamics, f"{d}_rate", None))
            if wants and getattr(self, d) is None:
                _refuse(f"dynamics.{d}", f"the profile does not shape {d} (no [{d}] table)")
        return self


# ---------------------------------------------------------------- paths (lab 5's topology)

MAX_PATHS = 4                  # paths from one client (lab 5 has two)


class PathModel(Model):
    """One [[path]] of a paths file: a router and a server of its own, the router's egress
    towards the server shaped by netem (the data direction; the ACKs are not delayed)."""
    key: Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z]$")] = Field(
        description="one letter: the path's name in interface and node names (a, b, ...)")
    name: Name = Field(description="what the path is (\"clean\", \"lossy\")")
    rate: Rate()
    delay: Duration(MAX_DELAY, "one-way delay towards the server: the path's RTT") = 0.0
    loss: Percent = 0.0
    limit: Count(1, MAX_PACKETS, "netem's queue limit in packets") = 1000


class PathsModel(Model):
    """A paths file (topologies/paths/*.toml): one client, a server behind each path."""
    summary: Text = ""
    path: Annotated[list[PathModel], Field(min_length=1, max_length=MAX_PATHS)]

    @model_validator(mode="after")
    def _distinct(self):
        for field in ("key", "name"):
            seen = [getattr(p, field) for p in self.path]
            if len(set(seen)) != len(seen):
                _refuse(f"path.{field}", f"each path needs its own {field}, got {seen}")
        return self


# ---------------------------------------------------------------- experiments

class FlowModel(Model):
    """One [[flow]]: an iperf3 transfer."""
    cca: CcaName
    start: Duration(MAX_FLOW_TIME, "after the run starts") = 0.0
    duration: Duration(MAX_FLOW_TIME, "whole seconds of bulk transfer (default 10)",
                       positive=True, optional=True) = None
    bytes: Size(MAX_BYTES, "a size-limited transfer instead of a duration") = None
    streams: Count(1, MAX_STREAMS, "parallel connections") = 1
    direction: Literal["down", "up"] = "down"
    pair: Optional[Count(1, MAX_PAIRS, "which sender/receiver pair (1-based)")] = None
    protocol: Literal["tcp", "udp"] = "tcp"
    rate: Rate("UDP target rate or a TCP rate cap (iperf3 -b)", optional=True) = None
    length: Optional[Count(MIN_LENGTH, MAX_LENGTH, "UDP datagram payload in bytes")] = None

    @field_validator("duration")
    @classmethod
    def _whole_seconds(cls, value):
        if value is not None and value != int(value):
            # iperf3 -t takes whole seconds (it would run 1.5 s as 1 s, 0.5 s forever)
            raise ValueError(f"iperf3 runs whole seconds: got {value:g} s")
        return value

    @model_validator(mode="after")
    def _defaults(self):
        if self.duration is not None and self.bytes is not None:
            _refuse("bytes", "give either duration or bytes, not both")
        if self.bytes is None and self.duration is None:
            self.duration = 10.0
        if self.rate is None and self.protocol == "udp":
            self.rate = 1e6
        return self


class MeasureModel(Model):
    """[measure]: what is recorded during a run."""
    iperf_interval: Duration(MAX_INTERVAL, "between iperf3 reports",
                             minimum=MIN_IPERF_INTERVAL) = 0.1
    ss: StrictBool = True
    ss_hz: Hz = 20.0
    tcp_probe: StrictBool = True
    qdisc: StrictBool = True
    qdisc_hz: Hz = 10.0
    ping: StrictBool = True
    ping_interval: Duration(MAX_INTERVAL, "between pings", positive=True) = 0.2
    capture: StrictBool = False
    snaplen: Count(MIN_SNAPLEN, MAX_SNAPLEN, "bytes captured of each packet") = 128
    cpu: StrictBool = True
    cpu_hz: Hz = 10.0
    events: list[Literal[tuple(MODULE_EVENTS)]] = Field(
        [], description="the kit's modules' tracepoints to record")

    @field_validator("events")
    @classmethod
    def _once(cls, value):
        return list(dict.fromkeys(value))


class HoldModel(Model):
    """One [[hold]]: every packet the senders of a direction send is kept back from `start` for
    `duration`, then released at once (a plug qdisc on each sending host: an ACK stall, when the
    direction is "up" and the data flows down)."""
    direction: Literal["down", "up"] = "up"
    start: Duration(MAX_FLOW_TIME, "after the run starts")
    duration: Duration(MAX_HOLD, "how long the packets are kept back", positive=True)


def _profile_ref(value):
    if isinstance(value, str) and not value:
        raise ValueError("expected a profile name")
    return value


# A module parameter of the lab's [lab.module_params] table: the module's name (tcp_spline,
# tcp_cubic, ...) and the parameter's, as /sys/module/<module>/parameters/<param> spells them
ModuleName = Annotated[str, StringConstraints(strict=True, pattern=r"^tcp_[a-z0-9_]{1,40}$")]
ParamName = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_]{0,40}$")]
MAX_PARAM = 1 << 31                 # a module parameter's value: an int (or a bool) the kernel takes


def _param_value(value):
    if isinstance(value, bool) or (isinstance(value, int) and -MAX_PARAM <= value < MAX_PARAM):
        return value
    raise ValueError(f"expected an integer from {-MAX_PARAM} to {MAX_PARAM - 1} or true/false, "
                     f"got {value!r}")


ParamValue = Annotated[Any, BeforeValidator(_param_value), WithJsonSchema(
    {"anyOf": [{"type": "boolean"},
               {"type": "integer", "minimum": -MAX_PARAM, "maximum": MAX_PARAM - 1}]})]


class LabModel(Model):
    """The lab's own settings in an experiment file: read by the lab's code (labkit, kmodlab),
    not by the engine, which runs the file as if the table were not there."""
    module_params: dict[ModuleName, dict[ParamName, ParamValue]] = Field(
        {}, description="module parameters set before the experiment and put back after it "
                        "(labs 3 and 4)")
    own_link: Optional[Text] = Field(None, description="why this file keeps its link for every "
                                     "student instead of the student's own (a reason, not a flag)")
    student: Optional[dict[str, Any]] = Field(None, description="written by the lab: the student "
                                              "whose link the run used; not for files")


class ExperimentModel(Model):
    """An experiment file (examples/, labs/)."""
    name: Optional[Name] = Field(None, description="default: the file's name")
    description: Text = ""
    profile: Annotated[StrictStr, BeforeValidator(_profile_ref),
                       Field(description="a profile in topologies/ by name, or a path to one")]
    override: dict[str, Any] = Field({}, description="profile fields changed for this "
                                     "experiment only")
    flow: Annotated[list[FlowModel], Field(min_length=1, max_length=MAX_FLOWS)]
    measure: MeasureModel = MeasureModel()
    repetitions: Count(1, MAX_REPETITIONS, "runs") = 1
    seed: Count(0, MAX_SEED, "random seed") = 1
    modules: Annotated[list[Module], Field(max_length=MAX_MODULES,
                                           description=".ko files to insmod if their CCA is "
                                                       "missing")] = []
    sysctl: Sysctls = {}
    tail: Duration(MAX_FLOW_TIME, "measured after the last flow ends") = 1.0
    time_limit: Duration(MAX_TIME_LIMIT, "a run may take at most", positive=True) = 300.0
    hold: Annotated[list[HoldModel], Field(max_length=MAX_HOLDS,
                                           description="times a direction's packets are "
                                                       "kept back, then released")] = []
    rto_min: Duration(MAX_RTO_MIN, "the floor of every host's retransmission timeout (its "
                      "default route's rto_min; Linux's own is 200 ms)", positive=True,
                      optional=True) = None
    lab: Optional[LabModel] = Field(None, description="the lab's own settings (e.g. "
                                    "[lab.module_params]), read by the lab's code, not the "
                                    "engine")


# ---------------------------------------------------------------- errors

_MESSAGES = {
    "missing": "missing",
    "extra_forbidden": "unknown key",
    "int_type": "expected a whole number",
    "int_from_float": "expected a whole number",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "float_type": "expected a number",
    "list_type": "expected a list",
    "tuple_type": "expected [low, high]",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
    "dataclass_type": "expected a table",
}


def _known_keys(model, loc: tuple) -> list[str]:
    """The keys the table at `loc` (inside `model`) allows."""
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            # a discriminated union's tag ("reconfigure") picks the model
            model = {"reconfigure": ReconfigureModel, "trace": TraceModel}.get(part, model)
            continue
        model = _inner_model(field.annotation)
    return sorted(model.model_fields) if model is not None else []


def _inner_model(annotation):
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        m = _inner_model(arg)
        if m is not None:
            return m
    return None


def _where(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("[key]",) or part in ("reconfigure", "trace") and out.endswith("dynamics"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def error(e: ValidationError, model) -> SpecError:
    """The first error of a failed validation as one SpecError naming the field."""
    err = e.errors(include_url=False)[0]
    kind, loc = err["type"], tuple(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, SpecError):
        # from a units parser (no field) or a cross-field check (names its field)
        where = _where(loc + ((cause.field,) if cause.field else ()))
        return SpecError(where, cause.message)
    if isinstance(cause, Exception):
        return SpecError(_where(loc), str(cause))
    where = _where(loc)
    if kind == "extra_forbidden":
        return SpecError(where, f"unknown key (known keys: "
                                f"{', '.join(_known_keys(model, loc[:-1]))})")
    if kind in ("too_short", "missing") and where == "flow":
        return SpecError(where, "an experiment needs at least one [[flow]]")
    if kind == "union_tag_not_found":
        return SpecError(f"{where}.kind", "missing (reconfigure or trace)")
    if kind == "union_tag_invalid":
        return SpecError(f"{where}.kind", f"must be one of reconfigure, trace, got "
                                          f"{_shown(err['ctx'].get('tag'))}")
    bound = {"less_than_equal": "at most", "greater_than_equal": "at least",
             "too_long": "at most", "too_short": "at least"}.get(kind)
    if bound and kind.startswith("too_"):
        n = err["ctx"]["max_length" if bound == "at most" else "min_length"]
        return SpecError(where, f"must have {bound} {n} item(s), got {err['ctx']['actual_length']}")
    if bound:
        n = err["ctx"]["le" if bound == "at most" else "ge"]
        return SpecError(where, f"must be {bound} {n:g}, got {_shown(err['input'])}")
    if kind in ("string_too_long", "string_too_short"):
        n, bound = ((err["ctx"]["max_length"], "at most") if kind == "string_too_long"
                    else (err["ctx"]["min_length"], "at least"))
        return SpecError(where, f"must have {bound} {n} character(s), got {_shown(err['input'])}")
    if kind == "missing" and where == "profile":
        return SpecError(where, "missing: name the link profile, e.g. profile = \"wired\"")
    if kind == "list_type" and where == "flow":
        return SpecError(where, f"write flows as [[flow]] tables, got {_shown(err['input'])}")
    if kind == "string_pattern_mismatch":
        return SpecError(where, f"{_shown(err['input'])} does not match "
                                f"{err['ctx']['pattern']}")
    if kind == "literal_error":
        return SpecError(where, f"must be {err['ctx']['expected']}, got {_shown(err['input'])}")
    message = _MESSAGES.get(kind, err["msg"])
    if kind != "missing" and kind != "extra_forbidden":
        message += f", got {_shown(err['input'])}"
    return SpecError(where, message)


def validate(model, data, where: str = ""):
    """`data` checked by `model`; a bad value raises one SpecError naming the field
    (under `where`)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error(e, model).under(where) from None


# ---------------------------------------------------------------- JSON Schema

def _strip_nulls(node):
    """TOML has no null: drop the `null` branches pydantic adds for optional values."""
    if isinstance(node, dict):
        if "anyOf" in node:
            branches = [b for b in node["anyOf"] if b != {"type": "null"}]
            if len(branches) == 1 and len(branches) != len(node["anyOf"]):
                rest = {k: v for k, v in node.items() if k != "anyOf"}
                node = {**branches[0], **rest}
            else:
                node = dict(node, anyOf=branches)
        if node.get("default", 0) is None:
            node = {k: v for k, v in node.items() if k != "default"}
        return {k: _strip_nulls(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_strip_nulls(v) for v in node]
    return node


def _partial(node):
    """The same schema with nothing required (an [override] changes only some fields)."""
    if isinstance(node, dict):
        return {k: _partial(v) for k, v in node.items() if k not in ("required", "discriminator")}
    if isinstance(node, list):
        return [_partial(v) for v in node]
    return node


def json_schema(kind: str = "experiment") -> dict:
    """The JSON Schema of an experiment file, a profile file or a paths file."""
    if kind == "profile":
        doc = _strip_nulls(ProfileModel.model_json_schema())
        title = "cclab link profile (topologies/*.toml)"
    elif kind == "experiment":
        doc = _strip_nulls(ExperimentModel.model_json_schema())
        profile = _strip_nulls(ProfileModel.model_json_schema())
        for name, sub in profile.pop("$defs", {}).items():
            doc["$defs"][f"Override{name}"] = _partial(json.loads(
                json.dumps(sub).replace('"#/$defs/', '"#/$defs/Override')))
        override = _partial(json.loads(json.dumps(profile).replace('"#/$defs/',
                                                                   '"#/$defs/Override')))
        override.update(title="Override", description=doc["properties"]["override"]
                        ["description"])
        doc["properties"]["override"] = override
        title = "cclab experiment (examples/*.toml, labs/*/*/*.toml)"
    elif kind == "paths":
        doc = _strip_nulls(PathsModel.model_json_schema())
        title = "cclab paths (topologies/paths/*.toml: one client, a server behind each path)"
    else:
        raise ValueError(f"unknown schema {kind!r} (experiment, profile or paths)")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **doc, "title": title}


def json_text(kind: str = "experiment") -> str:
    return json.dumps(json_schema(kind), indent=2, ensure_ascii=False) + "\n"

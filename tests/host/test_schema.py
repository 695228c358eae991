"""Validation by schema (cclab/schema.py): every malformed experiment or profile file is one line
naming the field and exit status 2 before anything is created; every value has an upper bound;
units are case-sensitive; the published JSON Schema is the one the models generate, and every
file the kit ships passes both the models and the JSON Schema."""
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cclab import cli, paths, profiles, schema, spec, units
from cclab.profiles import Direction, Profile
from cclab.spec import Experiment, Flow, Measure
from cclab.units import SpecError

KIT = Path(__file__).resolve().parents[2]
FLOW = '[[flow]]\ncca = "cubic"\n'
W = 'profile = "wired"\n'


def exp(top="", flow_keys="", tables=""):
    """An experiment file: top-level keys, one more key of the first flow, then tables."""
    return W + top + FLOW + flow_keys + tables


# (file contents (str, or bytes as written), the field the one line must name)
# The 16 files of the issue's review: the 4 that crashed, the 3 absurd values that were
# accepted, and 9 of the usual mistakes.
ISSUE_CASES = [
    (exp(tables='[override]\ndynamics = "x"\n'), "override.dynamics"),
    (W.encode() + b'name = "caf\xe9"\n' + FLOW.encode(), "name"),
    (exp('modules = [1]\n'), "modules[0]"),
    (exp('measure = 5\n'), "measure"),
    (exp(tables='[override]\ndown.delay = "1000000s"\n'), "override.down.delay"),
    (exp(flow_keys='start = 1e9\n'), "flow[0].start"),
    (exp(flow_keys='rate = "50mb/s"\n'), "flow[0].rate"),      # "50MB/s" is valid: megabytes
    ('profile = "nosuch"\n' + FLOW, "profile"),
    (W + '[[flow]]\ncca = "cubik"\n', "flow[0].cca"),
    (exp(tables='[override]\ndown.delay = "-5ms"\n'), "override.down.delay"),
    (exp(tables='[override]\ndown.loss = 150\n'), "override.down.loss"),
    (exp(tables='[override]\ndown.rate = 0\n'), "override.down.rate"),
    (exp(flow_keys='duration = "ten"\n'), "flow[0].duration"),
    (exp('colour = "red"\n'), "colour"),
    (W, "flow"),
    (W + '[[flow]\n', "exp.toml"),
]

MORE_CASES = [
    # types and shapes
    (W + 'flow = 3\n', "flow"),
    (W + '[flow]\ncca = "cubic"\n', "flow"),
    (exp('override = 3\n'), "override"),
    (exp(tables='[override]\ndown = 5\n'), "override.down"),
    (exp(tables='[override]\nup = { rate = "1mbit", shaper = "netem", slot = 4 }\n'),
     "override.up.slot"),
    (exp('lab = 5\n'), "lab"),
    (exp('profile2 = "wired"\n'), "profile2"),
    ('profile = ""\n' + FLOW, "profile"),
    ('profile = ["wired"]\n' + FLOW, "profile"),
    (exp('sysctl = { "net.ipv4.tcp_ecn" = true }\n'), "sysctl.net.ipv4.tcp_ecn"),
    (exp('sysctl = 1\n'), "sysctl"),
    (exp('modules = "tcp_x.ko"\n'), "modules"),
    (exp('modules = ["tcp_x.so"]\n'), "modules[0]"),
    (exp('description = 5\n'), "description"),
    (exp('seed = -1\n'), "seed"),
    (exp('repetitions = 2.5\n'), "repetitions"),
    (exp('repetitions = true\n'), "repetitions"),
    (exp(tables='[measure]\nevents = "x"\n'), "measure.events"),
    (exp(tables='[measure]\nss = "yes"\n'), "measure.ss"),
    (exp(tables='[measure]\nss_hz = true\n'), "measure.ss_hz"),
    (exp(tables='[measure]\niperf_interval = "10ms"\n'), "measure.iperf_interval"),
    (exp(flow_keys='cca = "Cubic"\n'.replace("cca", "protocol")), "flow[0].protocol"),
    (W + '[[flow]]\ncca = "CUBIC"\n', "flow[0].cca"),
    (W + '[[flow]]\ncca = "a_name_longer_than_15"\n', "flow[0].cca"),
    (exp(flow_keys='duration = 0\n'), "flow[0].duration"),
    (exp(flow_keys='pair = 0\n'), "flow[0].pair"),
    (exp(flow_keys='length = 8\nprotocol = "udp"\n'), "flow[0].length"),
    (W + FLOW + '[[flow]]\ncca = "reno"\nstart = "5 seconds"\n', "flow[1].start"),
    (exp(tables='[override]\ndynamics = { kind = "nope" }\n'), "override.dynamics.kind"),
    (exp(tables='[override]\ndynamics = { period = 3 }\n'), "override.dynamics.kind"),
    (exp(tables='[override]\ndown.limit = true\n'), "override.down.limit"),
    (exp(tables='[override]\ndown.buffer = "2BDP"\n'), "override.down.buffer"),
    (exp(tables='[override]\ndown.buffer = 0\n'), "override.down.buffer"),
    (exp(tables='[override]\ndown.shaper = "cake"\n'), "override.down.shaper"),
    (exp(tables='[override]\ndown.latency = "10ms"\n'), "override.down.latency"),
    (exp(tables='[override]\ndown.burst = 100\n'), "override.down.burst"),
    (exp(tables='[override]\ndown.at = "switch"\n'), "override.down.at"),
    (exp(tables='[override]\noffloads = 1\n'), "override.offloads"),
    (exp(tables='[override]\nsummary = 5\n'), "override.summary"),
    (exp(tables='[override]\ndown.slot = { min = "5ms", max = "1ms" }\nshaper = "netem"\n'
                 .replace("shaper", "down.shaper")), "override.down.slot.max"),
    (exp(tables='[override]\ndynamics = { kind = "reconfigure", outage = "20s" }\n'),
     "override.dynamics.outage"),
    (exp(tables='[override]\ndynamics = { kind = "trace" }\n'), "override.dynamics.down"),
    ('profile = "leo"\n' + FLOW + '[override]\ndynamics.down_rate = ["9mbit"]\n',
     "override.dynamics.down_rate"),
    ('profile = "leo"\n' + FLOW + '[override]\ndynamics.down_rate = ["9mbit", "1mbit"]\n',
     "override.dynamics.down_rate"),
    # case-sensitive units
    (exp(flow_keys='rate = "10Mbps"\n'), "flow[0].rate"),
    (exp(flow_keys='rate = "10MBit/s"\n'), "flow[0].rate"),
    (exp(tables='[override]\ndown.delay = "50MS"\n'), "override.down.delay"),
    (exp(flow_keys='bytes = "10mb"\n'), "flow[0].bytes"),
    # upper bounds
    (exp(tables='[override]\ndown.rate = "100gbit"\n'), "override.down.rate"),
    (exp(tables='[override]\ndown.rate = "2GB/s"\n'), "override.down.rate"),
    (exp(tables='[override]\ndown.jitter = "11s"\ndown.shaper = "netem"\n'),
     "override.down.jitter"),
    (exp(tables='[override]\ndown.buffer = "1000bdp"\n'), "override.down.buffer"),
    (exp(tables='[override]\ndown.buffer = 2000000\n'), "override.down.buffer"),
    (exp(tables='[override]\ndown.limit = 2000000\n'), "override.down.limit"),
    (exp(tables='[override]\ndown.burst = "1GB"\n'), "override.down.burst"),
    (exp(tables='[override]\npairs = 17\n'), "override.pairs"),
    (exp(tables='[override]\ndynamics = { kind = "reconfigure", period = "2h" }\n'),
     "override.dynamics.period"),
    ('profile = "leo"\n' + FLOW + '[override]\ndynamics.delay = ["1ms", "20s"]\n',
     "override.dynamics.delay[1]"),
    ('profile = "cellular"\n' + FLOW + '[override]\ndynamics.step = "2min"\n',
     "override.dynamics.step"),
    (exp(flow_keys='duration = "3h"\n'), "flow[0].duration"),
    (exp(flow_keys='bytes = "1TB"\n'.replace("TB", "GB").replace("1GB", "11GB")),
     "flow[0].bytes"),
    (exp(flow_keys='streams = 1000\n'), "flow[0].streams"),
    (exp(flow_keys='rate = "20gbit"\n'), "flow[0].rate"),
    (exp(flow_keys='length = 70000\nprotocol = "udp"\n'), "flow[0].length"),
    (exp('repetitions = 1000\n'), "repetitions"),
    (exp('seed = 5000000000\n'), "seed"),
    (exp('tail = "2h"\n'), "tail"),
    (exp('time_limit = "1d"\n'), "time_limit"),
    (exp('time_limit = 1e6\n'), "time_limit"),
    (exp('name = "' + "x" * 65 + '"\n'), "name"),
    (exp('modules = [' + ", ".join(['"m.ko"'] * 17) + ']\n'), "modules"),
    (W + FLOW * 65, "flow"),
    (exp(tables='[measure]\nss_hz = 100000\n'), "measure.ss_hz"),
    (exp(tables='[measure]\nping_interval = "5min"\n'), "measure.ping_interval"),
    (exp(tables='[measure]\nsnaplen = 100000\n'), "measure.snaplen"),
    # the lab's own table: known keys, module parameters by their kernel names, values ints or bools
    (exp(tables='[lab]\nmodule_param = 1\n'), "lab.module_param"),
    (exp(tables='[lab.module_params]\nspline = { drain_test = 0 }\n'), "lab.module_params.spline"),
    (exp(tables='[lab.module_params]\ntcp_spline = { "drain test" = 0 }\n'),
     "lab.module_params.tcp_spline.drain test"),
    (exp(tables='[lab.module_params]\ntcp_spline = { drain_test = "off" }\n'),
     "lab.module_params.tcp_spline.drain_test"),
    (exp(tables='[lab.module_params]\ntcp_spline = { drain_test = 1e12 }\n'),
     "lab.module_params.tcp_spline.drain_test"),
    (exp(tables='[lab]\nown_link = true\n'), "lab.own_link"),
]

CASES = ISSUE_CASES + MORE_CASES


def write(tmp_path, text, name="exp.toml"):
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return p


def run_cli(monkeypatch, capsys, tmp_path, *argv):
    """The CLI in-process: (exit status, stderr lines).  An uncaught exception fails the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("cclab.state.STATE_DIR", tmp_path / "state")
    status = cli.main(list(argv))
    return status, capsys.readouterr().err.strip().splitlines()


def test_sixteen_issue_cases():
    assert len(ISSUE_CASES) == 16


@pytest.mark.parametrize("text,field", CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("command", ["check", "run"])
def test_malformed_file_is_one_line_exit_2(tmp_path, monkeypatch, capsys, text, field, command):
    p = write(tmp_path, text)
    before = sorted(os.listdir(tmp_path))
    argv = [command, str(p)] + (["--out", str(tmp_path / "results")] if command == "run" else [])
    status, err = run_cli(monkeypatch, capsys, tmp_path, *argv)
    assert status == 2, err
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith(f"cclab: error: {p}: "), line          # names the file ...
    assert f": {field}: " in line or line.endswith(f": {field}") or field == "exp.toml", line
    assert "Traceback" not in line and "pydantic" not in line.lower(), line
    assert sorted(os.listdir(tmp_path)) == before                 # nothing created


@pytest.mark.parametrize("text,field", ISSUE_CASES[:4], ids=["dynamics", "utf8", "modules",
                                                             "measure"])
def test_cases_that_crashed_in_a_fresh_process(tmp_path, text, field):
    """The four that ended in a traceback, as a student runs them."""
    p = write(tmp_path, text)
    for argv in (["check", str(p)], ["run", str(p), "--out", str(tmp_path / "results")]):
        r = subprocess.run([sys.executable, "-m", "cclab", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(KIT),
                                    CCLAB_STATE_DIR=str(tmp_path / "state")))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and f"{field}: " in lines[0], r.stderr
        assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists()


# ---------------------------------------------------------------- profile files

PROFILE_CASES = [
    ('[down]\nrate = "10mbit"\n[dynamics]\nkind = "reconfigure"\nperiod = "1e6s"\n',
     "dynamics.period"),
    ('dynamics = "x"\n[down]\nrate = "10mbit"\n', "dynamics"),
    ('[down]\ndelay = "10ms"\n', "down.rate"),
    ('[down]\nrate = "10mbit"\nqueue = 5\n', "down.queue"),
    ('pairs = 0\n[down]\nrate = "10mbit"\n', "pairs"),
    ('[down]\nrate = "10mbit"\ndelay = "1000000s"\n', "down.delay"),
    ('[up]\nrate = "10MB/s"\n[dynamics]\nkind = "reconfigure"\ndown_rate = ["1mbit", "2mbit"]\n',
     "dynamics.down"),
    ('[down]\nrate = "10mbit"\nloss = 1\n[sysctl]\n"kernel.panic" = 1\n', "sysctl.kernel.panic"),
]


@pytest.mark.parametrize("text,field", PROFILE_CASES, ids=[c[1] for c in PROFILE_CASES])
def test_malformed_profile_file(tmp_path, monkeypatch, capsys, text, field):
    p = write(tmp_path, text, "mine.toml")
    status, err = run_cli(monkeypatch, capsys, tmp_path, "check", str(p))
    assert status == 2 and len(err) == 1 and f"{p}: {field}: " in err[0], err
    monkeypatch.setenv("CCLAB_TOPOLOGIES", str(tmp_path))       # the same file used by name
    e = write(tmp_path, 'profile = "mine"\n' + FLOW)
    status, err = run_cli(monkeypatch, capsys, tmp_path, "check", str(e))
    assert status == 2 and len(err) == 1 and f"mine.toml: {field}: " in err[0], err


def test_profile_file_not_utf8(tmp_path, monkeypatch, capsys):
    p = write(tmp_path, b'summary = "\xff"\n[down]\nrate = "1mbit"\n', "mine.toml")
    status, err = run_cli(monkeypatch, capsys, tmp_path, "check", str(p))
    assert status == 2 and err == [f"cclab: error: {p}: summary: not UTF-8 text (TOML files "
                                   "are): byte 0xff on line 1"]


# ---------------------------------------------------------------- what the kit ships

def shipped_toml():
    skip = {"pyproject.toml"}
    out = []
    for p in sorted(KIT.rglob("*.toml")):
        rel = p.relative_to(KIT)
        if p.name in skip or any(part.startswith(".") or part in ("dist", "results", "build")
                                 for part in rel.parts):
            continue
        out.append(rel)
    return out


SHIPPED = shipped_toml()


def test_the_kit_ships_experiments_and_profiles():
    assert {p.parts[0] for p in SHIPPED} >= {"examples", "labs", "topologies"}


@pytest.mark.parametrize("rel", SHIPPED, ids=[str(p) for p in SHIPPED])
def test_every_shipped_file_validates(rel, monkeypatch, capsys, tmp_path):
    status, err = run_cli(monkeypatch, capsys, tmp_path, "check", str(KIT / rel))
    assert status == 0 and not err, err
    table = tomllib.loads((KIT / rel).read_text())
    if rel.parts[:2] == ("topologies", "paths"):
        assert [p.key for p in paths.load(rel.stem)] == [p["key"] for p in table["path"]]
    elif rel.parts[0] == "topologies":
        assert profiles.load(rel.stem).name == rel.stem
    else:
        assert table["flow"] and spec.load(KIT / rel).flows


@pytest.mark.parametrize("rel", SHIPPED, ids=[str(p) for p in SHIPPED])
def test_every_shipped_file_passes_the_json_schema(rel):
    jsonschema = pytest.importorskip("jsonschema")
    kind = ("paths" if rel.parts[:2] == ("topologies", "paths") else
            "profile" if rel.parts[0] == "topologies" else "experiment")
    doc = json.loads((KIT / "docs" / f"{kind}.schema.json").read_text())
    errors = list(jsonschema.Draft202012Validator(doc).iter_errors(
        tomllib.loads((KIT / rel).read_text())))
    assert not errors, errors[0].message


# ---------------------------------------------------------------- the published schema

@pytest.mark.parametrize("kind", ["experiment", "profile", "paths"])
def test_committed_json_schema_is_the_generated_one(kind):
    committed = (KIT / "docs" / f"{kind}.schema.json").read_text()
    assert committed == schema.json_text(kind), (
        f"docs/{kind}.schema.json is stale: python3 -m cclab schema {kind} > "
        f"docs/{kind}.schema.json")


def test_schema_command(capsys):
    assert cli.main(["schema"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["additionalProperties"] is False and "flow" in doc["required"]
    assert cli.main(["schema", "profile"]) == 0
    assert json.loads(capsys.readouterr().out)["properties"]["down"]


def test_json_schema_refuses_what_the_models_refuse():
    jsonschema = pytest.importorskip("jsonschema")
    v = jsonschema.Draft202012Validator(schema.json_schema("experiment"))
    ok = tomllib.loads(exp(flow_keys='rate = "50MB/s"\n', tables='[override]\ndown.rate = "5mbit"\n'))
    assert not list(v.iter_errors(ok))
    for text in (exp('measure = 5\n'), exp('modules = [1]\n'), exp(flow_keys='start = 1e9\n'),
                 exp(flow_keys='rate = "50mb/s"\n'), exp(tables='[override]\ndown.rte = 1\n'),
                 exp(tables='[override]\ndynamics = "x"\n'), exp('colour = 1\n')):
        assert list(v.iter_errors(tomllib.loads(text))), text


# ---------------------------------------------------------------- units and bounds

@pytest.mark.parametrize("text,bits", [("50MB/s", 400e6), ("50Mbit/s", 50e6), ("50mbit", 50e6),
                                       ("50Mb/s", 50e6), ("50 Mbit", 50e6), ("1Gbit/s", 1e9),
                                       ("1gbit", 1e9), ("500kbit", 500e3), ("500Kbit/s", 500e3),
                                       ("100kB/s", 800e3), ("1B/s", 8), ("1500", 1500)])
def test_rate_units_are_case_sensitive(text, bits):
    assert units.rate(text, "rate") == bits


@pytest.mark.parametrize("text", ["50mb/s", "50Mbps", "50mbps", "50MBit/s", "50MBIT",
                                  "50mB/s", "5 M"])
def test_ambiguous_rates_are_refused(text):
    with pytest.raises(SpecError, match="case-sensitive"):
        units.rate(text, "rate")


def test_megabytes_per_second_in_a_flow(tmp_path):
    e = spec.load(write(tmp_path, exp(flow_keys='rate = "6MB/s"\n')))
    assert e.flows[0].rate == 48e6


def test_sizes_and_times_are_case_sensitive():
    assert units.size("10MB", "x") == 10_000_000 and units.size("1M", "x") == 1 << 20
    assert units.size("1MiB", "x") == 1 << 20 and units.size("8Mbit", "x") == 1_000_000
    for bad in ("10mb", "1mib", "1k"):
        with pytest.raises(SpecError):
            units.size(bad, "x")
    assert units.duration("50ms", "x") == pytest.approx(0.05)
    for bad in ("50MS", "1S", "2Min"):
        with pytest.raises(SpecError):
            units.duration(bad, "x")


BOUNDS = [
    # (experiment file builder for a value, the field, the largest value allowed, one beyond it)
    (lambda v: exp(tables=f'[override]\ndown.rate = {v}\n'), "override.down.rate",
     schema.MAX_RATE, schema.MAX_RATE * 1.01),
    (lambda v: exp(tables=f'[override]\ndown.delay = {v}\n'), "override.down.delay",
     schema.MAX_DELAY, schema.MAX_DELAY + 0.001),
    (lambda v: exp(flow_keys=f'start = {v}\n'), "flow[0].start",
     schema.MAX_FLOW_TIME, schema.MAX_FLOW_TIME + 1),
    (lambda v: exp(flow_keys=f'duration = {v}\n'), "flow[0].duration",
     schema.MAX_FLOW_TIME, schema.MAX_FLOW_TIME + 1),
    (lambda v: exp(flow_keys=f'bytes = {v}\n'), "flow[0].bytes",
     int(schema.MAX_BYTES), int(schema.MAX_BYTES) + 1),
    (lambda v: exp(flow_keys=f'streams = {v}\n'), "flow[0].streams",
     schema.MAX_STREAMS, schema.MAX_STREAMS + 1),
    (lambda v: exp(f'repetitions = {v}\n'), "repetitions",
     schema.MAX_REPETITIONS, schema.MAX_REPETITIONS + 1),
    (lambda v: exp(f'time_limit = {v}\n'), "time_limit",
     schema.MAX_TIME_LIMIT, schema.MAX_TIME_LIMIT + 1),
    (lambda v: exp(tables=f'[override]\npairs = {v}\n'), "override.pairs",
     schema.MAX_PAIRS, schema.MAX_PAIRS + 1),
    (lambda v: exp(tables=f'[override]\ndown.buffer = {v}\n'), "override.down.buffer",
     schema.MAX_PACKETS, schema.MAX_PACKETS + 1),
    (lambda v: exp(tables=f'[measure]\nss_hz = {v}\n'), "measure.ss_hz",
     schema.MAX_SAMPLE_HZ, schema.MAX_SAMPLE_HZ + 1),
    (lambda v: exp(tables=f'[measure]\niperf_interval = {v}\n'), "measure.iperf_interval",
     schema.MAX_INTERVAL, schema.MAX_INTERVAL + 1),
]


@pytest.mark.parametrize("make,field,top,beyond", BOUNDS, ids=[b[1] for b in BOUNDS])
def test_every_bound_is_enforced_at_its_constant(tmp_path, make, field, top, beyond):
    spec.from_dict(tomllib.loads(make(top)), "t")                 # the bound itself is allowed
    with pytest.raises(SpecError) as e:
        spec.from_dict(tomllib.loads(make(beyond)), "t")
    assert e.value.field == field and "at most" in e.value.message, e.value


# ---------------------------------------------------------------- the Python API

def test_dataclasses_validate_through_the_schema():
    f = Flow(cca="bbr", duration="20s", rate="6MB/s")
    assert f.duration == 20.0 and f.rate == 48e6 and f.bytes is None
    for kwargs, field in (({"rate": "50mb/s"}, "rate"), ({"start": 1e9}, "start"),
                          ({"streams": "4"}, "streams"), ({"cca": "Cubic"}, "cca")):
        with pytest.raises(SpecError) as e:
            Flow(cca="cubic", **kwargs) if "cca" not in kwargs else Flow(**kwargs)
        assert e.value.field == field, e.value
    with pytest.raises(SpecError) as e:
        Direction(rate="10mbit", delay=1e6)
    assert e.value.field == "delay"
    with pytest.raises(SpecError) as e:
        Experiment(name="t", profile="wired", flows=[Flow(cca="cubic")], measure=5)
    assert e.value.field == "measure"
    with pytest.raises(SpecError) as e:
        Experiment(name="t", profile="wired", flows=[Flow(cca="cubic")], modules=[1])
    assert e.value.field == "modules[0]"
    with pytest.raises(SpecError) as e:
        Measure(ss_hz=1e6)
    assert e.value.field == "ss_hz"


def test_python_profile_and_the_file_agree():
    wired = profiles.load("wired")
    again = Profile(name="wired", down=wired.down, up=wired.up, summary=wired.summary)
    assert (again.down, again.up, again.pairs) == (wired.down, wired.up, wired.pairs)
    d = Profile(name="x", down={"rate": "10mbit", "slot": {"min": "1ms", "max": "2ms"},
                                "shaper": "netem"}, up=None)
    assert d.down.slot.max == pytest.approx(0.002) and d.up is None


def test_lab_table_is_allowed_and_left_out(tmp_path):
    text = exp(tables='[lab.module_params]\ntcp_cubic = { hystart = 0 }\n')
    e = spec.load(write(tmp_path, text))
    assert e.given["lab"] == {"module_params": {"tcp_cubic": {"hystart": 0}}}
    assert "lab" not in e.as_given()

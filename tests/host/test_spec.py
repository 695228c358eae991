"""Experiment validation: every bad input is a one-line error naming the field, exit status 2,
and nothing is created."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cclab import spec, units
from cclab.spec import Experiment, Flow
from cclab.units import SpecError

KIT = Path(__file__).resolve().parents[2]


def cclab(*args, cwd=None, env=None):
    e = dict(os.environ, PYTHONPATH=str(KIT))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "cclab", *args], capture_output=True, text=True,
                          cwd=cwd, env=e, timeout=60)


def write(tmp_path, text, name="exp.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD = """
profile = "wired"
[[flow]]
cca = "cubic"
duration = "5s"
"""


def test_minimal_experiment_loads(tmp_path):
    e = spec.load(write(tmp_path, GOOD))
    assert e.name == "exp"
    assert e.link.name == "wired"
    assert e.flows[0].duration == 5.0 and e.flows[0].pair == 1 and e.flows[0].direction == "down"
    assert e.planned_length() == 6.0
    assert e.given["profile"] == "wired"


def test_python_construction_matches_file(tmp_path):
    e = Experiment(name="py", profile="wired", flows=[Flow(cca="cubic", duration="5s")])
    f = spec.load(write(tmp_path, GOOD))
    assert e.flows == f.flows
    assert e.link == f.link


def test_overrides_merge_into_profile(tmp_path):
    e = spec.load(write(tmp_path, GOOD + '[override]\npairs = 2\ndown.rate = "20mbit"\n'))
    assert e.link.pairs == 2 and e.link.down.rate == 20e6 and e.link.up.rate == 50e6


def test_flows_spread_over_pairs(tmp_path):
    text = '[override]\npairs = 2\n' + ''.join('[[flow]]\ncca = "reno"\n' for _ in range(3))
    e = spec.load(write(tmp_path, 'profile = "wired"\n' + text))
    assert [f.pair for f in e.flows] == [1, 2, 1]
    assert [e.port(i) for i in range(3)] == [5201, 5202, 5203]


def test_quick_scales_to_ten_seconds(tmp_path):
    e = spec.load(write(tmp_path, GOOD.replace('"5s"', '"60s"') + 'repetitions = 5\n'
                        .replace("repetitions", "#")))
    q = e.quick()
    assert q.repetitions == 1 and q.flows[0].duration == pytest.approx(10.0)
    t = Experiment(name="q", profile="wired", flows=[Flow(cca="cubic", duration=25),
                                                     Flow(cca="bbr", start=7, duration=13)])
    q = t.quick()
    assert [(f.start, f.duration) for f in q.flows] == [(0.0, 10.0), (2.8, 5.0)]


def test_size_limited_flow(tmp_path):
    e = spec.load(write(tmp_path, GOOD.replace('duration = "5s"', 'bytes = "10MB"')))
    assert e.flows[0].bytes == 10_000_000 and e.flows[0].duration is None


BAD = [
    # (toml, field named in the message)
    ('profile = "nosuch"\n[[flow]]\ncca = "cubic"\n', "profile"),
    ('profile = "wired"\n[[flow]]\ncca = "cubik"\n', "flow[0].cca"),
    ('profile = "wired"\n[override]\ndown.delay = "-5ms"\n[[flow]]\ncca = "cubic"\n', "override.down.delay"),
    ('profile = "wired"\n[override]\ndown.loss = 150\n[[flow]]\ncca = "cubic"\n', "override.down.loss"),
    ('profile = "wired"\n[override]\nup.loss = -1\n[[flow]]\ncca = "cubic"\n', "override.up.loss"),
    ('profile = "wired"\n[override]\ndown.rate = 0\n[[flow]]\ncca = "cubic"\n', "override.down.rate"),
    ('profile = "wired"\n[override]\ndown.rate = "0mbit"\n[[flow]]\ncca = "cubic"\n', "override.down.rate"),
    ('profile = "wired"\n[override]\ndown.rate = "fast"\n[[flow]]\ncca = "cubic"\n', "override.down.rate"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\nduration = "ten"\n', "flow[0].duration"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\nstreams = "4"\n', "flow[0].streams"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\nstart = -1\n', "flow[0].start"),
    ('profile = "wired"\ncolour = "red"\n[[flow]]\ncca = "cubic"\n', "colour"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\ndurration = 5\n', "flow[0].durration"),
    ('profile = "wired"\n[override]\ndown.rte = "1mbit"\n[[flow]]\ncca = "cubic"\n', "override.down.rte"),
    ('profile = "wired"\n[override]\nspeed = 1\n[[flow]]\ncca = "cubic"\n', "override.speed"),
    ('profile = "wired"\n[measure]\nss_hz = "often"\n[[flow]]\ncca = "cubic"\n', "measure.ss_hz"),
    ('profile = "wired"\n[measure]\nsnoop = true\n[[flow]]\ncca = "cubic"\n', "measure.snoop"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\ndirection = "sideways"\n', "flow[0].direction"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\npair = 3\n', "flow[0].pair"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\nduration = 5\nbytes = 100\n', "flow[0].bytes"),
    ('profile = "wired"\nrepetitions = 0\n[[flow]]\ncca = "cubic"\n', "repetitions"),
    ('profile = "wired"\n', "flow"),
    ('[[flow]]\ncca = "cubic"\n', "profile"),
    ('profile = "wired"\n[override]\ndynamics = { kind = "trace", down = "nope.trace" }\n'
     '[[flow]]\ncca = "cubic"\n', "override.dynamics.down"),
    ('profile = "wired"\n[override]\ndown.jitter = "2ms"\n[[flow]]\ncca = "cubic"\n', "override.down.jitter"),
    ('profile = "wired"\nsysctl = { "kernel.panic" = 1 }\n[[flow]]\ncca = "cubic"\n', "sysctl.kernel.panic"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[flow]]\ncca = "bbr"\nrate = "-1mbit"\n', "flow[1].rate"),
    ('profile = "wired"\nname = "bad name!"\n[[flow]]\ncca = "cubic"\n', "name"),
    ('profile = "wired"\n[[flow]\n', "exp.toml"),
    # more non-numeric values, unknown keys and unreadable traces
    ('profile = "wired"\n[override]\ndown.loss = "lots"\n[[flow]]\ncca = "cubic"\n', "override.down.loss"),
    ('profile = "wired"\n[override]\nup.delay = "soon"\n[[flow]]\ncca = "cubic"\n', "override.up.delay"),
    ('profile = "wired"\n[override]\ndown.delay = -0.01\n[[flow]]\ncca = "cubic"\n', "override.down.delay"),
    ('profile = "wired"\n[override]\ndown.buffer = "big"\n[[flow]]\ncca = "cubic"\n', "override.down.buffer"),
    ('profile = "wired"\n[override]\npairs = "two"\n[[flow]]\ncca = "cubic"\n', "override.pairs"),
    ('profile = "wired"\nrepetitions = "two"\n[[flow]]\ncca = "cubic"\n', "repetitions"),
    ('profile = "wired"\nseed = "x"\n[[flow]]\ncca = "cubic"\n', "seed"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\nbytes = "lots"\n', "flow[0].bytes"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\nprotocol = "udp"\nrate = 0\n', "flow[0].rate"),
    ('profile = "wired"\n[[flow]]\ncca = 5\n', "flow[0].cca"),
    ('profile = "wired"\n[[flow]]\nduration = 5\n', "flow[0].cca"),
    ('profile = "wifi"\n[override]\ndown.slot.size = 3\n[[flow]]\ncca = "cubic"\n', "override.down.slot.size"),
    ('profile = "leo"\n[override]\ndynamics.perod = "3s"\n[[flow]]\ncca = "cubic"\n', "override.dynamics.perod"),
    ('profile = "leo"\n[override]\ndynamics.delay = ["5ms", "-1ms"]\n[[flow]]\ncca = "cubic"\n', "override.dynamics.delay[1]"),
    ('profile = "leo"\n[override]\ndynamics.outage_loss = 101\n[[flow]]\ncca = "cubic"\n', "override.dynamics.outage_loss"),
    ('profile = "cellular"\n[override]\ndynamics.down = "/"\n[[flow]]\ncca = "cubic"\n', "override.dynamics.down"),
    ('profile = "cellular"\n[override]\ndynamics.up = "/proc/version"\n[[flow]]\ncca = "cubic"\n', "override.dynamics.up"),
    ('profile = "wired"\n[measure]\nevents = ["tcp:tcp_probe"]\n[[flow]]\ncca = "cubic"\n', "measure.events[0]"),
    ('profile = "wired"\n[measure]\ncpu_hz = 0\n[[flow]]\ncca = "cubic"\n', "measure.cpu_hz"),
    ('profile = 3\n[[flow]]\ncca = "cubic"\n', "profile"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\nduration = "1.5s"\n', "flow[0].duration"),
    # holds and the RTO floor
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[hold]]\nstart = "2s"\n', "hold[0].duration"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[hold]]\nduration = "1s"\n', "hold[0].start"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[hold]]\nstart = 2\nduration = 0\n', "hold[0].duration"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[hold]]\nstart = 2\nduration = 61\n', "hold[0].duration"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[hold]]\nstart = 2\nduration = 1\ndirection = "left"\n',
     "hold[0].direction"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[hold]]\nstart = 9\nduration = 5\n', "hold[0]"),
    ('profile = "wired"\n[[flow]]\ncca = "cubic"\n[[hold]]\nstart = 2\nduration = 2\n'
     '[[hold]]\nstart = 3\nduration = 1\n', "hold[1]"),
    ('profile = "wired"\n[override]\nup.at = "host"\n[[flow]]\ncca = "cubic"\n[[hold]]\nstart = 2\n'
     'duration = 1\n', "hold[0].direction"),
    ('profile = "wired"\nrto_min = "0ms"\n[[flow]]\ncca = "cubic"\n', "rto_min"),
    ('profile = "wired"\nrto_min = "10min"\n[[flow]]\ncca = "cubic"\n', "rto_min"),
]


@pytest.mark.parametrize("text,field", BAD, ids=[b[1] + f"-{i}" for i, b in enumerate(BAD)])
def test_bad_input_names_the_field(tmp_path, text, field):
    with pytest.raises(SpecError) as e:
        spec.load(write(tmp_path, text))
    assert field in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text,field", [BAD[1], BAD[3], BAD[11], BAD[23]])
def test_cli_bad_input_exit_2_and_nothing_created(tmp_path, text, field):
    p = write(tmp_path, text)
    out = tmp_path / "results"
    before = sorted(os.listdir(tmp_path))
    r = cclab("run", str(p), "--out", str(out), cwd=tmp_path,
              env={"CCLAB_STATE_DIR": str(tmp_path / "state")})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and lines[0].startswith("cclab: error:")
    assert sorted(os.listdir(tmp_path)) == before        # no results, no state folder


@pytest.mark.parametrize("text,field", BAD, ids=[b[1] + f"-{i}" for i, b in enumerate(BAD)])
def test_every_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, text, field):
    """The CLI in-process (fast) on every bad input: exit 2, one line naming the field, and no
    results folder or state file."""
    from cclab import cli
    p = write(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("cclab.state.STATE_DIR", tmp_path / "state")
    before = sorted(os.listdir(tmp_path))
    assert cli.main(["run", str(p), "--out", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cclab: error:") and field in err[0], err
    assert sorted(os.listdir(tmp_path)) == before


def test_cli_unreadable_spec(tmp_path):
    r = cclab("check", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_cli_check_ok(tmp_path):
    r = cclab("check", "--plan", str(write(tmp_path, GOOD)))
    assert r.returncode == 0, r.stderr
    assert "cc-r1: tc qdisc add dev cc-r1-core root handle 1: htb default 1" in r.stdout


def test_units():
    assert units.rate("10mbit", "x") == 10e6
    assert units.rate("50 Mbit/s", "x") == 50e6
    assert units.rate(1500, "x") == 1500
    assert units.duration("800us", "x") == pytest.approx(800e-6)
    assert units.duration("1.5s", "x") == 1.5 and units.duration(2, "x") == 2
    assert units.size("32kbit", "x") == 4000 and units.size("64MiB", "x") == 64 << 20
    assert units.percent("2%", "x") == 2
    for bad in ("10Mbps", "ten", True, [1], "nan"):
        with pytest.raises(SpecError):
            units.rate(bad, "x")
    assert units.tc_rate(10e6) == "10mbit" and units.tc_rate(92_372_000) == "92372kbit"
    assert units.tc_time(0.05) == "50ms" and units.tc_time(0.0138) == "13800us"
    assert units.tc_size(4000) == "32kbit" and units.tc_size(3028) == "3028b"


def test_holds_plug_the_senders_and_rto_min_sets_every_route(tmp_path):
    """A hold of "up" plugs every client's interface (the senders of ACKs for downloads), starts
    open, and becomes a block and a release on the timeline; rto_min goes on every host's
    default route."""
    from cclab import dynamics, topo
    e = spec.load(write(tmp_path, GOOD.replace('profile = "wired"', 'profile = "wired"\n'
                                              'rto_min = "2.5s"\n[override]\npairs = 2') +
                        '[[hold]]\nstart = "1s"\nduration = "1.5s"\n'
                        '[[hold]]\nstart = "3s"\nduration = "0.5s"\n'))
    plan = topo.plan(e)
    plugs = [(n, c) for n, c in plan if "plug" in c]
    assert {n for n, _ in plugs} == {"cc-c1", "cc-c2"}
    for n in ("cc-c1", "cc-c2"):
        mine = [c for m, c in plugs if m == n]
        assert mine[0][:3] == ["tc", "qdisc", "add"] and mine[-1][-1] == "release_indefinite"
    assert topo.hold_devs(e, "up") == [("cc-c1", "cc-c1-eth0"), ("cc-c2", "cc-c2-eth0")]
    assert topo.hold_devs(e, "down") == []
    routes = [(n, c) for n, c in plan if c[:3] == ["ip", "route", "change"]]
    assert len(routes) == 4 and all(c[-2:] == ["rto_min", "2500ms"] for _, c in routes)
    # set after each host's route is added (a run's setting on a kept network)
    for n, c in routes:
        mine = [a for m, a in plan if m == n and a[:2] == ["ip", "route"]]
        assert mine[0][:4] == ["ip", "route", "add", "default"] and mine[-1] == c
    steps = dynamics.hold_steps(e.hold)
    assert [(s.t, s.action) for s in steps] == [(1.0, "block"), (2.5, "release_indefinite"),
                                                (3.0, "block"), (3.5, "release_indefinite")]
    assert e.as_given()["hold"][0] == {"start": 1.0, "duration": 1.5, "direction": "up"}
    plain = topo.plan(spec.load(write(tmp_path, GOOD, "plain.toml")))
    assert not [c for _, c in plain if "plug" in c or "rto_min" in c]

"""Lab 5's topology as the engine builds it (cclab.paths): the paths file, what each node is told,
and a bad paths file refused with one line before anything is made.  Building it is tested in the
lab VM (tests/vm/test_lab5.py) and, as the student meets it, in the browser (tests/student)."""

import pytest

from cclab import cli, paths, profiles, topo
from cclab.units import SpecError

TWO = paths.load("two-paths")


def test_lab5s_file_gives_a_clean_and_a_lossy_path():
    a, b = TWO
    assert (a.key, a.name, b.key, b.name) == ("a", "clean", "b", "lossy")
    assert a.rate == b.rate == 20e6 and a.delay == b.delay == 0.020
    assert a.loss == 0 and b.loss == 10.0 and a.limit == b.limit == 1000


def test_every_interface_is_the_kits_and_fits_linux():
    ends = [e for link in paths.links(TWO) for e in link]
    devs = [e.dev for e in ends]
    assert len(set(devs)) == len(devs)                  # made side by side in one namespace
    assert all(d.startswith(topo.PREFIX) and len(d) <= 15 for d in devs), devs
    assert {e.node for e in ends} == {paths.CLIENT, "cc-prtr-a", "cc-prtr-b", "cc-psrv-a", "cc-psrv-b"}
    macs = [e.mac for e in ends]
    assert len(set(macs)) == len(macs)
    # none of them is a dumbbell's: both can be cleaned up by name, neither takes the other's
    dumbbell = {e.dev for link in topo.links(profiles.load("wired", {"pairs": 16})) for e in link}
    assert not dumbbell & set(devs)


def test_each_node_is_told_its_addresses_routes_shaping_and_neighbours():
    plan = paths.plan(TWO)
    cli_cmds = [" ".join(c) for c in plan[paths.CLIENT]]
    assert "ip route add 10.52.1.0/24 via 10.51.1.1" in cli_cmds
    assert "ip route add 10.52.2.0/24 via 10.51.2.1" in cli_cmds
    assert "sysctl -qw net.ipv4.tcp_no_metrics_save=1" in cli_cmds
    for key, loss in (("a", []), ("b", ["loss", "10%"])):
        rtr = [" ".join(c) for c in plan[paths.router(key)]]
        assert "sysctl -qw net.ipv4.ip_forward=1" in rtr
        assert " ".join(["tc", "qdisc", "replace", "dev", f"cc-prtr-{key}-s", "root", "netem", "delay",
                         "20ms", "rate", "20mbit", "limit", "1000"] + loss) in rtr
        srv = [" ".join(c) for c in plan[paths.server(key)]]
        assert f"ip route add default via 10.52.{1 if key == 'a' else 2}.1" in srv
    # a permanent neighbour entry on both ends of every link, with the MAC the link is made with
    for a, b in paths.links(TWO):
        for here, there in ((a, b), (b, a)):
            assert ["ip", "neigh", "replace", there.addr, "lladdr", there.mac, "dev", here.dev,
                    "nud", "permanent"] in plan[here.node]
    assert paths.address(TWO, "b") == "10.52.2.2" and paths.gateway(TWO, "a") == "10.51.1.1"


def test_the_links_are_made_with_those_macs_and_moved_into_their_nodes():
    pids = {n: 100 + i for i, n in enumerate(sorted({e.node for l in paths.links(TWO) for e in l}))}
    text = topo.veth_script(topo.veth_plan(paths.links(TWO)), pids)
    for a, b in paths.links(TWO):
        assert f"link add name {a.dev} address {a.mac} type veth peer name {b.dev} address {b.mac}" in text
        for e in (a, b):
            assert f"link set dev {e.dev} netns {pids[e.node]}" in text
            assert f"ethtool -K {e.dev} tso off gso off gro off" in text


BAD = [
    ('[[path]]\nkey = "a"\nname = "x"\nrate = "20mbit"\n[[path]]\nkey = "a"\nname = "y"\nrate = "1mbit"\n', "path.key"),
    ('[[path]]\nkey = "a"\nname = "x"\nrate = "20mbit"\n[[path]]\nkey = "b"\nname = "x"\nrate = "1mbit"\n', "path.name"),
    ('[[path]]\nkey = "ab"\nname = "x"\nrate = "20mbit"\n', "path[0].key"),
    ('[[path]]\nkey = "a"\nname = "x"\n', "path[0].rate"),
    ('[[path]]\nkey = "a"\nname = "x"\nrate = "20mbit"\nloss = 120\n', "path[0].loss"),
    ('[[path]]\nkey = "a"\nname = "x"\nrate = "20mbit"\ndelay = "1000s"\n', "path[0].delay"),
    ('[[path]]\nkey = "a"\nname = "x"\nrate = "20mbit"\nlimit = 0\n', "path[0].limit"),
    ('[[path]]\nkey = "a"\nname = "x"\nrate = "20mbit"\nqueue = 5\n', "path[0].queue"),
    ("".join(f'[[path]]\nkey = "{k}"\nname = "{k}"\nrate = "1mbit"\n' for k in "abcde"), "path"),
    ('summary = "none"\npath = []\n', "path"),
]


@pytest.mark.parametrize("text,field", BAD, ids=[f for _, f in BAD])
def test_a_bad_paths_file_is_one_line_naming_the_field(text, field, tmp_path, monkeypatch, capsys):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(SpecError) as e:
        paths.load(str(f))
    assert str(e.value).startswith(f"{f}: {field}") or f"{field}:" in str(e.value), str(e.value)
    monkeypatch.chdir(tmp_path)
    status = cli.main(["check", str(f)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and field in err[0], (status, err)


def test_an_unknown_paths_file_names_the_known_ones():
    with pytest.raises(SpecError, match="two-paths"):
        paths.load("three-paths")

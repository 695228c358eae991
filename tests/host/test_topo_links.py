"""The dumbbell's links, their fixed MACs and the permanent neighbour entries set on both ends
of each (no ARP on lossy links), as pure data: they must match the addresses and interfaces the
plan configures."""
import re

from cclab import topo
from cclab.spec import Experiment, Flow


def experiment(pairs):
    return Experiment(name="t", profile="wired", override={"pairs": pairs, "down": {"loss": 10}},
                      flows=[Flow(cca="cubic", pair=i) for i in range(1, pairs + 1)])


def addresses(e):
    """{(node, dev): address} from the plan's `ip addr add` commands."""
    out = {}
    for node, argv in topo.plan(e):
        if argv[:3] == ["ip", "addr", "add"]:
            out[(node, argv[argv.index("dev") + 1])] = argv[3].split("/")[0]
    return out


def test_links_cover_every_interface_once_with_its_planned_address():
    for pairs in (1, 3):
        e = experiment(pairs)
        ends = [end for link in topo.links(e.link) for end in link]
        assert len(topo.links(e.link)) == 1 + 2 * pairs
        every = {(n, d) for n, devs in topo.interfaces(e.link).items() for d in devs}
        assert sorted((x.node, x.dev) for x in ends) == sorted(every)
        planned = addresses(e)
        assert {(x.node, x.dev): x.addr for x in ends} == planned
        for a, b in topo.links(e.link):
            # the two ends share a subnet (/30 core, /24 host links)
            assert a.addr.rsplit(".", 1)[0] == b.addr.rsplit(".", 1)[0]
            assert a.node != b.node


def test_macs_are_unicast_locally_administered_and_unique():
    e = experiment(3)
    macs = [x.mac for link in topo.links(e.link) for x in link]
    assert len(set(macs)) == len(macs)
    for m in macs:
        first = int(m.split(":")[0], 16)
        assert re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", m) and first & 2 and not first & 1


def test_neighbour_plan_gives_each_end_the_other_ends_address_and_mac():
    e = experiment(2)
    ends = [end for link in topo.links(e.link) for end in link]
    cmds = topo.neighbour_plan(e.link)
    assert len(cmds) == 2 * len(topo.links(e.link))
    pattern = re.compile(r"ip neigh replace (\S+) lladdr (\S+) dev (\S+) nud permanent$")
    seen = set()
    for node, argv in cmds:
        m = pattern.match(" ".join(argv))
        assert m, argv
        addr, mac, dev = m.groups()
        # the entry is on this node's end of a link, for the address and MAC of the other end
        (here,) = [x for x in ends if (x.node, x.dev) == (node, dev)]
        (a, b) = [l for l in topo.links(e.link) if here in l][0]
        there = b if here == a else a
        assert (addr, mac) == (there.addr, there.mac)
        seen.add((node, dev))
    assert seen == {(x.node, x.dev) for x in ends}


def test_one_script_per_node_checks_its_macs_then_sets_its_entries():
    e = experiment(2)
    scripts = topo.neighbour_scripts(e.link)
    assert set(scripts) == set(topo.interfaces(e.link))
    for node, script in scripts.items():
        lines = script.splitlines()
        assert lines[0] == "set -e"
        checks = [l for l in lines if l.startswith("ip -br link show")]
        sets = [l for l in lines if l.startswith("ip neigh replace")]
        assert len(checks) == len(sets) == len(topo.interfaces(e.link)[node])
        assert lines.index(sets[0]) > lines.index(checks[-1])
        assert sets == [" ".join(a) for n, a in topo.neighbour_plan(e.link) if n == node]


def test_ping_path_is_covered_hop_by_hop():
    # client 1 -> its router -> the other router -> server 1, and back: every hop has an entry
    e = experiment(1)
    entries = {(node, argv[3]) for node, argv in topo.neighbour_plan(e.link)}
    c, s = topo.client(1), topo.server(1)
    assert {(c, topo.gateway(c)), (topo.R2, "10.255.0.1"), (topo.R1, topo.address(s)),
            (s, topo.gateway(s)), (topo.R1, "10.255.0.2"), (topo.R2, topo.address(c))} <= entries

"""The dumbbell's links, their fixed MACs and the permanent neighbour entries set on both ends
of each (no ARP on lossy links), as pure data: they must match the addresses and interfaces the
plan configures."""
import json
import re
import subprocess

import pytest

from cclab import topo
from cclab.profiles import KIT_DIR as KIT
from cclab.spec import Experiment, Flow, Hold


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


def test_one_script_per_node_ends_with_its_entries_in_one_batch():
    e = experiment(2)
    scripts = topo.node_scripts(e)
    assert set(scripts) == set(topo.interfaces(e.link)) == set(topo.neighbour_lines(e.link))
    for node, script in scripts.items():
        lines = script.splitlines()
        assert lines[0] == "set -e"
        tail = topo.neighbour_lines(e.link)[node]
        assert lines[-len(tail):] == tail
        assert tail[0].startswith("ip -batch -") and tail[-1] == "CCLAB_NEIGH"
        assert tail[1:-1] == [" ".join(a[1:]) for n, a in topo.neighbour_plan(e.link) if n == node]
        assert len(tail[1:-1]) == len(topo.interfaces(e.link)[node])


def link_json(e, node, wrong: str | None = None) -> str:
    """What `ip -j link show` prints in a node: its interfaces with the MACs their links gave
    them (`wrong`: this interface's MAC differs)."""
    ends = [x for l in topo.links(e.link) for x in l if x.node == node]
    return json.dumps([{"ifindex": 1, "ifname": "lo", "address": "00:00:00:00:00:00"}] + [
        {"ifindex": i + 2, "ifname": x.dev, "address": "02:cc:00:00:00:99" if x.dev == wrong
         else x.mac.upper() if i % 2 else x.mac} for i, x in enumerate(ends)])


def test_macs_are_checked_from_each_nodes_snapshot():
    e = experiment(2)
    snap = {node: {("link", ""): link_json(e, node)} for node in topo.interfaces(e.link)}
    topo.check_macs(e.link, snap)                  # as made (either case)
    assert topo.ifindex_of(snap[topo.R1], topo.CORE1) >= 2
    bad = dict(snap, **{topo.R2: {("link", ""): link_json(e, topo.R2, wrong=topo.CORE2)}})
    with pytest.raises(topo.CommandFailed, match=f"{topo.CORE2}: MAC is 02:cc:00:00:00:99, not"):
        topo.check_macs(e.link, bad)
    gone = dict(snap, **{topo.R1: {("link", ""): "[]"}})
    with pytest.raises(topo.CommandFailed, match="MAC is None"):
        topo.check_macs(e.link, gone)


def test_each_interfaces_qdiscs_come_from_the_nodes_one_query():
    answers = {("qdisc", ""): json.dumps([
        {"kind": "htb", "handle": "1:", "dev": "cc-r1-core", "root": True},
        {"kind": "netem", "handle": "10:", "dev": "cc-r1-core", "parent": "1:1"},
        {"kind": "noqueue", "handle": "0:", "dev": "cc-r1-s1", "root": True}])}
    assert [q["kind"] for q in topo.qdiscs_of(answers, "cc-r1-core")] == ["htb", "netem"]
    assert [q["kind"] for q in topo.qdiscs_of(answers, "cc-r1-s1")] == ["noqueue"]
    assert topo.qdiscs_of(answers, "cc-r1-s2") == []


def test_ping_path_is_covered_hop_by_hop():
    # client 1 -> its router -> the other router -> server 1, and back: every hop has an entry
    e = experiment(1)
    entries = {(node, argv[3]) for node, argv in topo.neighbour_plan(e.link)}
    c, s = topo.client(1), topo.server(1)
    assert {(c, topo.gateway(c)), (topo.R2, "10.255.0.1"), (topo.R1, topo.address(s)),
            (s, topo.gateway(s)), (topo.R1, "10.255.0.2"), (topo.R2, topo.address(c))} <= entries


FAKE = r'''#!/bin/sh
# stands in for {tool}: logs each command it is given, one line each (batch lines from stdin)
tool={tool}
if [ "$1" = -batch ]; then
  while IFS= read -r line; do
    case "$line" in *fail-here*) echo "Command failed -:1" >&2; exit 2 ;; esac
    echo "$tool $line" >> "$LOG"
  done
  exit 0
fi
if [ "$tool" = sysctl ]; then shift; for kv in "$@"; do echo "sysctl -qw $kv" >> "$LOG"; done; exit 0; fi
echo "$tool $*" >> "$LOG"
'''


def run_scripts(tmp_path, e, scripts):
    """Run node_scripts' shell scripts with logging stand-ins for ip, tc, sysctl, ethtool and
    unshare; returns {node: [command lines, in the order they ran]} and each script's exit status."""
    bin_ = tmp_path / "bin"
    macs = tmp_path / "macs"
    bin_.mkdir(parents=True)
    macs.mkdir()
    for tool in ("ip", "tc", "sysctl", "ethtool", "unshare"):
        (bin_ / tool).write_text(FAKE.replace("{tool}", tool))
        (bin_ / tool).chmod(0o755)
    for link in topo.links(e.link):
        for end in link:
            (macs / end.dev).write_text(f"{end.dev} UP {end.mac} <BROADCAST,UP>\n")
    ran, status = {}, {}
    for node, script in scripts.items():
        log = tmp_path / f"{node}.log"
        env = {"PATH": f"{bin_}:/usr/bin:/bin", "MACS": str(macs), "LOG": str(log)}
        p = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
        status[node] = (p.returncode, p.stderr)
        ran[node] = log.read_text().splitlines() if log.exists() else []
    return ran, status


def test_node_scripts_run_each_nodes_plan_in_order_then_its_neighbour_entries(tmp_path):
    for pairs in (1, 3):
        e = experiment(pairs)
        ran, status = run_scripts(tmp_path / str(pairs), e, topo.node_scripts(e))
        assert all(rc == 0 for rc, _ in status.values()), status
        want = {}
        for node, argv in topo.plan(e) + topo.neighbour_plan(e.link):
            if node != topo.ROOT:                       # the root namespace's own script
                want.setdefault(node, []).append(" ".join(argv))
        assert ran == want
        # batched: far fewer processes than commands
        scripts = topo.node_scripts(e)
        assert all(s.count("ip -batch") <= 3 for s in scripts.values())


def test_a_failing_command_stops_its_nodes_script(tmp_path):
    e = experiment(1)
    scripts = topo.node_scripts(e)
    node = "cc-r1"
    broken = scripts[node].replace("link set dev lo up", "link set dev fail-here up", 1)
    ran, status = run_scripts(tmp_path, e, {node: broken})
    rc, err = status[node]
    assert rc != 0 and "Command failed" in err
    assert not any(line.startswith(("sysctl", "tc ", "ethtool")) for line in ran[node])


def test_words_a_batch_line_cannot_carry_stay_plain_commands():
    assert topo._groupable(["ip", "link", "set", "dev", "x", "up"])
    assert not topo._groupable(["ip", "-j", "link"])
    assert not topo._groupable(["tc", "qdisc", "add", "dev", "x", "root", "netem", "delay", "1 ms"])
    assert not topo._groupable(["sysctl", "-w", "a=b"])


def test_namespaces_get_their_own_socket_table_and_the_machine_setting_comes_back(tmp_path):
    knob = tmp_path / "tcp_child_ehash_entries"
    knob.write_text("0\n")
    with topo.own_socket_tables(256, str(knob)) as buckets:
        assert buckets == 256
        assert knob.read_text() == "256"
    assert knob.read_text() == "0"
    try:
        with topo.own_socket_tables(256, str(knob)):
            raise RuntimeError("a node failed to start")
    except RuntimeError:
        pass
    assert knob.read_text() == "0"


def test_a_kernel_without_per_namespace_socket_tables_shares_the_machines(tmp_path):
    with topo.own_socket_tables(256, str(tmp_path / "missing")) as buckets:
        assert buckets is None


class _Node:
    """A stand-in for a Mininet node: popen runs the command here."""
    def __init__(self, name):
        self.name = name

    def popen(self, argv, **kw):
        return subprocess.Popen(argv, **kw)


def test_run_in_all_runs_side_by_side_keeps_order_and_raises_the_first_failure_after_all_end(tmp_path):
    import time
    a, b = _Node("cc-a"), _Node("cc-b")
    # side by side, shown by behaviour: the first job waits (a bounded number of polls) for a
    # file the second one makes, so run one after the other it would say "alone"
    flag = tmp_path / "second-started"
    t = time.monotonic()
    outs = topo.run_in_all([(a, ["sh", "-c", f"i=0; while [ ! -e {flag} ] && [ $i -lt 400 ]; do "
                                 f"sleep 0.05; i=$((i+1)); done; [ -e {flag} ] && echo one || echo alone"],
                             None, True),
                            (b, ["sh", "-c", f"touch {flag}; echo two"], None, True)])
    print(f"two jobs side by side: {time.monotonic() - t:.2f} s")
    assert outs == ["one\n", "two\n"]
    late = tmp_path / "late"
    with pytest.raises(topo.CommandFailed) as e:
        topo.run_in_all([(a, ["sh", "-c", "echo bad >&2; exit 3"], "first job", True),
                         (b, ["sh", "-c", "exit 4"], None, False),
                         (a, ["sh", "-c", f"sleep 0.3; touch {late}"], None, True)])
    assert str(e.value) == "cc-a: first job: bad" and late.exists()


ANSWER = r'''#!/bin/sh
# stands in for {tool}: answers a query with its own command line, or fails where told to
case "$*" in *"$FAIL"*) echo "{tool}: cannot $*" >&2; exit 1 ;; esac
echo "{tool} $*"
'''


def test_every_node_snapshots_its_interfaces_and_settings():
    e = experiment(2)
    queries = topo.snapshot_queries(e)
    assert set(queries) == set(topo.interfaces(e.link))
    queued = {(n, a[a.index("dev") + 1]) for n, a in topo.plan(e) if a[:3] == ["tc", "qdisc", "add"]}
    assert {n for n, _ in queued} == {topo.R1, topo.R2}
    for node, devs in topo.interfaces(e.link).items():
        asked = {(kind, dev) for kind, dev, _ in queries[node]}
        # classes only where the plan puts a qdisc: elsewhere the kernel's default has none
        want = {("link", ""), ("qdisc", ""), ("sysctl", "")} | {
            ("class", d) for d in devs if (node, d) in queued}
        assert want == asked, node
        (sysctl,) = [argv for kind, _, argv in queries[node] if kind == "sysctl"]
        planned = {a[2].split("=")[0] for n, a in topo.plan(e) if n == node and a[0] == "sysctl"}
        assert planned == set(sysctl[2:]), node
    # one process per query kind and node, except classes (tc prints them without their device)
    for node, q in queries.items():
        assert sum(kind in ("link", "qdisc") for kind, _, _ in q) == 2
    # a kept network's links are not asked again
    for node, q in topo.snapshot_queries(e, links=False).items():
        assert [x for x in queries[node] if x[0] != "link"] == q


def snapshot_run(tmp_path, queries, fail=""):
    bin_ = tmp_path / "bin"
    bin_.mkdir(parents=True, exist_ok=True)
    for tool in ("ip", "tc", "sysctl"):
        (bin_ / tool).write_text(ANSWER.replace("{tool}", tool))
        (bin_ / tool).chmod(0o755)
    # the setup's own output (ethtool's notes) comes first and is not part of the snapshot
    script = "set -e\necho 'Actual changes: tso off'\n" + "".join(
        line + "\n" for line in topo.snapshot_lines(queries))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_}:/usr/bin:/bin", "FAIL": fail or "\x01"})


def test_snapshot_answers_come_back_under_their_marks(tmp_path):
    queries = topo.snapshot_queries(experiment(2))[topo.R1]
    p = snapshot_run(tmp_path, queries)
    assert p.returncode == 0, p.stderr
    snap = topo.read_snapshot(p.stdout)
    assert set(snap) == {(kind, dev) for kind, dev, _ in queries}
    for kind, dev, argv in queries:
        assert snap[(kind, dev)] == " ".join(argv) + "\n"


def test_a_failed_snapshot_query_stops_the_script_except_sysctls(tmp_path):
    queries = topo.snapshot_queries(experiment(1))[topo.server(1)]
    p = snapshot_run(tmp_path, queries, fail="net.ipv4.tcp_rmem")
    assert p.returncode == 0 and "cannot" in p.stderr
    assert topo.read_snapshot(p.stdout)[("sysctl", "")] == ""
    p = snapshot_run(tmp_path / "q", queries, fail="qdisc show")
    assert p.returncode != 0 and ("sysctl", "") not in topo.read_snapshot(p.stdout)


# ---------------------------------------------------------------- a network kept between runs

def test_a_plan_splits_into_the_networks_shape_and_a_runs_settings():
    """Settings are the qdiscs and the end hosts' sysctls; everything else (addresses, links,
    routes, offloads, steering, forwarding) is the shape, which a kept network does not redo."""
    e = experiment(2)
    settings = [(n, a) for n, a in topo.plan(e) if topo.is_setting(n, a)]
    shape = [(n, a) for n, a in topo.plan(e) if not topo.is_setting(n, a)]
    assert {a[0] for _, a in settings} == {"tc", "sysctl"}
    assert {a[0] for _, a in shape} == {"ip", "sysctl", "ethtool", "sh"}
    assert all(n in (topo.R1, topo.R2) for n, a in shape if a[0] == "sysctl")
    assert any("net.ipv4.tcp_congestion_control=cubic" in a for _, a in settings)


def test_the_shape_key_ignores_settings_and_sees_the_shape():
    base = experiment(1)
    other_settings = Experiment(name="u", profile="wired",
                                override={"pairs": 1, "down": {"loss": 0, "delay": "50ms"},
                                          "up": {"rate": "5mbit"}},
                                flows=[Flow(cca="reno")], sysctl={})
    assert topo.shape_key(base) == topo.shape_key(other_settings) is not None
    assert topo.shape_key(experiment(2)) != topo.shape_key(base)            # pairs
    rto = Experiment(name="r", profile="wired", override={"pairs": 1}, rto_min=1,
                     flows=[Flow(cca="cubic")])
    assert topo.shape_key(rto) == topo.shape_key(base)         # rto_min: a route's setting
    more = Experiment(name="k", profile="wired", override={"pairs": 1},
                      sysctl={"net.ipv4.tcp_ecn": 1}, flows=[Flow(cca="cubic")])
    assert topo.shape_key(more) != topo.shape_key(base)                      # another key
    metrics = Experiment(name="m", profile="wired", override={"pairs": 1},
                         sysctl={"net.ipv4.tcp_no_metrics_save": 0}, flows=[Flow(cca="cubic")])
    assert topo.shape_key(metrics) is None                                   # never shared


def test_rto_min_is_set_and_taken_away_on_a_kept_network():
    """A run with rto_min on a kept network sets it on every host's default route; the next run
    without it puts the route back without it (`ip route change` replaces its metrics)."""
    plain = experiment(1)
    rto = Experiment(name="r", profile="wired", override={"pairs": 1}, rto_min=5,
                     flows=[Flow(cca="cubic")])
    on = topo.settings_scripts(rto, plain)
    off = topo.settings_scripts(plain, rto)
    for h in topo.hosts(plain.link):
        gw = topo.gateway(h)
        assert f"route change default via {gw} rto_min 5000ms\n" in on[h], on[h]
        assert f"route change default via {gw}\n" in off[h], off[h]
    assert "route" not in "".join(topo.settings_scripts(plain, plain).values())


def test_settings_scripts_remove_the_last_runs_qdiscs_then_apply_the_next_runs(tmp_path):
    before = experiment(1)
    after = Experiment(name="u", profile="wired", override={"pairs": 1, "down": {"loss": 0}},
                       flows=[Flow(cca="reno")])
    scripts = topo.settings_scripts(after, before)
    # the routers hold the shaped link's qdiscs; the sender's congestion control changed; the
    # receiver's settings did not, so it has no script
    assert set(scripts) == {topo.R1, topo.R2, "cc-s1"}, sorted(scripts)
    for node, text in scripts.items():
        assert not re.search(r"^(ip|ethtool|unshare) ", text, re.M), (node, text)
        assert "ip_forward" not in text
    for node, dev in topo.root_qdiscs(before):
        body = scripts[node]
        assert f"qdisc del dev {dev} root" in body
        assert body.index(f"qdisc del dev {dev} root") < body.index(f"qdisc add dev {dev} root")
    assert "loss" not in "".join(scripts.values())
    assert "net.ipv4.tcp_congestion_control=reno" in scripts["cc-s1"]
    fresh = topo.node_scripts(after)
    assert "net.ipv4.tcp_congestion_control=reno" in fresh["cc-s1"]


def test_a_kept_network_leaves_nodes_whose_settings_did_not_change_alone(monkeypatch):
    """On a kept network, a node whose settings are the same as the last run's and that holds
    no root qdisc gets no script (an idle pair's hosts); one whose settings changed, and every
    node with a root qdisc, gets one.  The untouched nodes keep their last snapshot."""
    before = Experiment(name="b", profile="wired", override={"pairs": 3},
                        flows=[Flow(cca="cubic", pair=1)])
    after = Experiment(name="a", profile="wired", override={"pairs": 3, "down": {"loss": 1}},
                       flows=[Flow(cca="reno", pair=1)])
    assert topo.shape_key(before) == topo.shape_key(after)
    scripts = topo.settings_scripts(after, before)
    qdisc_nodes = {n for n, _ in topo.root_qdiscs(after)}
    assert qdisc_nodes and qdisc_nodes <= set(scripts)
    changed = {n for n, text in scripts.items() if "tcp_congestion_control=reno" in text}
    assert changed == {"cc-s1"}, changed
    idle = {"cc-s2", "cc-c2", "cc-s3", "cc-c3"}
    assert not idle & set(scripts), sorted(scripts)
    assert topo.settings_scripts(before, before).keys() == qdisc_nodes
    # held ACKs: the receiving host's plug is a root qdisc, so its host gets a script both ways
    held = Experiment(name="h", profile="wired", override={"pairs": 3},
                      flows=[Flow(cca="cubic", pair=1)], hold=[Hold(start=1.0, duration=1.0)])
    hold_nodes = {n for n, _ in topo.hold_devs(held)}
    assert hold_nodes and hold_nodes <= set(topo.settings_scripts(held, before))
    assert hold_nodes <= set(topo.settings_scripts(before, held))

    # Network._configure: the nodes that ran a script get a new snapshot, the others keep theirs
    net = topo.Network(before)
    net.net = {n: n for n in topo.interfaces(before.link)}
    net.snapshot = {n: {("link", ""): f"links of {n}", ("sysctl", ""): f"old {n}"}
                    for n in topo.interfaces(before.link)}
    ran = []

    def fake_run_in_all(jobs, timeout=30):
        ran.extend(node for node, *_ in jobs)
        return [f"{topo.SNAPSHOT_MARK} sysctl \nnew {node}\n" for node, *_ in jobs]

    monkeypatch.setattr(topo, "run_in_all", fake_run_in_all)
    net.reconfigure(after)
    assert set(ran) == set(scripts)
    for n in topo.interfaces(after.link):
        assert net.snapshot[n][("link", "")] == f"links of {n}"
        assert net.snapshot[n][("sysctl", "")] == (f"new {n}\n" if n in scripts else f"old {n}"), n


def test_links_are_made_set_up_and_moved_from_the_root_namespace_in_one_script():
    """Every veth pair is made in the machine's namespace with its MACs, its offloads turned off
    and its receive steering on there, and only then moved into its node (by the pid of the
    node's shell); the nodes' own scripts neither make links nor touch offloads or sysfs."""
    e = experiment(2)
    pids = {n: 100 + i for i, n in enumerate(topo.interfaces(e.link))}
    text = topo.root_script(e.link, pids)
    ends = [x for link in topo.links(e.link) for x in link]
    for a, b in topo.links(e.link):
        assert f"link add name {a.dev} address {a.mac} type veth peer name {b.dev} address {b.mac}" in text
    for x in ends:
        assert f"ethtool -K {x.dev} tso off gso off gro off" in text
        assert f"/sys/class/net/{x.dev}/queues/rx-0/rps_cpus" in text
        moved = f"link set dev {x.dev} netns {pids[x.node]}"
        assert moved in text
        assert text.index(moved) > text.index("rps_cpus") > text.index(f"ethtool -K {x.dev} ")
    assert text.count("ip -batch") == 2                 # made in one process, moved in another
    for script in topo.node_scripts(e).values():
        assert "ethtool" not in script and "rps_cpus" not in script and "veth" not in script
    kept = Experiment(name="o", profile="wired", override={"pairs": 1, "offloads": True},
                      flows=[Flow(cca="cubic")])
    assert "ethtool" not in topo.root_script(kept.link, pids)


# lab 2's full mode runs its one- and two-flow files on 2 pairs and the 16-flow files on 16:
# 32 idle hosts would add their settings to every short run there.
ONE_NETWORK_EXCEPT = {("lab2", "full")}


@pytest.mark.parametrize("lab", ["lab1", "lab2", "lab3", "lab4"])
@pytest.mark.parametrize("mode", ["quick", "full"])
def test_a_labs_experiments_share_one_network(lab, mode):
    """Every experiment file of a lab's mode has one shape (topo.shape_key), so a lab's runs
    build one dumbbell and reconfigure it: the files give the same number of pairs."""
    from cclab import spec
    files = sorted((KIT / "labs" / lab / mode).glob("*.toml"))
    keys = {f.name: topo.shape_key(spec.load(f)) for f in files}
    assert files and None not in keys.values(), keys
    if (lab, mode) in ONE_NETWORK_EXCEPT:
        return
    shapes = {}
    for name, k in keys.items():
        shapes.setdefault(k, []).append(name)
    assert len(shapes) == 1, f"{lab} {mode}: {len(shapes)} network shapes: {list(shapes.values())}"

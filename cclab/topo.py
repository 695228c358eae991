"""The dumbbell: names, addresses, the configuration plan, and building it with Mininet.

    cc-s1 ─┐                                     ┌─ cc-c1
    cc-s2 ─┤ cc-r1 ══ cc-r1-core ─ cc-r2-core ══ cc-r2 ├─ cc-c2
     ...   ┘         (down: shaped on cc-r1-core)      └─ ...
                     (up:   shaped on cc-r2-core)

Servers cc-s<i> sit on the left (10.0.<i>.2), clients cc-c<i> on the right (10.1.<i>.2).
Routers are ordinary Mininet hosts with IP forwarding on; there are no switches, no Open
vSwitch and no controller.  Every name starts with "cc-" so `cclab clean` can find leftovers.

`plan()` is pure: it lists every command (node, argv) that configures links, addresses,
routes, sysctls, offloads and qdiscs; node "root" is the machine's own namespace, where every
link is made, its offloads and receive steering set, and its ends moved into their nodes
(`link_plan()`).  `Network` starts the nodes, runs the root namespace's script, then each
node's (its plan, then a permanent neighbour entry on both ends of every link for the other,
`neighbour_plan()`: netem would drop ARP like any other packet).  Making nodes and links is
`Nodes`, which lab 5's paths (cclab.paths) are built with too.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from . import dynamics, tc
from .profiles import MTU, Profile, Reconfigure

PREFIX = "cc-"
R1, R2 = "cc-r1", "cc-r2"

# Each node gets a TCP socket table of its own with this many buckets.  The socket sampler's
# sock_diag dump walks every bucket of its namespace's table, 20 times a second per sender; a
# namespace otherwise shares the machine's table, sized from its memory (65,536 buckets in the
# 6 GiB lab VM).  Walking that cost the software-emulated VM more than half a CPU in a lab 1 run
# (four senders): the emulated link then lost its CPU headroom.  A node holds a few sockets.
# Linux reads net.ipv4.tcp_child_ehash_entries (6.1 and later) when a namespace is created.
CHILD_EHASH = "/proc/sys/net/ipv4/tcp_child_ehash_entries"
NODE_SOCKET_BUCKETS = 256
CORE1, CORE2 = "cc-r1-core", "cc-r2-core"
CORE1_ADDR, CORE2_ADDR = "10.255.0.1", "10.255.0.2"      # the routers' /30 core link
MiB = 1 << 20


def server(i: int) -> str:
    return f"cc-s{i}"


def client(i: int) -> str:
    return f"cc-c{i}"


def host_dev(host: str) -> str:
    return f"{host}-eth0"


def router_dev(host: str) -> str:
    """The router interface facing `host` (cc-r1-s1, cc-r2-c1)."""
    return f"{R1 if host.startswith('cc-s') else R2}-{host[3:]}"


def address(host: str) -> str:
    i = int(host[4:])
    return f"10.0.{i}.2" if host.startswith("cc-s") else f"10.1.{i}.2"


def gateway(host: str) -> str:
    return address(host)[:-1] + "1"


def hosts(profile: Profile) -> list[str]:
    n = profile.pairs
    return [server(i) for i in range(1, n + 1)] + [client(i) for i in range(1, n + 1)]


def endpoints(direction: str, pair: int) -> tuple[str, str]:
    """(sender, receiver) of a flow."""
    return (server(pair), client(pair)) if direction == "down" else (client(pair), server(pair))


@dataclass(frozen=True)
class Shaped:
    """One place where a profile direction is applied."""
    direction: str          # down | up
    node: str
    dev: str


def shaped(profile: Profile) -> list[Shaped]:
    out = []
    for name, core_node, core_dev, side in (("down", R1, CORE1, server), ("up", R2, CORE2, client)):
        d = getattr(profile, name)
        if d is None:
            continue
        if d.at == "router":
            out.append(Shaped(name, core_node, core_dev))
        else:
            out += [Shaped(name, side(i), host_dev(side(i))) for i in range(1, profile.pairs + 1)]
    return out


def buffers(profile: Profile) -> dict[str, int]:
    return {name: d.buffer_packets(profile.base_rtt) for name, d in profile.directions().items()}


def socket_buffer_max(profile: Profile) -> int:
    """tcp_rmem/tcp_wmem maximum: four times the most a flow can have in flight, >= 16 MiB."""
    dirs = profile.directions()
    rates = [d.rate for d in dirs.values()]
    rtt = profile.base_rtt
    dyn = profile.dynamics
    if isinstance(dyn, Reconfigure):
        rates += [r[1] for r in (dyn.down_rate, dyn.up_rate) if r]
        if dyn.delay:
            rtt = dyn.delay[1] * len(dirs)
    buf = max(buffers(profile).values(), default=0) * MTU
    most = max(rates) / 8 * rtt + buf
    return int(min(256 * MiB, max(16 * MiB, math.ceil(4 * most / MiB) * MiB)))


def host_sysctls(profile: Profile, cca: str, extra: dict) -> dict[str, str]:
    """Per-namespace sysctls of an end host."""
    top = socket_buffer_max(profile)
    values = {
        "net.ipv4.tcp_congestion_control": cca,
        "net.ipv4.tcp_rmem": f"4096 131072 {top}",
        "net.ipv4.tcp_wmem": f"4096 16384 {top}",
        "net.ipv4.tcp_no_metrics_save": "1",
    }
    for table in (profile.sysctl, extra):
        values.update({k: str(v) for k, v in table.items()})
    return values


def default_ccas(experiment) -> dict[str, str]:
    """The congestion control each host defaults to: that of the first flow it sends."""
    out = {}
    for f in experiment.flows:
        if f.protocol == "tcp":
            out.setdefault(endpoints(f.direction, f.pair)[0], f.cca)
    return out


def interfaces(profile: Profile) -> dict[str, list[str]]:
    """Every interface of every node."""
    out = {R1: [CORE1], R2: [CORE2]}
    for h in hosts(profile):
        out[h] = [host_dev(h)]
        out[R1 if h.startswith("cc-s") else R2].append(router_dev(h))
    return out


def plan(experiment) -> list[tuple[str, list[str]]]:
    """Every command, in order, that configures the network for an experiment."""
    p: Profile = experiment.link
    cmds: list[tuple[str, list[str]]] = [(ROOT, argv) for argv in link_plan(p)]
    ccas = default_ccas(experiment)
    # addresses and routes
    cmds += [(R1, ["ip", "addr", "add", f"{CORE1_ADDR}/30", "dev", CORE1]),
             (R2, ["ip", "addr", "add", f"{CORE2_ADDR}/30", "dev", CORE2])]
    for h in hosts(p):
        r = R1 if h.startswith("cc-s") else R2
        cmds.append((h, ["ip", "addr", "add", address(h) + "/24", "dev", host_dev(h)]))
        cmds.append((r, ["ip", "addr", "add", gateway(h) + "/24", "dev", router_dev(h)]))
    for node, devs in interfaces(p).items():
        cmds += [(node, ["ip", "link", "set", "dev", d, "up"]) for d in devs]
        cmds.append((node, ["ip", "link", "set", "dev", "lo", "up"]))
    for h in hosts(p):
        cmds.append((h, ["ip", "route", "add", "default", "via", gateway(h)]))
        if getattr(experiment, "rto_min", None) is not None:
            cmds.append((h, rto_route(experiment, h)))
    cmds += [(R1, ["ip", "route", "add", "10.1.0.0/16", "via", CORE2_ADDR]),
             (R2, ["ip", "route", "add", "10.0.0.0/16", "via", CORE1_ADDR])]
    # sysctls
    for r in (R1, R2):
        cmds.append((r, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]))
    for h in hosts(p):
        for k, v in host_sysctls(p, ccas.get(h, "cubic"), experiment.sysctl).items():
            cmds.append((h, ["sysctl", "-qw", f"{k}={v}"]))
    # the bottleneck
    buf = buffers(p)
    dynamic = p.dynamics is not None
    for s in shaped(p):
        d = getattr(p, s.direction)
        start = dynamics.initial(p, s.direction)
        cmds += [(s.node, c) for c in tc.setup(d, s.dev, buf[s.direction], dynamic, start)]
    # holds: a plug on each sending host, created blocked (sch_plug's initial state), opened
    for node, dev in hold_devs(experiment):
        cmds.append((node, ["tc", "qdisc", "add", "dev", dev, "root", "handle", PLUG_HANDLE,
                            "plug", "limit", str(PLUG_LIMIT)]))
        cmds.append((node, plug(dev, "release_indefinite")))
    return cmds


PLUG_HANDLE = "2:"
PLUG_LIMIT = 64 << 20          # bytes a plug may hold (a 60 s hold of ACKs needs a few MB)


def hold_devs(experiment, direction: str | None = None) -> list[tuple[str, str]]:
    """(node, interface) of every host a [[hold]] plugs: the senders of its direction (the
    clients for "up", the servers for "down"); only those of `direction` when given."""
    dirs = {h.direction for h in getattr(experiment, "hold", [])}
    if direction is not None:
        dirs &= {direction}
    p = experiment.link
    side = [client(i) for i in range(1, p.pairs + 1)] if "up" in dirs else []
    side += [server(i) for i in range(1, p.pairs + 1)] if "down" in dirs else []
    return [(h, host_dev(h)) for h in side]


def plug(dev: str, action: str) -> list[str]:
    """A hold's step: `block` keeps what is sent from now on, `release_indefinite` lets
    everything through (what was kept first)."""
    return ["tc", "qdisc", "change", "dev", dev, "root", "handle", PLUG_HANDLE, "plug", action]


def steering(devs: list[str]) -> list[str]:
    """The command that turns on receive packet steering over every CPU on these interfaces.
    A veth hands each packet to the backlog of the CPU that sent it; a TCP flow sends from two
    places (the application's writes, and the softirq that an ACK wakes), so on a guest with
    two or more CPUs its packets can reach the next hop out of order, and the sender may take
    that for loss: a spurious recovery, a cwnd cut, a slow start ended.  With RPS each packet
    goes to the backlog of a CPU chosen by its flow's hash: one per flow, in order, the flows
    still spread over the CPUs.  It runs in the machine's own namespace, before the interfaces
    move into their nodes (link_plan): the setting moves with them."""
    files = " ".join(f"/sys/class/net/{d}/queues/rx-0/rps_cpus" for d in devs)
    every = f"{(1 << (os.cpu_count() or 1)) - 1:x}"      # what nproc --all counts
    return ["sh", "-c", f"for f in {files}; do echo {every} > $f; done"]


# The machine's own namespace, where every link is made and set up before its two ends move
# into their nodes: one script for the whole dumbbell instead of a few processes per interface
# in each node (each process start costs ~0.1 s under software emulation; a node's own sysfs
# needed a mount namespace and three more processes).  Interface settings that move with the
# interface: its MAC, its offloads, its receive steering.
ROOT = "root"


def veth_plan(pairs: list[tuple["End", "End"]], offloads: bool = False) -> list[list[str]]:
    """The root namespace's commands for the links `pairs`: every link made (a veth pair, each
    end with its MAC), the offloads off (netem must see real packets, not 64 KB GSO
    super-packets) unless `offloads`, receive steering on (steering()), then each end moved
    into its node (`netns NODE`: the node's namespace, by the pid of its shell when the script
    runs)."""
    ends = [e for link in pairs for e in link]
    cmds = [["ip", "link", "add", "name", a.dev, "address", a.mac, "type", "veth", "peer",
             "name", b.dev, "address", b.mac] for a, b in pairs]
    if not offloads:
        cmds += [["ethtool", "-K", e.dev, "tso", "off", "gso", "off", "gro", "off"] for e in ends]
    cmds.append(steering([e.dev for e in ends]))
    cmds += [["ip", "link", "set", "dev", e.dev, "netns", e.node] for e in ends]
    return cmds


def link_plan(profile: Profile) -> list[list[str]]:
    """The dumbbell's links (veth_plan), with the offloads the profile asks for."""
    return veth_plan(links(profile), profile.offloads)


def veth_script(cmds: list[list[str]], pids: dict[str, int]) -> str:
    """A veth_plan() as one shell script, each node named by its shell's pid."""
    return script([argv[:-1] + [str(pids[argv[-1]])] if argv[-2:-1] == ["netns"] else argv
                   for argv in cmds])


def root_script(profile: Profile, pids: dict[str, int]) -> str:
    """link_plan() as one shell script, each node named by its shell's pid."""
    return veth_script(link_plan(profile), pids)


@dataclass(frozen=True)
class End:
    """One end of a point-to-point link: the node, its interface and that interface's address."""
    node: str
    dev: str
    addr: str

    @property
    def mac(self) -> str:
        """The interface's MAC, fixed when the link is made: locally administered, unicast,
        02:cc then the four bytes of its IPv4 address (unique where the addresses are: the
        dumbbell, lab 5's two paths)."""
        return "02:cc:" + ":".join(f"{int(b):02x}" for b in self.addr.split("."))


def links(profile: Profile) -> list[tuple[End, End]]:
    """Every link's two ends: the routers' core link, then each host with its router."""
    out = [(End(R1, CORE1, CORE1_ADDR), End(R2, CORE2, CORE2_ADDR))]
    for h in hosts(profile):
        r = R1 if h.startswith("cc-s") else R2
        out.append((End(h, host_dev(h), address(h)), End(r, router_dev(h), gateway(h))))
    return out


def neighbour_entries(pairs: list[tuple[End, End]]) -> list[tuple[str, list[str]]]:
    """(node, argv): permanent neighbour entries on both ends of each link of `pairs`, for the
    other end's address and MAC (End.mac: each link made with those MACs).  netem drops ARP like
    any packet: without them a lost ARP request holds a flow's (or the idle pings') first
    packets for a second or more on a lossy link, and a router whose requests all fall to the
    loss answers "No route to host"."""
    cmds = []
    for a, b in pairs:
        for here, there in ((a, b), (b, a)):
            cmds.append((here.node, ["ip", "neigh", "replace", there.addr, "lladdr", there.mac,
                                     "dev", here.dev, "nud", "permanent"]))
    return cmds


def neighbour_plan(profile: Profile) -> list[tuple[str, list[str]]]:
    """The dumbbell's permanent neighbour entries: both ends of every link (neighbour_entries)."""
    return neighbour_entries(links(profile))


def neighbour_lines(profile: Profile) -> dict[str, list[str]]:
    """Each node's shell lines (node_scripts() runs them after the node's plan): its neighbour
    entries, in one `ip -batch` (one process, however many links the node has).  That every
    interface has the MAC its link was made with is checked from the node's snapshot
    (check_macs): the entries of the far ends were written with those MACs."""
    out: dict[str, list[str]] = {}
    for node, argv in neighbour_plan(profile):
        out.setdefault(node, []).append(" ".join(argv[1:]))
    return {node: ["ip -batch - <<'CCLAB_NEIGH'"] + lines + ["CCLAB_NEIGH"]
            for node, lines in out.items()}


def check_macs(profile: Profile, snapshot: dict) -> None:
    """Raise CommandFailed unless every interface of every node has the MAC its link was made
    with (End.mac), as the node's `ip -j link show` in its snapshot reports it."""
    seen = {node: links_of(answers) for node, answers in snapshot.items()}
    for link in links(profile):
        for e in link:
            mac = (seen.get(e.node, {}).get(e.dev) or {}).get("address")
            mac = mac.lower() if mac else None
            if mac != e.mac:
                raise CommandFailed(f"{e.node}: {e.dev}: MAC is {mac}, not {e.mac}")


# What a run records of each node once it is configured (the manifest's qdiscs, classes and
# sysctls, and the shaped interfaces' indexes).  The queries end each node's setup script, so
# they cost no process start of their own from Python (about 1.5 s a run under software
# emulation when they ran as a round of their own); each answer follows a marked line.
SNAPSHOT_MARK = "@@cclab-snapshot"


def snapshot_queries(experiment, links: bool = True) -> dict[str, list[tuple[str, str, list[str]]]]:
    """Per node, the (kind, dev, argv) queries of its snapshot: `link` (unless links is False:
    a kept network's links are those its first snapshot saw) and `qdisc` (dev "": every
    interface of the node, ip -j and tc -j, one process each; split per interface by
    qdiscs_of), `class` (tc's text, which has no interface names) for each interface the plan
    gives a qdisc (the others keep the kernel's default, which has no classes), and `sysctl`
    (dev "") for the settings the plan makes there."""
    p = experiment.link
    queued = {(node, argv[argv.index("dev") + 1]) for node, argv in plan(experiment)
              if argv[:3] == ["tc", "qdisc", "add"]}
    out: dict[str, list[tuple[str, str, list[str]]]] = {}
    for node, devs in interfaces(p).items():
        q = out.setdefault(node, [])
        if links:
            q.append(("link", "", ["ip", "-j", "link", "show"]))
        q.append(("qdisc", "", ["tc", "-j", "qdisc", "show"]))
        for d in devs:
            if (node, d) in queued:
                q.append(("class", d, ["tc", "class", "show", "dev", d]))
        keys = ["net.ipv4.ip_forward"] if node in (R1, R2) else list(
            host_sysctls(p, "cubic", experiment.sysctl))
        q.append(("sysctl", "", ["sysctl", "-e"] + keys))
    return out


def snapshot_lines(queries: list[tuple[str, str, list[str]]]) -> list[str]:
    """A node's snapshot queries as shell lines, each answer after its mark.  A query that fails
    stops the script like any setup command, except sysctl's (a key this kernel lacks).  (The
    shell's own `read` cannot stand in for sysctl: it reads a byte at a time, and the kernel's
    handler of a vector such as tcp_rmem answers a read past offset 0 with nothing.)"""
    lines = []
    for kind, dev, argv in queries:
        lines.append(f"echo '{SNAPSHOT_MARK} {kind} {dev}'")
        lines.append(shlex.join(argv) + (" || true" if kind == "sysctl" else ""))
    return lines


def qdiscs_of(answers: dict, dev: str) -> list[dict]:
    """One interface's qdiscs from a node's snapshot (its `tc -j qdisc show` of every interface)."""
    return [q for q in json.loads(answers.get(("qdisc", ""), "").strip() or "[]")
            if q.get("dev") == dev]


def links_of(answers: dict) -> dict[str, dict]:
    """A node's interfaces by name, as its snapshot's `ip -j link show` reports them."""
    return {i.get("ifname"): i for i in json.loads(answers.get(("link", ""), "").strip() or "[]")}


def ifindex_of(answers: dict, dev: str) -> int:
    """An interface's index from a node's snapshot (its `ip -j link show`)."""
    return links_of(answers)[dev]["ifindex"]


def read_snapshot(output: str) -> dict[tuple[str, str], str]:
    """A node script's output -> {(kind, dev): what that query printed}.  What comes before the
    first mark is the setup's own output (ethtool's notes), not the snapshot's."""
    sections: dict[tuple[str, str], str] = {}
    key = None
    for line in output.splitlines(keepends=True):
        if line.startswith(SNAPSHOT_MARK + " "):
            kind, _, dev = line[len(SNAPSHOT_MARK) + 1:].rstrip("\n").partition(" ")
            key = (kind, dev)
            sections[key] = ""
        elif key is not None:
            sections[key] += line
    return sections


# Tools whose commands a node's script feeds through one process (`ip -batch -`, `tc -batch -`):
# under software emulation every process start costs ~0.1 s, and a dumbbell's plan has dozens
# of commands per router.
BATCHED = ("ip", "tc")
_PLAIN = re.compile(r"^[A-Za-z0-9_.:/@+%=,-]+$")     # a word a batch line can carry as it is


def node_scripts(experiment) -> dict[str, str]:
    """plan() and the neighbour entries as one shell script per node, in each node's plan order
    (no command of one node depends on another node's).  Consecutive `ip` commands become one
    `ip -batch`, consecutive `tc` commands one `tc -batch`, consecutive sysctls one `sysctl -qw`
    with several settings; the first failure stops the script with the tool's error (a batch's
    names the line it failed on)."""
    per_node: dict[str, list[list[str]]] = {}
    for node, argv in plan(experiment):
        if node != ROOT:
            per_node.setdefault(node, []).append(argv)
    checks = neighbour_lines(experiment.link)
    return {node: script(per_node.get(node, []), checks.get(node, []))
            for node in {**per_node, **checks}}


def script(cmds: list[list[str]], after: list[str] = ()) -> str:
    """One node's commands as a shell script (see node_scripts), then the lines `after`."""
    lines, i = ["set -e"], 0
    while i < len(cmds):
        tool = cmds[i][0]
        j = i
        while j < len(cmds) and cmds[j][0] == tool and _groupable(cmds[j]):
            j += 1
        if j == i:                                  # not groupable: as it is
            lines.append(shlex.join(cmds[i]))
            i += 1
        elif tool in BATCHED:
            lines += [f"{tool} -batch - <<'CCLAB_PLAN'"] + [" ".join(c[1:]) for c in cmds[i:j]] + ["CCLAB_PLAN"]
            i = j
        else:                                       # sysctl -qw k=v ...
            lines.append(shlex.join(["sysctl", "-qw"] + [c[2] for c in cmds[i:j]]))
            i = j
    return "\n".join(lines + list(after)) + "\n"


# ---------------------------------------------------------------- one network, several runs
#
# A plan holds two kinds of command.  The network's shape: nodes, links, addresses, routes,
# offloads, receive steering, forwarding and the neighbour entries.  And a run's settings: the
# qdiscs (the link's rate, delay, loss and buffer; a hold's plug), the end hosts' sysctls
# (congestion control, socket buffers) and their default routes' rto_min.  The shape is the
# same for every repetition of an experiment, and for every experiment with the same number of
# pairs and the same sysctl keys, whatever its link's rate, delay or loss: the labs give all
# their experiments one number of pairs (idle pairs cost a run nothing but their settings), so
# a lab builds its network once.
# Runs inside runner.keep_network() build it once: each later run of the same shape removes
# the qdiscs the run before it installed and applies its own settings, so it starts with new
# qdiscs (their counters at zero) and its own sysctls, as on a network of its own,
# without the ~4 s a dumbbell costs to build under software emulation.
#
# What a kept network carries from one run to the next, and why that does not matter:
# - interface counters: nothing the kit measures reads them (qdisc counters are per qdisc);
# - sockets of finished flows in TIME_WAIT: other ports than the next run's flows, and the
#   samplers, the tracer and the tables take flows by port;
# - the TCP metrics cache: empty, as long as the hosts keep net.ipv4.tcp_no_metrics_save=1
#   (the default; an experiment that sets it otherwise gets a network of its own).

def rto_route(experiment, host: str) -> list[str]:
    """The host's default route with the experiment's rto_min (a run's setting: `ip route
    change` replaces the route's metrics, so the same command without rto_min takes it away)."""
    rto = getattr(experiment, "rto_min", None)
    return (["ip", "route", "change", "default", "via", gateway(host)]
            + ([] if rto is None else ["rto_min", f"{max(1, round(rto * 1000))}ms"]))


def is_setting(node: str, argv: list[str]) -> bool:
    """A plan command that is a run's setting, not the network's shape."""
    return (argv[0] == "tc" or (argv[0] == "sysctl" and node not in (R1, R2))
            or argv[:3] == ["ip", "route", "change"])


def root_qdiscs(experiment) -> list[tuple[str, str]]:
    """(node, interface) of every root qdisc the experiment's plan installs."""
    return [(s.node, s.dev) for s in shaped(experiment.link)] + hold_devs(experiment)


def shape_key(experiment) -> str | None:
    """Equal for two experiments whose networks differ only in their settings; None for one
    that needs a network of its own.  Each host's sysctl keys are part of the shape: a kept
    network sets a key again for each run, but does not know what a key the first run set had
    before it."""
    ccas = default_ccas(experiment)
    p = experiment.link
    if any(host_sysctls(p, ccas.get(h, "cubic"), experiment.sysctl).get(
            "net.ipv4.tcp_no_metrics_save") != "1" for h in hosts(p)):
        return None
    lines = [f"{node} {shlex.join(argv)}" for node, argv in plan(experiment)
             if not is_setting(node, argv)]
    lines += [f"{node} {shlex.join(argv)}" for node, argv in neighbour_plan(p)]
    lines += [f"{h} sysctl keys " + " ".join(sorted(host_sysctls(p, "cubic", experiment.sysctl)))
              for h in hosts(p)]
    return "\n".join(lines)


def run_settings(experiment) -> dict[str, list[list[str]]]:
    """Each node's plan commands that are a run's settings (is_setting), in plan order."""
    cmds: dict[str, list[list[str]]] = {node: [] for node in interfaces(experiment.link)}
    for node, argv in plan(experiment):
        if is_setting(node, argv):
            cmds[node].append(argv)
    return cmds


def settings_scripts(experiment, before) -> dict[str, str]:
    """Each node's script that turns the network of the run of `before` into one for
    `experiment` (same shape_key): the root qdiscs `before` installed removed, then
    `experiment`'s qdiscs and sysctls; each script ends with the node's snapshot.
    A node whose settings are the same commands for both runs, and that has a root qdisc in
    neither, gets no script: it is already as the run wants it, and its last snapshot still
    holds (an idle pair's hosts, which cost a shell each under software emulation).  A node with
    a root qdisc always gets one: each run's qdiscs are made anew, their counters at zero."""
    now, was = run_settings(experiment), run_settings(before)
    old_qdiscs = root_qdiscs(before)
    queued = {node for node, _ in old_qdiscs + root_qdiscs(experiment)}
    # the hosts whose default route loses the last run's rto_min
    rto_dropped = (getattr(before, "rto_min", None) is not None
                   and getattr(experiment, "rto_min", None) is None)
    unset_rto = set(hosts(experiment.link)) if rto_dropped else set()
    cmds: dict[str, list[list[str]]] = {}
    for node, settings in now.items():
        if node not in queued and settings == was.get(node):
            continue
        cmds[node] = [tc.teardown(dev) for n, dev in old_qdiscs if n == node]
        if node in unset_rto:
            cmds[node].append(rto_route(experiment, node))
        cmds[node] += settings
    return {node: script(c) for node, c in cmds.items()}


def _groupable(argv: list[str]) -> bool:
    if argv[0] in BATCHED:
        return len(argv) > 1 and not argv[1].startswith("-") and all(_PLAIN.match(a) for a in argv[1:])
    return argv[0] == "sysctl" and len(argv) == 3 and argv[1] == "-qw"


# ---------------------------------------------------------------- building it with Mininet

class CommandFailed(RuntimeError):
    pass


def run_in(node, argv: list[str], check: bool = True, timeout: float = 30, what: str | None = None) -> str:
    """Run a command in a Mininet node's namespace; raise with its error output on failure
    (naming the command, or `what` it was doing)."""
    return run_in_all([(node, argv, what, check)], timeout)[0]


def run_in_all(jobs, timeout: float = 30) -> list[str]:
    """Several commands at once, each in its node's namespace: `jobs` lists (node, argv, what,
    check) as run_in() takes them.  Under software emulation a command costs its process start
    (~0.1 s) more than its work, and the guest has more than one CPU: started together they take
    about as long as the slowest.  Returns their outputs in order; every command has ended
    before the first failure (in `jobs` order) is raised."""
    started = [(node, what or " ".join(argv), check,
                node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
               for node, argv, what, check in jobs]
    outs, failure = [], None
    deadline = time.monotonic() + timeout
    for node, what, check, p in started:
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            failure = failure or CommandFailed(f"{node.name}: {what}: timed out")
            outs.append(out)
            continue
        if check and p.returncode != 0 and failure is None:
            err = " / ".join(line.strip() for line in err.strip().splitlines() if line.strip())
            failure = CommandFailed(f"{node.name}: {what}: {err or 'exit %d' % p.returncode}")
        outs.append(out)
    if failure is not None:
        raise failure
    return outs


def make_topo(pairs: list[tuple["End", "End"]]):
    """Mininet's Topo of the nodes and links `pairs` (the dumbbell's links(), or lab 5's
    paths.links()): a host per node, each link with its two ends' names and MACs (End.mac: the
    neighbour entries need them)."""
    from mininet.topo import Topo

    class Planned(Topo):
        def build(self):
            for a, b in pairs:
                for e in (a, b):
                    if e.node not in self.nodes():
                        self.addHost(e.node, ip=None)
                self.addLink(a.node, b.node, intfName1=a.dev, intfName2=b.dev,
                             addr1=a.mac, addr2=b.mac)

    return Planned()


@contextmanager
def own_socket_tables(buckets: int, path: str = CHILD_EHASH):
    """Namespaces created inside get their own TCP socket table (yields its size), or share the
    machine's on a kernel without per-namespace tables (yields None).  The machine's setting
    is put back on the way out: it applies to every namespace created while it is set."""
    try:
        with open(path) as f:
            before = f.read().strip()
    except OSError:
        yield None
        return
    with open(path, "w") as f:
        f.write(str(buckets))
    try:
        yield buckets
    finally:
        with open(path, "w") as f:
            f.write(before)


class Nodes:
    """The kit's nodes and links in Mininet: a shell per node, each in a network namespace of
    its own (with a TCP socket table of its own), and the links `pairs` between them, made in
    the machine's namespace and moved into their nodes in one script.  `on_node(name, pid)`
    reports every namespace as it comes up, so a caller's state file lists it before anything
    else can go wrong; every shell runs as "bash ... mininet:cc-<name>", so `cclab clean`
    finds what a killed process left.  The dumbbell (Network) and lab 5's paths
    (paths.PathsNetwork) are built on it."""

    def __init__(self, pairs: list[tuple["End", "End"]], on_node=lambda name, pid: None):
        self.pairs = pairs
        self.on_node = on_node
        self.net = None
        self.socket_buckets = None     # each node's TCP socket table, or None: the machine's

    def start_nodes(self, root_text) -> None:
        """Start every node, then run `root_text(pids)`: the root namespace's script that makes
        the links and moves their ends into the nodes (veth_script)."""
        from mininet.link import Intf, Link
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Host

        class PlannedIntf(Intf):
            """An interface Mininet leaves as the link made it: the link gave it its MAC, and
            the node's script addresses it, brings it up and checks the MAC.  Mininet's own
            configuration runs ifconfig four times per interface through the node's shell:
            about a second per dumbbell in the software-emulated VM."""

            def config(self, **params):
                return {}

        class PlannedLink(Link):
            """A link the root namespace's script has made and moved into its nodes already:
            Mininet only records its two interfaces."""

            @classmethod
            def makeIntfPair(cls, *args, **kwargs):
                return None

        topo = make_topo(self.pairs)

        class PlannedNet(Mininet):
            """Mininet's network whose build() is the kit's plan: the root namespace's script
            makes every link and moves its ends into their nodes, and Mininet records them.
            Mininet's own build() would configure each host's interfaces through its shell;
            the nodes' scripts do that."""

            def build(net):
                pids = {h.name: h.pid for h in net.hosts}
                r = subprocess.run(["sh", "-c", root_text(pids)],
                                   capture_output=True, text=True, timeout=60)
                if r.returncode != 0:
                    err = " / ".join(ln.strip() for ln in r.stderr.splitlines() if ln.strip())
                    raise CommandFailed(f"{ROOT}: making the links: "
                                        f"{err or 'exit %d' % r.returncode}")
                for _a, _b, info in topo.links(sort=True, withInfo=True):
                    net.addLink(**info)
                net.built = True

        setLogLevel("error")
        self.net = PlannedNet(topo=None, controller=None, link=PlannedLink, host=Host,
                              intf=PlannedIntf, build=False, autoSetMacs=False)
        with own_socket_tables(NODE_SOCKET_BUCKETS) as self.socket_buckets:
            self._add_nodes(topo)
        self.net.build()

    def shells(self) -> set[int]:
        """The pids of the nodes' shells (each holds its node's namespace)."""
        return {h.pid for h in self.net.hosts} if self.net is not None else set()

    def _add_nodes(self, topo) -> None:
        """Every node's shell started side by side.  A Mininet host waits for its shell's first
        prompt (about a quarter of a second each under software emulation), so nodes made one
        after the other pay that once per node.  Each node is reported (on_node) the moment it
        exists, and when one fails the others are still made and reported before its error is
        raised, so the run's cleanup finds every namespace."""
        reported = threading.Lock()

        def add(name):
            node = self.net.addHost(name, **topo.nodeInfo(name))
            with reported:
                self.on_node(name, node.pid)

        names = topo.nodes()
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            done = [pool.submit(add, name) for name in names]
        failed = [f.exception() for f in done if f.exception() is not None]
        if failed:
            raise failed[0]

    def node(self, name: str):
        return self.net[name]

    def stop(self) -> None:
        """End every node's shell.  A node's namespace goes with its last process, and the
        kernel removes the namespace's interfaces with it (both ends of every link live in
        nodes); deleting the links first cost the software-emulated VM about 0.1 s a link.
        A link still in the machine's own namespace (the root script failed or was stopped
        before it moved it) is deleted here: one end takes its pair with it."""
        if self.net is not None:
            net, self.net = self.net, None
            for h in net.hosts:
                try:
                    h.terminate()
                except Exception:
                    pass
            for a, b in self.pairs:
                for end in (a, b):
                    if os.path.exists(f"/sys/class/net/{end.dev}"):
                        subprocess.run(["ip", "link", "del", end.dev], capture_output=True)


class Network(Nodes):
    """The Mininet network of one run: the dumbbell of its experiment's profile."""

    def __init__(self, experiment, on_node=lambda name, pid: None):
        super().__init__(links(experiment.link), on_node)
        self.experiment = experiment
        self.snapshot = {}             # node -> read_snapshot() of its setup script's output
        self.key = None                # shape_key() of what it was built for, once it is

    def start(self) -> None:
        link = self.experiment.link
        self.start_nodes(lambda pids: root_script(link, pids))
        # plan() node by node, each node's commands and its neighbour entries (no ARP during a
        # run: each end of every link knows the other's MAC for good), then its snapshot
        # queries, in one shell per node, the nodes' shells side by side (no node's commands
        # depend on another's)
        self._configure(node_scripts(self.experiment))
        self.key = shape_key(self.experiment)

    def reconfigure(self, experiment) -> None:
        """Make this network, configured for the run of self.experiment, the network of a run
        of `experiment` (the same shape_key): its qdiscs and sysctls, and a new snapshot (its
        links as the first one saw them: a kept network's links do not change)."""
        before, self.experiment = self.experiment, experiment
        links = {name: {k: v for k, v in answers.items() if k[0] == "link"}
                 for name, answers in self.snapshot.items()}
        self._configure(settings_scripts(experiment, before), links)

    def _configure(self, scripts: dict[str, str], links: dict | None = None) -> None:
        """Each node's script, then its snapshot queries, in one shell per node.  With `links`
        (each node's link answers from an earlier snapshot) the links are not asked again, and
        a node without a script keeps its earlier snapshot (settings_scripts)."""
        queries = snapshot_queries(self.experiment, links=links is None)
        names = list(scripts)
        outs = run_in_all([
            (self.net[name], ["sh", "-c", scripts[name] + "".join(
                line + "\n" for line in snapshot_lines(queries.get(name, [])))],
             "setting up the node", True) for name in names])
        fresh = {name: {**(links or {}).get(name, {}), **read_snapshot(out)}
                 for name, out in zip(names, outs)}
        self.snapshot = fresh if links is None else {**self.snapshot, **fresh}
        if links is None:
            check_macs(self.experiment.link, self.snapshot)

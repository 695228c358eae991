"""Paths: one client, and behind each of several paths a router and a server of its own.

    cc-pcli ─ cc-pcli-a ══ cc-prtr-a ══ cc-psrv-a      path a: 10.51.1.0/24, then 10.52.1.0/24
            ─ cc-pcli-b ══ cc-prtr-b ══ cc-psrv-b      path b: 10.51.2.0/24, then 10.52.2.0/24

This is lab 5's topology: a per-destination tuner learns one congestion control per route, so
the client needs routes that differ.  Each path's router shapes its egress towards its server
(the data direction) with one netem: rate, delay, random loss and queue limit.  The ACKs are not
delayed, so a path's RTT is its delay.  The client reaches each server through that path's
router: the gateway of the route to a server names its path (`gateway`).

A paths file (topologies/paths/*.toml, schema.PathsModel) lists the paths; lab 5's is
`two-paths`.  The nodes and links are made as the dumbbell's are (topo.Nodes): a Mininet shell
per node, in a namespace with its own socket table, the links made in the machine's namespace
with fixed MACs and moved, a permanent neighbour entry on both ends of every link (netem drops
ARP like any other packet), and every name starting with "cc-", so `cclab clean` finds what a
killed process left.  `plan()` is pure: every command of every node, which tests can read.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from . import schema, topo
from .profiles import TOPOLOGY_DIR, load_toml
from .topo import End
from .units import SpecError, tc_percent, tc_rate, tc_time

PATHS_DIR = TOPOLOGY_DIR / "paths"
CLIENT = "cc-pcli"

# The end hosts' TCP settings: no per-destination memory between connections (a connection must
# not start from what the last one to the same server learned), and the socket buffers' ceiling
# at the dumbbell's floor (topo.socket_buffer_max: 16 MiB, four times what a 20 Mbit/s, 20 ms
# path holds with a 1,000-packet queue).
END_SYSCTLS = {"net.ipv4.tcp_no_metrics_save": "1",
               "net.ipv4.tcp_wmem": "4096 16384 16777216",
               "net.ipv4.tcp_rmem": "4096 131072 16777216"}


@dataclass(frozen=True)
class PathSpec:
    """One path, as its file gives it: rate in bit/s, delay in s, loss in percent."""
    key: str
    name: str
    rate: float
    delay: float = 0.0
    loss: float = 0.0
    limit: int = 1000


def find(name: str) -> Path:
    """A paths file by name (topologies/paths/<name>.toml) or by path."""
    if name.endswith(".toml"):
        p = Path(name)
    else:
        p = PATHS_DIR / f"{name}.toml"
    if not p.is_file():
        known = ", ".join(sorted(q.stem for q in PATHS_DIR.glob("*.toml")))
        raise SpecError("paths", f"no paths file {name!r} (known: {known})")
    return p


def from_dict(table: dict) -> tuple[PathSpec, ...]:
    model = schema.validate(schema.PathsModel, table)
    return tuple(PathSpec(p.key, p.name, p.rate, p.delay, p.loss, p.limit) for p in model.path)


def load(name: str) -> tuple[PathSpec, ...]:
    """The paths of a paths file, validated; a bad file raises one SpecError naming the field."""
    path = find(name)
    try:
        return from_dict(load_toml(path, "paths"))
    except SpecError as e:
        raise e.in_file(path) from None


def router(key: str) -> str:
    return f"cc-prtr-{key}"


def server(key: str) -> str:
    return f"cc-psrv-{key}"


PREFIX = 24      # every link is its own /24


def _path_links(i: int, p: PathSpec) -> tuple[tuple[End, End], tuple[End, End]]:
    """Path number `i`'s two links: the client with its router, the router with its server.
    The addresses are set here and nowhere else: the client link is 10.51.i.0/24 (router .1),
    the server link 10.52.i.0/24 (router .1, server .2)."""
    rtr, srv = router(p.key), server(p.key)
    return ((End(CLIENT, f"{CLIENT}-{p.key}", f"10.51.{i}.2"), End(rtr, f"{rtr}-c", f"10.51.{i}.1")),
            (End(rtr, f"{rtr}-s", f"10.52.{i}.1"), End(srv, f"{srv}-r", f"10.52.{i}.2")))


def links(paths) -> list[tuple[End, End]]:
    """Every link's two ends, path by path (_path_links)."""
    return [link for i, p in enumerate(paths, 1) for link in _path_links(i, p)]


def _ends(paths, key: str) -> tuple[End, End, End, End]:
    """Path `key`'s four link ends: client, router (client side), router (server side), server."""
    i = [p.key for p in paths].index(key)
    (cli, rtr_c), (rtr_s, srv) = _path_links(i + 1, paths[i])
    return cli, rtr_c, rtr_s, srv


def address(paths, key: str) -> str:
    """The server's address on path `key`."""
    return _ends(paths, key)[3].addr


def gateway(paths, key: str) -> str:
    """The router's address on the client's side of path `key`: the gateway of the client's
    route to that path's server."""
    return _ends(paths, key)[1].addr


def netem(p: PathSpec, dev: str) -> list[str]:
    """The path's shaping on its router's egress towards its server."""
    argv = ["tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay", tc_time(p.delay),
            "rate", tc_rate(p.rate), "limit", str(p.limit)]
    return argv + (["loss", tc_percent(p.loss)] if p.loss else [])


def plan(paths) -> dict[str, list[list[str]]]:
    """Every node's commands, in order: addresses, interfaces up, routes, sysctls, the netem of
    each path, then the permanent neighbour entries of every link."""
    pairs = links(paths)
    cmds: dict[str, list[list[str]]] = {}

    def add(node, argv):
        cmds.setdefault(node, []).append(argv)

    for a, b in pairs:
        for e in (a, b):
            add(e.node, ["ip", "addr", "add", f"{e.addr}/{PREFIX}", "dev", e.dev])
            add(e.node, ["ip", "link", "set", "dev", e.dev, "up"])
    for node in list(cmds):
        add(node, ["ip", "link", "set", "dev", "lo", "up"])
    for i, p in enumerate(paths, 1):
        (_, rtr_c), (rtr_s, srv) = _path_links(i, p)
        subnet = ipaddress.ip_interface(f"{srv.addr}/{PREFIX}").network
        add(CLIENT, ["ip", "route", "add", str(subnet), "via", rtr_c.addr])
        add(srv.node, ["ip", "route", "add", "default", "via", rtr_s.addr])
        add(rtr_s.node, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        add(rtr_s.node, netem(p, rtr_s.dev))
    for node in [CLIENT] + [server(p.key) for p in paths]:
        for k, v in END_SYSCTLS.items():
            add(node, ["sysctl", "-qw", f"{k}={v}"])
    for node, argv in topo.neighbour_entries(pairs):
        add(node, argv)
    return cmds


class PathsNetwork(topo.Nodes):
    """The paths, built on entering and taken down on leaving (also after an error while
    building: nothing is left half-built).  `node(name)` is a node's Mininet host (its `popen`
    runs a command in its namespace); `netns(name)` the path of its network namespace."""

    def __init__(self, paths, on_node=lambda name, pid: None):
        super().__init__(links(paths), on_node)
        self.paths = tuple(paths)

    def __enter__(self):
        try:
            self.start_nodes(lambda pids: topo.veth_script(topo.veth_plan(self.pairs), pids))
            # one shell per node, the nodes side by side (no node's commands wait on another's)
            topo.run_in_all([(self.node(node), ["sh", "-c", topo.script(cmds)], "setting up the node", True)
                             for node, cmds in plan(self.paths).items()])
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def netns(self, name: str) -> str:
        return f"/proc/{self.node(name).pid}/ns/net"

    def route_gateway(self, dst: str) -> str:
        """The gateway of the client's route to `dst` (`ip -j route get`), 0.0.0.0 on-link."""
        out = topo.run_in(self.node(CLIENT), ["ip", "-j", "route", "get", dst])
        routes = json.loads(out or "[]")
        return routes[0].get("gateway", "0.0.0.0") if routes else "0.0.0.0"

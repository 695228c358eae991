"""Smoke tests of the lab VM itself: real qdiscs, real congestion controls, Mininet.

1. sender -> router -> receiver, the router's egress towards the receiver shaped to 10 Mbit/s,
   50 ms one-way delay and 2 % loss (the data direction only). iperf3 runs reno, cubic, vegas
   and bbr; the algorithm each flow really used is read from its socket, and BBR, which does not
   treat random loss as congestion, must get more than twice Cubic's goodput.  These flows are
   marked nightly: in make test, lab 2 in the browser runs the same four algorithms on its
   randomly lossy link, each flow's congestion control checked against the one asked for, and
   BBR's and Cubic's goodput graded against the lab's reference bands.  The path's own checks
   (netem on the router, no ARP across the lossy link) stay in make test-guest.
2. Mininet starts a two-host topology without Open vSwitch and passes pingall.
"""
import re
import threading
import time

import pytest

from netns import Path, iperf3_json, ns

CCAS = ("reno", "cubic", "vegas", "bbr")
DURATION = 5
AVAILABLE = set(open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()) | set(CCAS)


# A socket counts as carrying data once this much was acked: past the handshake and the
# initial window, so a CCA seen here is the one that moved the flow's bytes.
DATA_ACKED = 100_000


def _watch_cc(path, seen, stop):
    """Record, per socket towards iperf3's port (keyed by its kernel cookie, so a reused local
    port never merges two sockets), the most bytes acked and the congestion controls ss reported
    while the socket was carrying data."""
    while not stop.is_set():
        for s in path.sockets(path.snd):
            info = s["info"]
            cookie = re.search(r"\bsk:([0-9a-f]+)", s["head"])
            m = re.search(r"bytes_acked:(\d+)", " ".join(info))
            if not cookie:
                continue
            acked = int(m.group(1)) if m else 0
            best, ccs = seen.get(cookie.group(1), (0, set()))
            if acked >= DATA_ACKED:
                ccs.update(t for t in info if t in AVAILABLE)
            seen[cookie.group(1)] = (max(best, acked), ccs)
        time.sleep(0.5)


def _data_socket_cc(seen):
    """The congestion controls of the socket that carried the most data (not iperf3's control
    connection, which uses the namespace default)."""
    if not seen:
        return set()
    return max(seen.values(), key=lambda v: v[0])[1]


@pytest.fixture(scope="module")
def lossy_path():
    with Path() as p:
        p.shape(["rate", "10mbit", "delay", "50ms", "loss", "2%", "limit", "1000"])
        p.spawn(p.rcv, "iperf3", "-s")
        p.listening()
        yield p


@pytest.fixture(scope="module")
def goodputs(lossy_path):
    results = {}
    for cca in CCAS:
        seen, stop = {}, threading.Event()
        t = threading.Thread(target=_watch_cc, args=(lossy_path, seen, stop))
        t.start()
        try:
            data = iperf3_json(lossy_path, "-t", str(DURATION), "-C", cca)
        finally:
            stop.set()
            t.join()
        mbps = data["end"]["sum_received"]["bits_per_second"] / 1e6
        results[cca] = {"mbps": mbps, "ss": _data_socket_cc(seen),
                        "reported": data["end"].get("sender_tcp_congestion")}
        print(f"{cca:>6}: {mbps:6.2f} Mbit/s, data socket cc seen by ss: {sorted(results[cca]['ss'])}")
    return results


def test_qdisc_is_netem_on_the_router(lossy_path):
    out = ns(lossy_path.rtr, "tc", "qdisc", "show", "dev", "r-rcv").stdout
    assert "netem" in out and "loss 2%" in out and "delay 50ms" in out, out


def test_no_arp_crosses_the_lossy_link(lossy_path):
    """Both ends of both links know each other's MAC for good: netem's loss cannot take ARP."""
    for a, b in lossy_path.links():
        for (name, dev, _), (_, _, other) in ((a, b), (b, a)):
            out = ns(name, "ip", "neigh", "show", other, "dev", dev).stdout
            assert "PERMANENT" in out, f"{name} {dev}: {out!r}"


@pytest.mark.nightly
@pytest.mark.parametrize("cca", CCAS)
def test_flow_ran_the_requested_algorithm(goodputs, cca):
    seen = goodputs[cca]["ss"]
    assert seen, f"ss never saw the {cca} data socket"
    assert seen == {cca}, f"requested {cca}, the data socket ran {sorted(seen)}"
    assert goodputs[cca]["reported"] == cca


@pytest.mark.nightly
def test_rates_below_the_link_rate(goodputs):
    for cca, r in goodputs.items():
        assert 0.1 < r["mbps"] <= 10.0, f"{cca}: {r['mbps']:.2f} Mbit/s on a 10 Mbit/s link"


@pytest.mark.nightly
def test_bbr_beats_cubic_under_random_loss(goodputs):
    bbr, cubic = goodputs["bbr"]["mbps"], goodputs["cubic"]["mbps"]
    assert bbr > 2 * cubic, f"bbr {bbr:.2f} Mbit/s is not more than 2x cubic {cubic:.2f} Mbit/s"


def test_mininet_pingall():
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import Host
    from mininet.topo import Topo

    class TwoHosts(Topo):
        def build(self):
            self.addLink(self.addHost("h1"), self.addHost("h2"))

    setLogLevel("warning")
    net = Mininet(topo=TwoHosts(), controller=None, host=Host, autoSetMacs=True)
    try:
        net.start()
        loss = net.pingAll()
    finally:
        net.stop()
    assert loss == 0

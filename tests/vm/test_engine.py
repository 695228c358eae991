"""The experiment engine on real emulated links (inside the lab VM, as root).

Each profile runs for a few seconds and what is measured must match what the profile says,
within 10 %: idle RTT, the rate one bulk cubic flow achieves, the loss rate; the LEO delay must
change at its reconfiguration instants and the cellular rate must follow its trace.  A run
interrupted with SIGINT or SIGTERM must leave nothing behind and a manifest marked incomplete.

Loss: random loss of p needs many packets to measure within 10 % (relative standard error
sqrt((1 - p) / (n p))), so lossy profiles are probed with UDP streams of small datagrams
(~100,000 at 1 %), and loss-free profiles with a UDP probe after the TCP flow that must lose
nothing.  Rate on lossy profiles: one cubic flow cannot reach the link rate through random loss
(Mathis: ~1.22 MSS / (RTT sqrt(p)), a few Mbit/s), so the rate check runs with the loss switched
off in an override; the loss is checked on its own.

Rates here stay at or below 100 Mbit/s (50 with every measurement on): the VM is
software-emulated (TCG), and its fixed per-hop overhead adds about 1.5-2.5 ms to an RTT, so an
idle RTT is compared with the profile's plus that overhead, measured once (base_rtt).
Goodput is compared with the link rate times 1448/1514 (TCP payload per Ethernet frame).
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest

from cclab import measure, profiles, results, runner, state, traces
from cclab.analysis import fidelity
from cclab.analysis.data import RunData
from cclab.profiles import KIT_DIR
from cclab.spec import Experiment, Flow, Measure

PAYLOAD = 1448 / 1514


def once_more_if_udp_stalled(attempt):
    """attempt(out_dir) again, once, if a UDP flow never started: iperf3 sends its UDP
    handshake datagram once, so a lossy link stalls about one such flow in fifty (the run
    says so in its error).  Any other failure, or a second stall, fails the test."""
    try:
        return attempt("")
    except runner.UdpHandshakeLost as e:
        print(f"\nrunning again: {e}")
        return attempt("again")


def run(tmp_path, profile, flows, override=None, **measure):
    return once_more_if_udp_stalled(
        lambda sub: run_once(tmp_path / sub, profile, flows, override, **measure))


def run_once(tmp_path, profile, flows, override=None, **measure):
    # CPU load on: the verdict's cpu_headroom check is one of those that can excuse a guest
    # that fell behind (starved())
    m = dict(tcp_probe=False, ping_interval=0.1, cpu=True)
    m.update(measure)
    e = Experiment(name=f"vm-{profile}", profile=profile, override=override or {},
                   flows=flows, measure=Measure(**m), tail=0.5)
    (d,) = runner.run(e, out=tmp_path)
    man = results.read_manifest(d)
    assert man["status"] == "complete", man["error"]
    return d, man


def run_for_rate(tmp_path, profile, flows, window, rate, override=None, **measure):
    """run() and flow 1's goodput in window: (run folder, manifest, bit/s).  The run is made
    once more if that goodput falls short of rate while the kit's
    fidelity verdict says the emulator did not keep up.  The guest is software-emulated, so a
    busy host starves it: beside a CPU hog on the host, one cubic flow on the wired profile got
    29-68 % of 50 Mbit/s and one reno flow 43-54 %, and for the reno runs the verdict named the
    cause (a CPU 100 % busy, the queue served at 42 % of its rate).  A shortfall in a run the
    verdict trusts fails at once."""
    for attempt in ("", "again"):
        d, man = run(tmp_path / attempt, profile, flows, override, **measure)
        got = goodput(d, 1, *window)
        if within(got, rate) or attempt:
            break
        v = fidelity.verdict(d)
        print(f"\nflow 1: {got / 1e6:.1f} of {rate / 1e6:.1f} Mbit/s; {fidelity.summary_line(v)}")
        if v["ok"]:
            break
        print("running again: the emulator did not keep up with this run")
    return d, man, got


def trust(d, verdict=None):
    """The fidelity verdict on a run (computed unless given), for an assertion's message."""
    return fidelity.summary_line(verdict or fidelity.verdict(d))


STARVED = {"rate_backlogged", "cpu_headroom", "packet_spacing", "link_changes"}


def starved(d, verdict=None) -> set:
    """The fidelity checks that failed on a run (its verdict computed unless given) and name a
    guest that fell behind its link."""
    v = verdict or fidelity.verdict(d)
    return {c["name"] for c in v["checks"] if c["ok"] is False} & STARVED


def assert_link_rate(d, got, rate, window):
    """A flow's goodput in window against the rate its link was given.  Never above it (a slow
    guest cannot serve faster); close to it unless the kit's fidelity verdict says the emulator
    fell behind in this run (beside two CPU hogs on the host, an 80 Mbit/s LEO link served 10.8 %
    short in two runs of two, and the verdict named it: the queue served at 86 % of its rate),
    or the link sat idle for want of packets.  This test judges the link: when the verdict
    trusts the run, a shortfall passes only if the verdict measured the link sending at its rate
    whenever it had a queue (rate_backlogged, over the whole run: at least 95 % of the rate),
    the window's queue served no faster than the rate, the goodput lost is no more than the time
    its queue stood empty, and the queue held packets for at least half the window.  The
    window's own served rate is printed, not held to 5 %: a third CI-like run had the queue
    serving 93.8 % of the rate over its 2.4 s of backlog in the window while the run's verdict,
    over all its backlog, measured the rate within 95 %; the window is too short a sample for
    the verdict's bound.  What kept the sender from filling it is
    printed (its congestion window, packets in flight, application-limited samples, the
    receiver's window), not judged: two CI runs on the wired profile had cubic at 74 % and 80 %
    of the rate with the verdict trusting the run and the queue served at 99-100 % of the rate
    while it held packets; in the first, the congestion window never fell below 198 segments
    against a BDP of 173, so the sender was held back by something other than its window (its
    CPU share in the guest, or the receiver's).  The receiver's buffer must allow a window of
    two BDPs, so that a kit that set it too small fails here.  Any other shortfall fails."""
    assert got <= 1.10 * rate, (got, rate)
    if near(got, rate):
        return
    run = RunData(d)                        # read once: the verdict and busy_link share it
    v = fidelity.verdict(run)               # judged once, for the test and its message
    print(f"not judged against the rate: {trust(d, v)}")
    if starved(d, v):
        return
    q = fidelity.busy_link(run, "down", *window)
    ss = results.load(d, "ss")
    w = ss[(ss.flow == 1) & (ss.t >= window[0]) & (ss.t <= window[1])]
    bdp = run.bdp_bytes("down")
    busy = q["busy_s"] / q["sampled_s"] if q["sampled_s"] else 0.0
    served = (q["busy_bps"] or 0) * PAYLOAD
    print(f"window {window[0]}-{window[1]} s: a queue for {q['busy_s']:.2f} of "
          f"{q['sampled_s']:.2f} s, {served / 1e6:.2f} Mbit/s of payload sent meanwhile; "
          f"a BDP is {bdp / 1448:.0f} segments")
    if len(w):
        print(f"flow 1 in the window: cwnd {w.cwnd.min():.0f}-{w.cwnd.max():.0f} segments, "
              f"in flight {w.unacked.min():.0f}-{w.unacked.max():.0f}, application-limited in "
              f"{(w.app_limited.fillna(0) > 0).mean():.0%} of {len(w)} samples, "
              f"{int(w.retrans_total.max() - w.retrans_total.min())} retransmitted")
    probe = results.load(d, "probe")
    if len(probe):
        p = probe[(probe.flow == 1) & (probe.t >= window[0]) & (probe.t <= window[1])]
        if len(p):
            print(f"the receiver's window: {p.snd_wnd.min():.0f}-{p.snd_wnd.max():.0f} B")
    receiver = run.manifest["sysctls"]["cc-c1"]["net.ipv4.tcp_rmem"]
    assert int(receiver.split()[-1]) >= 2 * bdp, f"tcp_rmem {receiver} on the receiver"
    backlogged = next((c for c in v["checks"] if c["name"] == "rate_backlogged"
                       and c.get("direction", "down") == "down"), {})
    print(f"the verdict's rate while backlogged: {backlogged.get('reason', 'not judged')}")
    idle_link = (backlogged.get("ok") is True and served <= 1.05 * rate
                 and busy >= 0.5 and got >= 0.9 * busy * rate)
    assert idle_link, f"goodput {got / 1e6:.2f} of {rate / 1e6:.2f} Mbit/s: {trust(d, v)}"


def assert_sampled_at(t, hz, seconds, what):
    """A sampler keeps its rate's schedule: the median gap between its samples is its period
    (within 20 %).  How many ticks it gets is the guest's speed, not the kit's: a busy guest
    makes it skip some (a CI run's socket sampler took 79 of 100 ticks in 5 s, its samples
    50 ms apart), so the count is printed, and only a sampler that all but stopped (under one
    sample a second) fails for its count."""
    gaps = np.diff(np.sort(np.asarray(t, dtype=float)))
    median = float(np.median(gaps)) if len(gaps) else float("nan")
    print(f"{what} samples: {len(t)} of {hz * seconds:g} ticks in {seconds} s, median gap "
          f"{median * 1e3:.1f} ms (period {1e3 / hz:.0f} ms)")
    assert len(t) >= seconds, f"{what} sampling all but stopped: {len(t)} in {seconds} s"
    assert abs(median * hz - 1) <= 0.2, f"{what} samples {median * 1e3:.1f} ms apart, not {1e3 / hz:.0f}"


def idle_rtt(d, before):
    ping = results.load(d, "ping")
    rtt = ping[(ping.t < before) & (ping.t > -5)].rtt_ms.dropna()
    assert len(rtt) >= 5, "too few idle pings"
    return statistics.median(rtt)


def goodput(d, flow, t0, t1):
    """Receiver-side goodput (bit/s) of a flow between t0 and t1 (iperf3 server intervals)."""
    ip = results.load(d, "iperf")
    rx = ip[(ip.flow == flow) & (ip.side == "receiver") & (ip.t_start >= t0) & (ip.t_end <= t1)]
    assert len(rx), "no receiver intervals in the window"
    return rx.bytes.sum() * 8 / (rx.t_end.max() - rx.t_start.min())


def link_rate(d, direction, t0, t1):
    """Bit/s the bottleneck's netem sent (frames, as the shaper counts them) between t0 and t1."""
    q = results.load(d, "qdisc")
    q = q[(q.direction == direction) & (q.kind == "netem") & (q.t >= t0) & (q.t <= t1)]
    rates = []
    for _, g in q.groupby(["node", "dev"]):
        g = g.sort_values("t")
        if len(g) >= 2:
            rates.append((g.bytes.iloc[-1] - g.bytes.iloc[0]) * 8 / (g.t.iloc[-1] - g.t.iloc[0]))
    assert rates, "no qdisc samples in the window"
    return max(rates)


def within(measured, expected, tol=0.10):
    return abs(measured - expected) <= tol * expected


def near(measured, expected, tol=0.10):
    print(f"measured {measured:.4g}, expected {expected:.4g} ({(measured / expected - 1) * 100:+.1f} %)")
    return within(measured, expected, tol)


def udp_probe(start, duration=2):
    """A UDP stream far below every profile's rate (2 Mbit/s of 200-byte datagrams)."""
    return Flow(cca="cubic", protocol="udp", rate="2mbit", length=200, start=start,
                duration=duration)


def udp_loss(d, flow):
    """(lost, sent) datagrams of a UDP flow, from the iperf3 client's summary."""
    doc = json.loads((d / "raw" / f"iperf-{flow}.json").read_text())
    s = doc["end"]["sum"]
    print(f"flow {flow}: {s['lost_packets']} of {s['packets']} datagrams lost "
          f"({s['lost_percent']:.3f} %)")
    return s["lost_packets"], s["packets"]


def assert_no_loss(d, flow):
    lost, sent = udp_loss(d, flow)
    assert sent > 1000 and lost == 0, (lost, sent)


def assert_cca(d, want):
    fl = results.load(d, "flows")
    tcp = fl[fl.protocol == "tcp"]
    assert (tcp.cca_iperf == want).all() and (tcp.cca_ss == want).all(), tcp[["cca_iperf", "cca_ss"]]


HYSTART = "/sys/module/tcp_cubic/parameters/hystart"


@pytest.fixture
def no_hystart():
    """Cubic without HyStart for the duration of a test (a global module parameter).

    HyStart's delay test reacts to the jitter the TCG guest adds and can end slow start below
    the BDP; Cubic then grows back slowly (0.4 t^3 segments after t s, plus about half a segment
    per RTT).  On a 600 ms path that takes minutes.  On the 40 ms wired path one run in eight
    here left slow start at cwnd 131 of a 165-packet BDP; a CI run got 87.7 % of the link (its
    data is gone; an early exit is the likely cause).  That is lab 4's subject, not the link's:
    the profile checks want the link's rate, so slow start runs until the queue overflows."""
    with open(HYSTART) as f:
        before = f.read().strip()
    with open(HYSTART, "w") as f:
        f.write("0")
    try:
        yield
    finally:
        with open(HYSTART, "w") as f:
            f.write(before)


@pytest.fixture(scope="module")
def base_rtt(tmp_path_factory):
    """What the VM itself adds to an RTT through the dumbbell with netem in both directions:
    1 ms of netem delay each way, minus those 2 ms (forwarding and netem's timers under TCG)."""
    d, _ = run(tmp_path_factory.mktemp("base"), "wired",
               [Flow(cca="cubic", protocol="udp", rate="100kbit", start=2, duration=1)],
               override={"down": {"delay": "1ms"}, "up": {"delay": "1ms"}}, ping_interval=0.02,
               ss=False, qdisc=False)
    ping = results.load(d, "ping")
    rtt = ping[(ping.t < 1.9) & (ping.t > -5)].rtt_ms.dropna()
    assert len(rtt) >= 50
    # the mean, as test_wifi's model is a mean (the median read 0.8 ms where the mean reads
    # 1.5-2.5, and test_wifi then failed); 5 ms bounds a busy host and still catches a path
    # that adds delay of its own
    extra = rtt.mean() - 2.0
    print(f"the VM adds {extra:.3f} ms to an RTT (mean over {len(rtt)} pings; median "
          f"{rtt.median() - 2.0:.3f} ms)")
    assert 0 <= extra < 5
    return extra


@pytest.mark.nightly
def test_wired(tmp_path, no_hystart, base_rtt):
    # the probe starts 1.5 s after the flow's planned end: its test begins once it is connected
    flows = [Flow(cca="cubic", start=2, duration=7), udp_probe(10.5)]
    d, man, got = run_for_rate(tmp_path, "wired", flows, (5, 9.2), 50e6 * PAYLOAD,
                               tcp_probe=True, cpu=True)
    assert near(idle_rtt(d, 1.9), 40.0 + base_rtt)
    assert_link_rate(d, got, 50e6 * PAYLOAD, (5, 9.2))
    assert_no_loss(d, 2)
    fl = results.load(d, "flows")
    assert fl.cca_iperf[0] == "cubic" and fl.cca_ss[0] == "cubic"
    # the flow's test start: after its client was spawned, within a sampling period before the
    # first socket sample that shows payload; the intervals count from it
    ss = results.load(d, "ss")
    mine = ss[ss.flow == 1]
    payload = mine[[measure.sent_payload(r) for _, r in mine.iterrows()]].t.min()
    idle = mine[mine.t < payload].t.max()
    f1 = fl.iloc[0]
    print(f"flow 1: spawned {f1.t_spawn:.3f} s, test from {f1.t_start:.3f} s, last sample "
          f"without payload {idle:.3f} s, first with {payload:.3f} s")
    # between the two samples (their midpoint, or the spawn if later): the sampler's actual
    # gap, not its nominal 50 ms, bounds it (a busy guest skips ticks)
    gap = payload - idle if idle == idle else 1 / 20      # no sample before: one period
    assert f1.t_spawn <= f1.t_start <= payload <= f1.t_start + gap / 2 + 1e-3
    ip = results.load(d, "iperf")
    assert abs(ip[(ip.flow == 1) & (ip.side == "sender")].t_start.min() - f1.t_start) < 1e-3
    assert not man["warnings"], man["warnings"]
    # CPU load, for the fidelity verdict's headroom check: ~10 Hz per CPU and for "all"
    cpu = results.load(d, "cpu")
    cpus = set(cpu.cpu)
    assert "all" in cpus and "cpu0" in cpus, cpus
    per = cpu[(cpu.cpu == "all") & (cpu.t >= 0) & (cpu.t <= 10)]
    assert_sampled_at(per.t, 10, 10, "cpu")
    assert cpu.busy_frac.between(0, 1).all() and per.busy_frac.max() > 0
    assert man["tc"]["cc-r1"]["cc-r1-core"]["qdisc"][0]["kind"] == "htb"
    assert man["sysctls"]["cc-s1"]["net.ipv4.tcp_congestion_control"] == "cubic"
    assert man["kernel"] and man["tools"]["iperf3"] and "sha256" in man["ccas"]["cubic"]
    ss = results.load(d, "ss")
    flow_ss = ss[(ss.flow == 1) & (ss.t > 3) & (ss.t < 8)]
    assert_sampled_at(flow_ss.t, 20, 5, "socket")
    assert flow_ss.cwnd.notna().all() and flow_ss.rtt_ms.notna().all()
    for col in ("ssthresh", "min_rtt_ms", "pacing_rate_bps", "delivery_rate_bps"):
        assert flow_ss[col].notna().any(), f"ss never reported {col}"
    # ping under load: the queue the flow builds (1 BDP of buffer) shows in the RTT
    ping = results.load(d, "ping")
    loaded = ping[(ping.t > 5) & (ping.t < 9)].rtt_ms.dropna()
    print(f"ping under load: median {loaded.median():.1f} ms over {len(loaded)} pings")
    assert len(loaded) >= 20 and loaded.median() > idle_rtt(d, 1.9) + 5
    # provenance
    assert man["seed"] == 1 and man["start"] and man["end"] and man["spec"] and man["modules"]
    q = results.load(d, "qdisc")
    core = q[(q.dev == "cc-r1-core") & (q.kind == "netem") & (q.t >= 0) & (q.t < 9)]
    assert_sampled_at(core.t, 10, 9, "qdisc")
    probe = results.load(d, "probe")
    assert len(probe[probe.flow == 1]) > 1000 and probe.srtt_us.median() > 20000 * 0.9


@pytest.mark.nightly
def test_starlink_seed_rate_and_rtt(tmp_path, base_rtt):
    # The seed's links without the random loss: tbf's 10 Mbit/s and the 50 ms of netem.  With
    # HyStart (unlike the other rate checks): without it slow start overshoots into tbf's
    # 400 ms queue and the flow got 5.5 of 9.6 Mbit/s in the window, in two runs of two.
    d, _, got = run_for_rate(tmp_path, "starlink-seed",
                             [Flow(cca="cubic", start=1.5, duration=6)], (3.5, 7.7),
                             10e6 * PAYLOAD, override={"down": {"loss": 0}})
    assert near(idle_rtt(d, 1.4), 50.0 + base_rtt)
    assert_link_rate(d, got, 10e6 * PAYLOAD, (3.5, 7.7))


@pytest.mark.nightly
def test_starlink_seed_loss(tmp_path):
    # 2 % loss on the data direction, measured end to end by UDP: ~47,000 datagrams of 64
    # bytes (6.6 Mbit/s on the wire, below tbf's 10) give a relative standard error near
    # 3.3 %, so 10 % is 3 sigma.
    # The profile's loss is netem's own count: what the guest loses besides (a receiver that
    # falls behind under emulation on a busy host) is not the link's, and it once made the
    # end-to-end figure miss by more than 10 % in a CI run.  netem is tbf's child, so its limit
    # holds tbf's backlog too: a starved sender's burst of small datagrams can overflow it, and
    # this run gives it room (as the LEO loss test does), so its drops are the loss alone.
    d, _ = run(tmp_path, "starlink-seed",
               [Flow(cca="cubic", protocol="udp", rate="4mbit", length=64, duration=6)],
               override={"down": {"limit": 100_000}}, ping=False, ss=False)
    assert_netem_loss(d, "cc-r1-core", *udp_loss(d, 1), percent=2.0)


def assert_netem_loss(d, dev, lost, sent, percent):
    """netem's own drop count on dev is the profile's loss: every datagram of the flow passed
    it, it dropped about `percent` of them, and what it dropped never arrived."""
    q = results.load(d, "qdisc")
    netem = q[(q.dev == dev) & (q.kind == "netem")].sort_values("t").iloc[-1]
    seen = netem.packets + netem.drops + netem.backlog_packets
    print(f"netem on {dev}: {netem.drops} dropped of {seen} packets; end to end "
          f"{100 * lost / sent:.3f} % of {sent}")
    # every datagram reaches netem, unless the verdict says the guest fell behind: a starved
    # router drops some at its input first, which are not the link's (the fraction is judged
    # over what netem saw)
    assert seen <= 1.01 * sent + 100, (seen, sent)
    assert seen >= 0.99 * sent or (seen >= 0.5 * sent and starved(d)), (seen, sent, trust(d))
    assert near(100 * netem.drops / seen, percent)
    assert lost >= 0.95 * netem.drops


@pytest.mark.nightly
def test_geo(tmp_path, no_hystart, base_rtt):
    # the UDP probe starts 1.5 s after the flow: the 2-BDP queue (1.2 s) has drained by then
    d, man = run(tmp_path, "geo", [Flow(cca="cubic", start=2, duration=28), udp_probe(31.5)],
                 ss_hz=10)
    assert near(idle_rtt(d, 1.9), 600.0 + base_rtt)
    # Slow start fills the 3-BDP pipe after ~10 s and ends in a burst of losses; the
    # recovery (a retransmission timeout at worst, then slow start to 2 BDP) is over well
    # before the last 10 s, which are compared.  The rate the bottleneck sent is checked;
    # receiver goodput is printed beside it.
    print("receiver goodput:", end=" ")
    near(goodput(d, 1, 20, 30.2), 50e6 * PAYLOAD)
    sent = link_rate(d, "down", 20, 30.2)
    assert sent <= 1.05 * 50e6, sent
    # close to the rate unless the verdict says the guest fell behind (no run again: 30 s)
    assert near(sent, 50e6) or starved(d), f"{sent / 1e6:.2f} Mbit/s: {trust(d)}"
    assert_no_loss(d, 2)
    assert man["sysctls"]["cc-s1"]["net.ipv4.tcp_rmem"].split()[-1] == "67108864"


def slot_one_way(delay, jitter, smin, smax, steps=4000):
    """Mean one-way delay (s) of a lone packet through netem with jitter and slots.

    netem (6.1) draws the packet's delay D uniformly in [delay - jitter, delay + jitter].  On an
    idle link the last slot has long passed, so when the packet is queued netem opens a slot at
    now + S1 (S uniform in [smin, smax]).  If S1 >= D the packet leaves at S1.  Otherwise, when
    D comes, the slot boundary is before the packet's send time and netem draws a new slot from
    then: it leaves at D + S2.  So E[one way] = E[S1; S1 >= D] + P(S1 < D) (E[D | S1 < D] + E[S]),
    well above the configured delay: the slot wait is part of Wi-Fi's idle RTT."""
    a, b = delay - jitter, delay + jitter
    mean_s = (smin + smax) / 2
    total = 0.0
    for i in range(steps):                  # midpoint rule over D
        dd = a + (b - a) * (i + 0.5) / steps
        p_before = min(1.0, max(0.0, (dd - smin) / (smax - smin)))
        lo = min(max(dd, smin), smax)
        s_after = (smax ** 2 - lo ** 2) / (2 * (smax - smin))     # E[S1; S1 >= D]
        total += s_after + p_before * (dd + mean_s)
    return total / steps


def test_wifi_slot_model():
    # the model against a direct simulation of the same rules (no network needed)
    import random
    rng = random.Random(4)
    n, acc = 200_000, 0.0
    for _ in range(n):
        dd, s1 = rng.uniform(0.001, 0.005), rng.uniform(0.0008, 0.010)
        acc += s1 if s1 >= dd else dd + rng.uniform(0.0008, 0.010)
    assert slot_one_way(0.003, 0.002, 0.0008, 0.010) == pytest.approx(acc / n, rel=0.01)


@pytest.mark.nightly
def test_wifi(tmp_path, no_hystart, base_rtt):
    flows = [Flow(cca="cubic", start=3, duration=6), udp_probe(9.5)]
    d, man, got = run_for_rate(tmp_path, "wifi", flows, (5, 9.2), 50e6 * PAYLOAD,
                               ping_interval=0.02)
    # Idle RTT: the profile's 3 ms each way with +-2 ms jitter, plus the wait for an
    # aggregation slot (0.8-10 ms) in each direction; see slot_one_way for the mean.
    down, up = man["profile"]["down"], man["profile"]["up"]
    model = sum(slot_one_way(x["delay"], x["jitter"], x["slot"]["min"], x["slot"]["max"])
                for x in (down, up)) * 1000
    ping = results.load(d, "ping")
    rtt = ping[(ping.t < 2.9) & (ping.t > -5)].rtt_ms.dropna()
    assert len(rtt) >= 80, len(rtt)                # SE of the mean ~ 3.7 ms / sqrt(n)
    print(f"wifi idle RTT: model {model:.2f} ms + VM {base_rtt:.2f} ms")
    assert near(rtt.mean(), model + base_rtt)
    assert_link_rate(d, got, 50e6 * PAYLOAD, (5, 9.2))
    assert_no_loss(d, 2)


def served_windows(d, direction, windows):
    """For each window (t0, t1): the rate the bottleneck's netem served (frame bits/s, from its
    byte counter interpolated at the window's edges), the rate the run's own link changes put
    in force over it (their t_applied), and whether the queue held packets at every qdisc
    sample in it (a link only serves its rate while it has something to send)."""
    import numpy as np
    q = results.load(d, "qdisc")
    q = q[(q.direction == direction) & (q.kind == "netem")]
    node, dev = max(q.groupby(["node", "dev"]), key=lambda kv: kv[1].bytes.max())[0]
    q = q[(q.node == node) & (q.dev == dev)].sort_values("t")
    ch = results.load(d, "changes")
    ch = ch[ch.direction == direction].sort_values("t_applied")
    out = []
    for t0, t1 in windows:
        sent = np.interp([t0, t1], q.t, q.bytes)
        served = (sent[1] - sent[0]) * 8 / (t1 - t0)
        edges = [t0] + [t for t in ch.t_applied if t0 < t < t1] + [t1]
        before = lambda t: ch[ch.t_applied <= t].rate_bps.iloc[-1]      # noqa: E731
        applied = sum(before(a) * (b - a) for a, b in zip(edges, edges[1:])) / (t1 - t0)
        inside = q[(q.t >= t0) & (q.t <= t1)]
        backlogged = len(inside) > 0 and bool((inside.backlog_packets > 0).all())
        out.append((t0, t1, served, applied, backlogged))
    return out


def test_cellular_follows_trace(tmp_path, base_rtt):
    """The link serves the trace's rate.  What is compared is what the link can be held to: the
    bytes the bottleneck's netem sent in each second against the rates the run's changes put in
    force over that same second, in the seconds its queue never ran empty.  (Comparing the
    flow's goodput with the trace read 57-60 % off in some seconds: after a fade a cubic flow
    that lost packets in the deep queue has too small a window to fill the next high-rate
    steps, so the link idles; that is the flow, not the emulator.  Served against in force,
    backlogged, every second of a run reads within 16 %.)"""
    d, man = run(tmp_path, "cellular", [Flow(cca="cubic", start=1, duration=12),
                                        udp_probe(13.5)], ss_hz=10, qdisc_hz=25)
    assert near(idle_rtt(d, 0.9), 40.0 + base_rtt)
    assert_no_loss(d, 2)
    ch = results.load(d, "changes")
    late = (ch.t_applied - ch.t_planned).abs()
    print(f"changes applied late by {late.median() * 1000:.1f} ms (median), "
          f"{late.max() * 1000:.0f} ms at most")
    # measured: medians of 1-2 ms; the first changes, while the run's flows and samplers
    # start, up to 167 ms late.  Later than the verdict's 0.25 s only if the verdict says so.
    v = fidelity.verdict(d)
    assert len(ch) > 20, ch
    assert late.median() < 0.02 or starved(d, v), f"{late.median():.3f} s: {trust(d, v)}"
    assert late.max() <= fidelity.Thresholds().change_late_max or "link_changes" in v["failed"], ch
    trace = traces.read(KIT_DIR / "topologies" / "traces" / "cell-10mbit.down")
    planned = traces.rates(trace, 1.0, 13)
    rows = served_windows(d, "down", [(s, s + 1.0) for s in range(3, 13)])
    print("  window   trace  in force  served  error  backlogged   (Mbit/s of frames)")
    errors = []
    for (t0, t1, served, applied, backlogged), trace_rate in zip(rows, planned[3:]):
        err = abs(served - applied) / applied
        print(f"  {t0:4.0f}-{t1:<4.0f} {trace_rate / 1e6:6.2f} {applied / 1e6:8.2f} {served / 1e6:7.2f} "
              f"{err * 100:5.1f} %  {backlogged}")
        # the changes in force are the trace's (the engine's own arithmetic, to within a
        # change's lateness)
        assert abs(applied - trace_rate) <= 0.15 * trace_rate, (t0, applied, trace_rate)
        if backlogged:
            errors.append(err)
    errors.sort()
    print(f"backlogged seconds: {len(errors)} of {len(rows)}; error median "
          f"{statistics.median(errors) * 100:.1f} %, max {errors[-1] * 100:.1f} %" if errors else
          "no backlogged second")
    assert len(errors) >= len(rows) // 2, "the flow left the queue empty in most seconds"
    # Never more than the trace allows (a token bucket's depth, 4 ms, beyond it at most); and
    # while backlogged, close to it.  Below it is where a starved software-emulated guest
    # loses time (htb's timer fires late and more than a bucket's depth of tokens goes
    # unused): measured 1-16 % under a loaded host, median 7 %; the fidelity verdict's
    # backlogged-rate check reads the same shortfall and says so.
    for t0, t1, served, applied, _ in rows:
        assert served <= applied * 1.05, (t0, served, applied)
    print(fidelity.summary_line(v))
    behind = {c["name"] for c in v["checks"] if c["ok"] is False} & STARVED
    assert (statistics.median(errors) < 0.10 and errors[-1] < 0.25) or behind, errors


@pytest.mark.nightly
def test_leo_rtt_changes_at_reconfiguration(tmp_path, base_rtt):
    override = {"dynamics": {"period": "3s", "offset": "1.5s", "align": "start"},
                "down": {"loss": 0}, "up": {"loss": 0}}
    d, _ = run(tmp_path, "leo", [Flow(cca="cubic", protocol="udp", rate="100kbit", duration=10)],
               override=override, ping_interval=0.05, ss=False)
    ch = results.load(d, "changes")
    reconf = ch[(ch.why == "reconfigure") & (ch.direction == "down")].reset_index()
    assert list(reconf.t_planned) == pytest.approx([1.54, 4.54, 7.54])
    ping = results.load(d, "ping")
    # each delay is judged from when the engine applied it (changes.csv), not when planned
    edges = [0.0] + list(reconf.t_applied) + [10.0]
    delays = [0.015] + list(reconf.delay_s)
    # with what the VM itself adds to an RTT (1-1.5 ms; +4 to +7.5 % of these 21-40 ms RTTs
    # when it was left out, and a CI run went past 10 %)
    for (a, b), delay in zip(zip(edges, edges[1:]), delays):
        w = ping[(ping.t > a + 0.25) & (ping.t < b - 0.1)].rtt_ms.dropna()
        assert len(w) > 10
        assert near(statistics.median(w), 2000 * delay + base_rtt), \
            (a, b, delay, statistics.median(w))
    # applied on time (measured: a few ms), or later only where the verdict says so
    late = (reconf.t_applied - reconf.t_planned).abs()
    assert late.max() <= fidelity.Thresholds().change_late_max or \
        "link_changes" in fidelity.verdict(d)["failed"], late.tolist()


# No reconfiguration (and no handover outage) within a short run: the first instant is far out.
LEO_STATIC = {"dynamics": {"align": "start", "offset": "1000s"}}


@pytest.mark.nightly
def test_leo_rate_and_rtt(tmp_path, no_hystart, base_rtt):
    # The profile's initial 80 Mbit/s down and 15 ms each way, with the 1 % loss off (Mathis)
    override = dict(LEO_STATIC, down={"loss": 0}, up={"loss": 0})
    rate = profiles.load("leo", override).down.rate * PAYLOAD
    d, man, got = run_for_rate(tmp_path, "leo", [Flow(cca="cubic", start=2, duration=6)],
                               (4, 8.2), rate, override=override, ss=False)
    assert results.load(d, "changes").empty
    assert near(idle_rtt(d, 1.9), 30.0 + base_rtt)
    assert man["profile"]["down"]["rate"] * PAYLOAD == rate
    assert_link_rate(d, got, rate, (4, 8.2))


@pytest.mark.nightly
def test_leo_loss(tmp_path):
    # 1 % on the data direction: 90,000 datagrams of 64 bytes give a relative standard error
    # near 3 %, so 10 % is about 3 sigma.  The link's loss is counted where it happens, by the
    # netem qdisc on the router's egress (drops against packets it saw): at ~14,000 datagrams/s
    # the software-emulated VM itself loses a few tenths of a percent more end to end (receiver
    # socket and backlog overflows), which is not the profile's loss (starlink-seed's probe, at
    # half this packet rate, checks the end-to-end figure).
    # The flow is sized, not timed: a slow host's emulated sender makes fewer datagrams a second
    # (34,000 in 7 s, once), and it then takes longer to send them all.  netem's drops count its
    # tail drops too: its limit is sized for full-size packets (500 here), and a starved
    # sender's bursts of small datagrams overflowed it (1.78 % dropped on a loaded host), so
    # this run gives netem room for any burst and its drops are the profile's loss alone.
    d, man = run(tmp_path, "leo",
                 [Flow(cca="cubic", protocol="udp", rate="7mbit", length=64, bytes=90_000 * 64)],
                 override=dict(LEO_STATIC, down={"limit": 100_000}), ping=False, ss=False)
    assert man["profile"]["down"]["loss"] == 1.0
    lost, sent = udp_loss(d, 1)
    assert sent >= 90_000, sent
    assert_netem_loss(d, "cc-r1-core", lost, sent, percent=1.0)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_interrupt_leaves_nothing_behind(tmp_path, sig, code):
    spec = tmp_path / "long.toml"
    spec.write_text('profile = "wired"\n[[flow]]\ncca = "cubic"\nduration = "60s"\n')
    env = dict(os.environ, PYTHONPATH=str(KIT_DIR))
    p = subprocess.Popen([sys.executable, "-m", "cclab", "run", str(spec), "--out",
                          str(tmp_path / "res")], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", "iperf3 -c"], capture_output=True).returncode == 0:
            break
        time.sleep(0.2)
    else:
        p.kill()
        pytest.fail("the flow never started")
    time.sleep(2)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    assert state.kit_shells() == {}
    assert subprocess.run(["pgrep", "-x", "iperf3"], capture_output=True).returncode == 1
    links = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout
    assert not [l for l in json.loads(links) if l["ifname"].startswith("cc-")]
    assert not state.state_file().exists()
    (run_dir,) = results.runs(tmp_path / "res")
    man = results.read_manifest(run_dir)
    assert man["status"] == "incomplete" and "interrupted" in man["error"]
    assert len(results.load(run_dir, "ss")) > 0          # partial results are kept


def test_clean_after_a_killed_run(tmp_path):
    """SIGKILL gives the runner no chance to clean up: `cclab clean` must."""
    spec = tmp_path / "long.toml"
    spec.write_text('profile = "wired"\n[[flow]]\ncca = "cubic"\nduration = "60s"\n'
                    '[measure]\ncapture = true\n')
    env = dict(os.environ, PYTHONPATH=str(KIT_DIR))
    p = subprocess.Popen([sys.executable, "-m", "cclab", "run", str(spec), "--out",
                          str(tmp_path / "res")], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while subprocess.run(["pgrep", "-f", "iperf3 -c"], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, "the flow never started"
        time.sleep(0.2)
    time.sleep(2)
    p.kill()
    p.wait()
    assert state.kit_shells() or subprocess.run(["pgrep", "-x", "iperf3"], capture_output=True).returncode == 0
    r = subprocess.run([sys.executable, "-m", "cclab", "clean"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert state.kit_shells() == {}
    assert subprocess.run(["pgrep", "-x", "iperf3"], capture_output=True).returncode == 1
    assert subprocess.run(["pgrep", "-x", "tcpdump"], capture_output=True).returncode == 1
    links = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout
    assert not [l for l in json.loads(links) if l["ifname"].startswith("cc-")]
    assert not state.state_file().exists()
    assert not os.path.exists("/sys/kernel/tracing/instances/cclab")
    (run_dir,) = results.runs(tmp_path / "res")
    assert results.read_manifest(run_dir)["status"] == "incomplete"
    assert (run_dir / "raw" / "capture-cc-s1.pcap").stat().st_size > 0
    again = subprocess.run([sys.executable, "-m", "cclab", "clean"], env=env,
                           capture_output=True, text=True)
    assert again.returncode == 0 and "nothing left" in again.stdout


@pytest.mark.nightly
def test_one_host_flows_with_different_ccas(tmp_path):
    """Three flows from one sender host, each with its own congestion control (iperf3 -C); the
    host's default is the first flow's, which iperf3's control connections also use: the
    sampler must count only the data connections.  The modules' tracepoints are recorded."""
    flows = [Flow(cca=c, start=0.5, duration=4) for c in ("cubic", "spline", "search")]
    d, man = run(tmp_path, "wired", flows,
                 events=["spline:spline_mode", "search:search_exit"])
    assert man["sysctls"]["cc-s1"]["net.ipv4.tcp_congestion_control"] == "cubic"
    fl = results.load(d, "flows")
    assert list(fl.sender) == ["cc-s1"] * 3
    assert list(fl.cca_iperf) == ["cubic", "spline", "search"]
    assert list(fl.cca_ss) == ["cubic", "spline", "search"]
    ss = results.load(d, "ss")
    for i, cca in enumerate(("cubic", "spline", "search"), 1):
        rows = ss[ss.flow == i]
        assert len(set(rows.local_port)) == 1          # the data connection only
        # iperf3 sets -C after connect() and its cookie: only those may run the host's default
        sending = rows[[measure.sent_payload(r) for _, r in rows.iterrows()]]
        assert len(sending) > 20 and set(sending.cca) == {cca}, (i, set(sending.cca))
        assert set(rows.cca) <= {cca, "cubic"}
    spline = results.load(d, "spline")
    assert len(spline) >= 1 and set(spline.flow) == {2}, spline
    assert set(spline.old) | set(spline.new) <= {"START_PROBE", "PROBE_BW", "PROBE_RTT",
                                                  "DRAIN_PROBE"}
    search = results.load(d, "search")
    assert len(search) >= 1 and set(search.flow) == {3}, search
    assert set(search.reason) <= {"search", "hystart", "loss"}


def test_tracing_does_not_rewrite_the_schedulers_code(tmp_path):
    """tracefs' record-cmd is off from boot (vm/run.sh's kernel line) and stays off through a
    run that traces tcp_probe: with it on, each run's enabling and disabling of its events
    rewrote __schedule under the other vCPU, which froze a guest (measure.no_cmdline_recording)."""
    flag = os.path.join(measure.tracefs(), "options", "record-cmd")
    with open(flag) as f:
        assert f.read().strip() == "0"
    d, man = run(tmp_path, "wired", [Flow(cca="cubic", duration=2)], tcp_probe=True)
    assert len(results.load(d, "probe")) > 0
    with open(flag) as f:
        assert f.read().strip() == "0"


@pytest.mark.nightly
def test_a_kept_network_gives_each_run_its_own_settings(tmp_path):
    """Runs inside runner.keep_network() share a network when its shape allows: the second
    run takes the first's node shells, with its own qdiscs (the first run's loss gone, the
    counters starting again from zero) and its own sysctls, and the tcp_probe tracing instance
    the first left (events off), emptied: each run's probe table holds its own flow only; a run
    of another shape (two pairs) builds a network of its own and the first one goes; the
    block's end leaves nothing, tracing instance included."""
    def exp(name, cca, override, pairs=1, rto_min=None):
        return Experiment(name=name, profile="wired", override=dict(override, pairs=pairs),
                          flows=[Flow(cca=cca, duration=2, pair=p) for p in range(1, pairs + 1)],
                          measure=Measure(tcp_probe=True, ping_interval=0.1, cpu=False), tail=0.5,
                          rto_min=rto_min)

    def shells():
        return set(state.kit_shells())

    def in_node(node, *argv):
        """A command's output in the node's namespace (through its node shell)."""
        (pid,) = [p for p, name in state.kit_shells().items() if name == node]
        return subprocess.run(["nsenter", "-t", str(pid), "-n", *argv],
                              capture_output=True, text=True, check=True).stdout.strip()

    def sender_route():
        return in_node("cc-s1", "ip", "route", "show", "default")

    def loss_of(man):
        qs = man["tc"]["cc-r1"]["cc-r1-core"]["qdisc"] + man["tc"]["cc-r2"]["cc-r2-core"]["qdisc"]
        return [q.get("options", {}).get("loss-random") for q in qs if q["kind"] == "netem"]

    inst = os.path.join(measure.tracefs(), "instances", "cclab")
    with runner.keep_network():
        (a,) = runner.run(exp("keep-a", "reno", {"down": {"loss": 2}}), out=tmp_path)
        first_shells = shells()
        assert "rto_min" not in sender_route()
        with open(os.path.join(inst, "events/tcp/tcp_probe/enable")) as f:
            assert f.read().strip() == "0"          # kept for the next run, its events off
        (b,) = runner.run(exp("keep-b", "cubic", {"down": {"loss": 0}}, rto_min=5), out=tmp_path)
        assert shells() == first_shells and first_shells
        # the receiver's settings did not change, so run b left it alone (topo.settings_scripts):
        # its record is still what the node has
        live = in_node("cc-c1", "sysctl", "-n", "net.ipv4.tcp_congestion_control",
                       "net.ipv4.tcp_rmem")
        mb_rcv = results.read_manifest(b)["sysctls"]["cc-c1"]
        assert live.splitlines() == [mb_rcv["net.ipv4.tcp_congestion_control"],
                                     mb_rcv["net.ipv4.tcp_rmem"]], (live, mb_rcv)
        # rto_min is a run's setting: set on the kept network, then taken away by the next run
        route = sender_route()
        print(f"\nafter a run with rto_min 5 s: {route}")
        assert re.search(r"\brto_min (lock )?(5s|5000ms)\b", route), route
        (b2,) = runner.run(exp("keep-b2", "cubic", {"down": {"loss": 0}}), out=tmp_path)
        assert shells() == first_shells and "rto_min" not in sender_route(), sender_route()
        (c,) = runner.run(exp("keep-c", "reno", {"down": {"loss": 0}}, pairs=2), out=tmp_path)
        assert not shells() & first_shells and len(shells()) == 6
        assert state.state_file().exists()          # the machine stays claimed
    ma, mb, mc = (results.read_manifest(d) for d in (a, b, c))
    assert [m["status"] for m in (ma, mb, mc)] == ["complete"] * 3
    assert [m["network"] for m in (ma, mb, mc)] == ["built", "kept", "built"]
    assert results.read_manifest(b2)["network"] == "kept"
    assert {"loss": 0.02, "correlation": 0} in loss_of(ma) and loss_of(mb) == [None, None]
    assert [m["sysctls"]["cc-s1"]["net.ipv4.tcp_congestion_control"] for m in (ma, mb)] == [
        "reno", "cubic"]
    assert list(results.load(b, "flows").cca_ss) == ["cubic"]
    for d in (a, b):                                # b's tracer emptied the instance a left
        probe = results.load(d, "probe")
        print(f"\n{d.parent.name}: {len(probe)} tcp_probe rows, t from {probe.t.min():.3f} to "
              f"{probe.t.max():.3f} s")
        assert len(probe) > 100 and probe.t.min() >= 0 and set(probe.flow) == {1}
    assert not os.path.isdir(inst)
    qa, qb = (results.load(d, "qdisc") for d in (a, b))
    qa, qb = (q[q.kind == "htb"] for q in (qa, qb))
    data = qa.groupby("node").bytes.max().idxmax()         # the data direction's bottleneck
    qa, qb = (q[q.node == data] for q in (qa, qb))
    print(f"\nbottleneck htb bytes: run a ended at {qa.bytes.max()}, run b started at "
          f"{qb.bytes.iloc[0]} and ended at {qb.bytes.max()}")
    assert qb.bytes.iloc[0] < 0.1 * qa.bytes.max() and qb.bytes.max() > 1e6
    assert shells() == set() and not state.state_file().exists()
    assert subprocess.run(["pgrep", "-x", "iperf3"], capture_output=True).returncode == 1
    links = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout
    assert not [l for l in json.loads(links) if l["ifname"].startswith("cc-")]


@contextmanager
def servers_that_never_listen(monkeypatch):
    """Inside: a run fails while it starts its iperf3 servers (after its network and tracer)."""
    from cclab import measurements

    def broken(self, run, listen_timeout=10.0):
        raise measurements.MeasurementError("a server that never listens")
    with monkeypatch.context() as m:
        m.setattr(measurements.Iperf, "start", broken)
        yield


def test_a_failed_run_takes_its_kept_network_down(tmp_path, monkeypatch):
    """A run that fails inside keep_network does not hand its network on, nor the tcp_probe
    tracing instance kept with it: the next run builds new ones."""
    e = Experiment(name="keep-fail", profile="wired", flows=[Flow(cca="cubic", duration=1)],
                   measure=Measure(tcp_probe=True, ping_interval=0.1, cpu=False), tail=0.5)
    inst = os.path.join(measure.tracefs(), "instances", "cclab")
    with runner.keep_network():
        runner.run(e, out=tmp_path / "1")
        before = set(state.kit_shells())
        assert os.path.isdir(inst)
        with servers_that_never_listen(monkeypatch):
            with pytest.raises(runner.RunError, match="never listens"):
                runner.run(e, out=tmp_path / "2")
        assert state.kit_shells() == {} and not os.path.isdir(inst)
        (d,) = runner.run(e, out=tmp_path / "3")
        assert results.read_manifest(d)["network"] == "built" and os.path.isdir(inst)
        assert not set(state.kit_shells()) & before
    assert state.kit_shells() == {} and not state.state_file().exists()
    assert not os.path.isdir(inst)


def test_links_the_root_script_left_unmoved_are_deleted(tmp_path, monkeypatch):
    """The links are made in the machine's own namespace and then moved into their nodes, in one
    script.  A script that stops between the two (here: after every pair is made and set up, before
    the first move) fails the run with one line, and leaves no kit interface, namespace or shell."""
    from cclab import topo
    real = topo.root_script

    def stops_before_the_moves(profile, pids):
        lines = real(profile, pids).splitlines()
        moves = max(i for i, line in enumerate(lines) if line.startswith("ip -batch"))
        assert " netns " in lines[moves + 1]
        return "\n".join(lines[:moves] + ["echo 'stopped before the moves' >&2; exit 1"]) + "\n"
    monkeypatch.setattr(topo, "root_script", stops_before_the_moves)
    e = Experiment(name="root-fail", profile="wired", flows=[Flow(cca="cubic", duration=1)],
                   measure=Measure(tcp_probe=False, ping_interval=0.1, cpu=False), tail=0.5)
    with pytest.raises(topo.CommandFailed, match="making the links: stopped before the moves"):
        runner.run(e, out=tmp_path)
    assert state.leftover_interfaces() == [] and state.kit_shells() == {}
    assert not state.state_file().exists()


SWEEP = """name = "sweep"
profile = "wired"
repetitions = 2
[override]
pairs = 2
[measure]
tcp_probe = false
[[flow]]
cca = "cubic"
duration = "{d1}"
[[flow]]
cca = "reno"
pair = 2
start = "{s2}"
duration = "{d2}"
"""


@pytest.mark.nightly
def test_sweep_and_quick_with_two_pairs(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(KIT_DIR))
    cmd = [sys.executable, "-m", "cclab", "run"]
    spec = tmp_path / "sweep.toml"
    spec.write_text(SWEEP.format(d1="2s", s2="0.5s", d2="2s"))
    r = subprocess.run(cmd + [str(spec), "--out", str(tmp_path / "res")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    print(r.stderr)
    progress = [l for l in r.stderr.splitlines() if l.startswith("[run ")]
    assert [l.split("]")[0] for l in progress] == ["[run 1/2", "[run 2/2"]
    for line in progress:
        assert "elapsed" in line and "left" in line, line
    elapsed = progress[1].split("elapsed ")[1].split(",")[0]
    assert elapsed != "0:00"                     # the second run knows how long the first took
    assert "done: 2 run(s)" in r.stderr
    dirs = results.runs(tmp_path / "res" / "sweep")
    assert len(dirs) == 2 and all(str(x) in r.stdout.split() for x in dirs)
    for rep, d in enumerate(dirs, 1):
        man = results.read_manifest(d)
        assert man["status"] == "complete" and man["repetition"] == rep
        assert man["seed"] == rep
        assert man["network"] == ("built" if rep == 1 else "kept")   # runner.keep_network
        fl = results.load(d, "flows")
        assert list(fl.sender) == ["cc-s1", "cc-s2"] and list(fl.cca_ss) == ["cubic", "reno"]
        assert (fl.throughput_bps > 1e6).all()
    # --quick: one repetition, scaled to 10 s, both pairs
    spec.write_text(SWEEP.format(d1="20s", s2="4s", d2="12s"))
    r = subprocess.run(cmd + [str(spec), "--quick", "--out", str(tmp_path / "quick")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "[run 1/1]" in r.stderr
    (d,) = results.runs(tmp_path / "quick")
    man = results.read_manifest(d)
    assert man["status"] == "complete" and man["repetitions"] == 1
    fl = results.load(d, "flows")
    assert list(fl.duration) == [10.0, 6.0] and list(fl.start) == [0.0, 2.0]
    assert list(fl.sender) == ["cc-s1", "cc-s2"] and list(fl.cca_ss) == ["cubic", "reno"]

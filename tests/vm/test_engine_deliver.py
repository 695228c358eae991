"""What issue 4 asks the engine to deliver, checked on real runs in the lab VM (as root).

test_engine.py checks each profile's figures; this file checks how the engine builds links,
by looking inside running experiments (runwatch.Watch reads the namespaces while the run
lasts) and at the tables they leave:

  1. time-varying links change in place: netem's counters never go back, nothing queued
     vanishes, the backlog survives a change, and the fields not changed stay (tc -j);
  2. LEO: the rate re-drawn at each reconfiguration is the rate the bottleneck serves, and the
     handover's loss burst shows in netem's drop counter at each handover and nowhere else;
  3. delay and loss per direction: one-way delays measured in each direction (both
     namespaces share the kernel's clock), the up direction's loss and GEO's 5 Mbit/s up;
  4. TSO, GSO and GRO are off on every interface of a lossy path (ethtool -k in the run);
  5. per-namespace sysctls as read from /proc/sys inside the namespaces during the run;
  6. the tshark capture holds the flow's own packets: its 5-tuple, and as many bytes as
     iperf3 sent and the receiver acknowledged; tshark's shortcuts (payloads decoded as data,
     analyses a time-sequence graph does not read turned off) change no field of a lossy capture;
  7. the module event tables (spline.csv, search.csv): columns, times, states and values.

Each run is short and serves several tests (module-scoped fixtures).  Rates stay low (the
guest is software-emulated); tolerances are those measured in the VM, see each assertion.
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cclab import measure, results, tc, topo
from cclab.analysis import fidelity, tshark
from cclab.profiles import KIT_DIR
from cclab.spec import Experiment, Flow
from cclab.tc import LinkState

from runwatch import NsShell, Watch, in_ns, one_way, qdiscs, sysctl
from test_engine import (link_rate, near, once_more_if_udp_stalled, run, run_once, starved, trust,
                         udp_loss)


def watched_run(tmp_path_factory, watch, profile, flows, **kw):
    """(run folder, manifest, what the watcher saw) of one run made while a fresh `watch()`
    looked in; a run whose UDP flow never started is made again, with a new watcher.  A
    watcher that probes one-way delays (its result has `t_probed`, the time its probes ended)
    needs the path idle: if the first flow was already spawned by then (a slow guest takes
    longer to start the probes' interpreters), the run is made once more, and a second
    overlap fails.  Judged by order on the run's own clock, not by a time budget."""
    def attempt(_):
        with watch() as w:
            d, man = run_once(tmp_path_factory.mktemp(profile), profile, flows, **kw)
        return d, man, w.check()
    got = once_more_if_udp_stalled(attempt)
    if not probed_on_an_idle_path(got):
        print("\nrunning again: the delay probes were still running when the first flow started")
        got = once_more_if_udp_stalled(attempt)
        assert probed_on_an_idle_path(got), "the delay probes ran into the flows in two runs of two"
    return got


def probed_on_an_idle_path(got) -> bool:
    """Whether a watched run's delay probes (if it had any) ended before its first flow was
    spawned, both on the machine's clock (the run's t = 0 is its manifest's start_epoch)."""
    _, man, seen = got
    t_probed = seen.get("t_probed") if isinstance(seen, dict) else None
    if t_probed is None:
        return True
    first = min(f["t_spawn"] for f in man["flows"] if f.get("t_spawn") is not None)
    print(f"delay probes ended {t_probed - man['start_epoch']:.2f} s into the run, the first "
          f"flow was spawned at {first:.2f} s")
    return t_probed < man["start_epoch"] + first


def profile_of(profile, override):
    """The profile as the engine built it (with the experiment's override)."""
    return Experiment(name="x", profile=profile, override=override,
                      flows=[Flow(cca="cubic")]).link


def netem_of(qds):
    (q,) = [q for q in qds if q["kind"] == "netem"]
    return q


def netem_fields(q):
    """(delay s, loss fraction, limit packets) from tc -j qdisc show."""
    o = q["options"]
    return (o.get("delay", {}).get("delay", 0.0), o.get("loss-random", {}).get("loss", 0.0),
            o["limit"])


def warm_up(nodes):
    """One ping each way resolves every neighbour on the path before delays are measured."""
    in_ns(nodes["cc-c1"], "ping", "-n", "-c", "2", "-i", "0.3", "-W", "3", "10.0.1.2",
          check=False)


def both_ways(nodes, n=30, gap=0.02):
    """One-way delays {direction: [s, ...]} measured at the same time in both directions."""
    out = {}

    def probe(direction, src, dst, addr, port):
        out[direction] = list(one_way(nodes[src], nodes[dst], addr, n=n, gap=gap, port=port,
                                      idle=1.5).values())
    threads = [threading.Thread(target=probe, args=("down", "cc-s1", "cc-c1", "10.1.1.2", 6997)),
               threading.Thread(target=probe, args=("up", "cc-c1", "cc-s1", "10.0.1.2", 6998))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


# ---------------------------------------------------------------- 1 and 2: LEO changes

# Reconfigurations at 2.5, 4.5, 6.5 and 8.5 s (each after a 40 ms handover outage), down
# rates re-drawn in 4-8 Mbit/s so that a 25 Mbit/s UDP stream keeps the down queue full
# (a slow host's guest did not make 40 Mbit/s of it: 17 packets queued where 15-30 was drawn;
# beside two CPU hogs it did not keep 8-16 full: 29 packets queued at one change);
# the profile's 1 % random loss stays on.  An up UDP probe at 1,250 datagrams/s, far below the
# up rate, makes each handover's loss burst countable; the up buffer is deep so that bursts
# of the probe's small datagrams (the guest stalls iperf3 now and then) never overflow
# netem's limit, which counts packets: every up drop is the profile's loss or a handover's.
# The first change comes 2.5 s in: on a slow host the flows' iperf3 clients take more than
# a second to start sending (no drop had been seen by 1.5 s, once).
LEO_OVERRIDE = {"dynamics": {"period": "2s", "offset": "2.5s", "align": "start",
                             "down_rate": ["4mbit", "8mbit"]},
                "up": {"buffer": 1000}}
LEO_LENGTH = 10
QDISC_HZ = 25          # the engine's own record of the qdiscs, fine enough around a 40 ms outage
PROBE_PPS = 2e6 / (200 * 8)     # the probe's 2 Mbit/s of 200-byte datagrams


def leo_watch(nodes):
    """tc -s -j qdisc show of both core interfaces, each on its own thread through a shell
    kept open in its router, every 0.1 s plus the time a read takes, while the run lasts."""
    t_ready = time.time()
    out, errors = {"down": [], "up": []}, []

    def watch(direction, node, dev):
        try:
            with NsShell(nodes[node]) as sh:
                while time.time() < t_ready + LEO_LENGTH - 0.3:  # stop before the run's cleanup
                    t = time.time()
                    q = netem_of(qdiscs(nodes[node], dev, sh))
                    out[direction].append((t, time.time(), q))   # read between these instants
                    time.sleep(0.1)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=watch, args=("down", "cc-r1", "cc-r1-core")),
               threading.Thread(target=watch, args=("up", "cc-r2", "cc-r2-core"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


@pytest.fixture(scope="module")
def leo(tmp_path_factory):
    # The probe starts first: its iperf3 control connection would otherwise wait behind the
    # flood's full down queue (the first handover saw the probe lose 1-4 datagrams, not ~25).
    flows = [Flow(cca="cubic", protocol="udp", rate="25mbit", length=1400, start=1,
                  duration=LEO_LENGTH - 1),
             Flow(cca="cubic", protocol="udp", rate="2mbit", length=200, direction="up",
                  duration=LEO_LENGTH)]
    d, man, snaps = watched_run(tmp_path_factory, lambda: Watch(leo_watch), "leo", flows,
                                override=LEO_OVERRIDE, ping=False, ss=False, qdisc_hz=QDISC_HZ)
    t0 = man["start_epoch"]
    snaps = {k: [(round(a - t0, 3), round(b - t0, 3), q) for a, b, q in v]
             for k, v in snaps.items()}
    ch = results.load(d, "changes")
    print(ch.to_string())
    return d, man, snaps, ch


def pairs_of(ch, direction, outage=0.04):
    """[(handover row, reconfigure row)] of one direction, in time order."""
    h = ch[(ch.direction == direction) & (ch.why == "handover")]
    out = []
    for r in ch[(ch.direction == direction) & (ch.why == "reconfigure")].sort_values(
            "t_planned").itertuples():
        (hr,) = [x for x in h.itertuples() if abs(x.t_planned + outage - r.t_planned) < 1e-3]
        out.append((hr, r))
    assert len(out) >= 3, ch
    return out


@pytest.mark.nightly
def test_link_changes_keep_counters_and_queue(leo):
    d, man, snaps, ch = leo
    down = snaps["down"]
    pairs = pairs_of(ch, "down")
    # Changes with a read done before them and one begun after them: the reads in between are
    # checked pairwise below, so a reset at the change would show.  (How many reads there are
    # depends on the guest's speed: 9 in a run beside two CPU hogs on the host, where a tc
    # read took up to a second; the changes are 2 s apart.)
    straddled = [r.t_applied for h, r in pairs
                 if any(end < h.t_applied for _, end, _ in down)
                 and any(start > r.t_applied for start, _, _ in down)]
    assert len(straddled) >= 2, ("too few changes with a read either side", straddled, down)
    # Nothing queued vanishes and no counter restarts: a deleted and re-added (or replaced)
    # qdisc would start again from zero and drop its queue uncounted.
    # (The kernel reads the packet counter a moment before the queue length, so a dequeue in
    # between can hide a packet or two from one snapshot: a few packets of slack.)
    for (ta, _, a), (tb, _, b) in zip(down, down[1:]):
        assert b["packets"] >= a["packets"] and b["drops"] >= a["drops"], (ta, a, tb, b)
        seen_a = a["packets"] + a["drops"] + a["qlen"]
        seen_b = b["packets"] + b["drops"] + b["qlen"]
        assert seen_b >= seen_a - 10, (ta, a, tb, b)
    # A reset would show only after drops: some change must come after the counter grew (the
    # first one did on a quiet host; beside two CPU hogs the flood had not overflowed the queue
    # by 2.5 s, and the later changes showed it).  That change must also be one of those with
    # a read after it: a grown counter with nothing read after the change tells nothing.
    telling = [r.t_applied for h, r in pairs
               if any(end < h.t_applied and q["drops"] > 0 for _, end, q in down)
               and any(start > r.t_applied for start, _, _ in down)]
    assert telling, ("no change with drops counted before it and a read after it: a reset "
                     "would not show", straddled, down)
    # The engine's own record (rtnetlink, in its process, QDISC_HZ) agrees: netem's drop
    # counter only grows.
    q = results.load(d, "qdisc")
    q = q[(q.dev == "cc-r1-core") & (q.kind == "netem")].sort_values("t")
    assert len(q) > 5 * LEO_LENGTH and (q.drops.diff().dropna() >= 0).all()
    # The backlog survives each change: after the first one the queue is full (25 Mbit/s
    # into 4-8) and a change keeps it; only the 40 ms outage and the time between two
    # samples of the record pass in between.  (tc's reads are too far apart for this on a slow
    # host: none fell within 0.4 s around a change in one run.)
    checked = 0
    for h, r in pairs[1:]:
        pre, post = q[q.t < h.t_applied].tail(1), q[q.t > r.t_applied + 0.02].head(1)
        if not len(pre) or not len(post) or post.t.iloc[0] - pre.t.iloc[0] > 0.25:
            continue
        (t1, n1), (t2, n2) = [(x.t.iloc[0], x.backlog_packets.iloc[0]) for x in (pre, post)]
        print(f"change at {r.t_applied:.3f} s: backlog {n1} packets at {t1:.3f} s, "
              f"{n2} at {t2:.3f} s")
        assert n1 >= 100, (t1, n1)
        assert n2 >= 0.5 * n1, (t1, n1, t2, n2)
        checked += 1
    assert checked >= 2, "too few samples around the changes"


@pytest.mark.nightly
def test_link_changes_keep_other_netem_fields(leo):
    d, man, snaps, ch = leo
    prof = profile_of("leo", LEO_OVERRIDE)
    bufs = topo.buffers(prof)
    checked = 0
    for direction in ("down", "up"):
        pairs = pairs_of(ch, direction)
        dirn = getattr(prof, direction)
        loss = dirn.loss / 100
        initial = [q for _, t, q in snaps[direction] if t < pairs[0][0].t_applied]
        assert initial, direction
        want0 = (dirn.delay, loss, tc.netem_limit(dirn, LinkState.of(dirn), bufs[direction]))
        assert netem_fields(initial[-1]) == pytest.approx(want0, abs=1e-5), direction
        for i, (h, r) in enumerate(pairs):
            end = pairs[i + 1][0].t_applied if i + 1 < len(pairs) else 1e9
            after = [q for a, b, q in snaps[direction] if a > r.t_applied + 0.02 and b < end]
            if not after:
                continue
            want = (r.delay_s, loss,
                    tc.netem_limit(dirn, LinkState(r.rate_bps, r.delay_s, dirn.loss),
                                   bufs[direction]))
            got = netem_fields(after[0])
            print(f"{direction} after the change at {r.t_applied:.3f} s: delay, loss, limit "
                  f"{got}, expected {want}")
            # the re-drawn delay and the limit that goes with it; the loss as before
            assert got == pytest.approx(want, abs=1e-5), (direction, r)
            assert len({json.dumps(q["options"], sort_keys=True) for q in after}) == 1
            checked += 1
    assert checked >= 4, checked


@pytest.mark.nightly
def test_leo_rate_redrawn_at_each_reconfiguration(leo):
    d, man, snaps, ch = leo
    pairs = pairs_of(ch, "down")
    rates = [r.rate_bps for _, r in pairs]
    print("drawn down rates (Mbit/s):", [x / 1e6 for x in rates])
    assert all(4e6 <= x <= 8e6 for x in rates)
    assert len(set(rates)) == len(rates) and max(rates) / min(rates) > 1.15
    # A starved guest serves below the rate it was given (htb's timers fire late): 22.7 % below
    # beside two CPU hogs on the host.  The kit's fidelity verdict says when that happened; then
    # only the ceiling is judged (a slow guest never serves faster than the rate in force, so a
    # rate left at a higher previous draw still fails).
    v = fidelity.verdict(d)
    behind = starved(d, v)
    if behind:
        print(f"the emulator fell behind ({', '.join(sorted(behind))}): {trust(d, v)}")
    measured = 0
    for i, (h, r) in enumerate(pairs):
        end = pairs[i + 1][0].t_applied if i + 1 < len(pairs) else LEO_LENGTH
        a, b = r.t_applied + 0.3, end - 0.1
        if b - a < 1.5:
            continue
        got = link_rate(d, "down", a, b)
        print(f"{a:.2f}-{b:.2f} s: ", end="")
        # measured -0.1 % to -8.6 % (four passes at 15-30 Mbit/s); 15 % still tells the draws apart
        # (6.0 Mbit/s between 7.4 and 7.2): a rate left at the previous draw fails
        close = near(got, r.rate_bps, 0.15)
        assert got <= 1.05 * r.rate_bps, (a, b, got, r.rate_bps)
        assert close or behind, (a, b, got, r.rate_bps, trust(d, v))
        measured += 1
    assert measured >= 2


def arrivals(x):
    """Packets a netem qdisc has been offered so far (sent, dropped or queued)."""
    return x.packets + x.drops + x.backlog_packets


@pytest.mark.nightly
def test_leo_handover_loss_burst(leo):
    """Up: the probe (1,250 datagrams/s) loses 1 % at random, and all of it during each 40 ms
    handover outage: netem's drop counter jumps there and only there."""
    d, man, snaps, ch = leo
    q = results.load(d, "qdisc")
    q = q[(q.dev == "cc-r2-core") & (q.kind == "netem")].sort_values("t").reset_index()
    assert len(q) > 50
    bursts, windows = [], []
    for h, r in pairs_of(ch, "up"):
        if r.t_applied > LEO_LENGTH - 0.3:
            continue
        pre = q[q.t < h.t_applied]
        post = q[q.t > r.t_applied + 0.05]
        if pre.empty or post.empty:
            continue
        a, b = pre.iloc[-1], post.iloc[0]
        outage = r.t_applied - h.t_applied
        dropped = b.drops - a.drops
        windows.append((a.t, b.t))
        # A burst is judged only where the probe was reaching the link just before it: on a
        # slow host iperf3's client had not yet sent a datagram at the first handover, 2.5 s
        # in (1 dropped where 21 were expected, then 52-66 at the next three).
        before = q[(q.t >= a.t - 0.3) & (q.t <= a.t)]
        offered = (arrivals(before.iloc[-1]) - arrivals(before.iloc[0])) / 0.3 if len(before) > 1 \
            else 0.0
        expected = PROBE_PPS * outage + 0.01 * PROBE_PPS * (b.t - a.t)
        print(f"handover at {h.t_applied:.3f} s ({outage * 1000:.1f} ms): {dropped} dropped "
              f"between {a.t:.2f} and {b.t:.2f} s, expected about {expected:.0f}; "
              f"{offered:.0f} datagrams/s offered in the 0.3 s before")
        if offered < 0.5 * PROBE_PPS:
            print("  not judged: the probe was not sending yet")
            continue
        # nor where the guest stalled the probe across the handover (what it sends late passes)
        during = arrivals(b) - arrivals(a)
        if during < 0.5 * PROBE_PPS * (b.t - a.t):
            print(f"  not judged: the probe offered {during} datagrams in the window")
            continue
        bursts.append((dropped, expected, during))
    assert len(bursts) >= 2
    # How many datagrams fall into a 40 ms outage depends on when the emulated guest lets the
    # probe send: measured 0.85-1.7 times the count the applied instants give, once 0.49
    # (25 of 51: the probe stalled inside the outage and sent late, after it), and once 0.31
    # (14 of 45 at the first handover, 2.5 s into a CI run of 28 Nov 2026; the next three 0.96-
    # 1.06).  So each burst is judged against what 1 % random loss could drop from the datagrams
    # offered in its window (a handover that dropped nothing leaves about that: 1.5 of 152 in
    # that window, and 5 times it, 7.6, is beyond what 1 % loss gives once in thousands of
    # windows), and against a loss left at 100 % (the upper bound); the outages' length is
    # judged over all the bursts together.  Beside two CPU hogs on the host, one burst dropped 1
    # of 213 datagrams offered in its window, where 92 fell in the outage's applied instants:
    # the probe did not run during the outage and sent its datagrams after it.  A stall just
    # before a short outage does the opposite: what the probe held back arrives inside it.  So
    # the bursts together are held to the outages' length from both sides, and at least one
    # burst alone to the lower bound (a handover that drops nothing fails all of these; a loss
    # left at 100 % fails the upper bound and the steady rate below).
    above = sum(dropped >= 5 * 0.01 * during for dropped, _, during in bursts)
    total, want = sum(b[0] for b in bursts), sum(b[1] for b in bursts)
    print(f"all judged handovers: {total} dropped, about {want:.0f} expected ({total / want:.2f}x); "
          f"{above} of {len(bursts)} bursts each beyond what 1 % loss gives")
    assert above >= 1 and 0.5 * want <= total <= 3 * want + 10 * len(bursts), (above, total, want)
    # outside the handovers: the profile's 1 % only
    steady = q[(q.t > 0.3) & (q.t < LEO_LENGTH - 0.3)]
    for a, b in windows:
        steady = steady[(steady.t < a - 0.05) | (steady.t > b + 0.05)]
    rates = []
    for (_, x), (_, y) in zip(steady.iterrows(), steady.iloc[1:].iterrows()):
        if 0 < y.t - x.t < 0.2:
            rates.append((y.drops - x.drops) / (y.t - x.t))
    mean = statistics.mean(rates)
    print(f"steady drops: {mean:.1f}/s over {len(rates)} intervals, expected "
          f"{0.01 * PROBE_PPS:.1f}/s")
    # 1 % of 1,250/s is 12.5/s (measured 12.8-13.8); a loss left at 100 % (or reset to 0) fails
    assert len(rates) > 20 and 0.2 * 0.01 * PROBE_PPS < mean < 0.05 * PROBE_PPS


# ---------------------------------------------------------------- 3: GEO up direction

GEO_START = 7


def geo_watch(nodes):
    warm_up(nodes)
    delays = both_ways(nodes)
    return {"delays": delays, "t_probed": time.time()}


@pytest.fixture(scope="module")
def geo(tmp_path_factory):
    flows = [Flow(cca="cubic", protocol="udp", rate="8mbit", length=1400, direction="up",
                  start=GEO_START, duration=6),
             Flow(cca="cubic", protocol="udp", rate="20mbit", length=1400, start=GEO_START,
                  duration=6)]
    d, man, seen = watched_run(tmp_path_factory, lambda: Watch(geo_watch, listener="cc-s1"),
                               "geo", flows, ping=False, ss=False)
    return d, man, seen["delays"]


@pytest.mark.nightly
def test_geo_one_way_delays(geo):
    d, man, delays = geo
    for direction in ("down", "up"):
        got = delays[direction]
        assert len(got) >= 20, (direction, len(got))
        print(f"{direction}: one-way median {statistics.median(got) * 1000:.2f} ms over "
              f"{len(got)} datagrams")
        assert near(statistics.median(got), 0.300, 0.05)
        assert min(got) >= 0.300


@pytest.mark.nightly
def test_geo_up_rate(geo):
    d, man, delays = geo
    # GEO's 5 Mbit/s up, offered 8 Mbit/s: the up netem's queue overflows (the shaper, not the
    # sender, sets the rate), and what leaves is at most the 5 Mbit/s (htb counts 1442-byte
    # frames; 5 % for the samples' edges), far from the 8 offered or the 50 down.  How far below:
    # htb loses the tokens of a timer that fires late, and the software-emulated guest's fire
    # late: 8-10 % below on a quiet host, 25 % on a busy one (3.76 Mbit/s), so 40 % at most.
    a, b = GEO_START + 2.5, GEO_START + 5.8
    q = results.load(d, "qdisc")
    up = q[(q.direction == "up") & (q.kind == "netem")].sort_values("t")
    assert up.drops.iloc[-1] > 0, "the up queue never overflowed: the sender fell short of 5 Mbit/s"
    print("up: ", end="")
    got = link_rate(d, "up", a, b)
    near(got, 5e6)
    assert 0.6 * 5e6 <= got <= 1.05 * 5e6, got
    # the down direction at its own 50 Mbit/s: 20 Mbit/s of 1400-byte datagrams pass whole
    # (1442 bytes a frame).  What it serves is what the down stream's emulated sender makes:
    # 8.8 % short on a quiet host, more on a busy one, so 25 %: still 3x the up direction's 5.
    print("down: ", end="")
    assert near(link_rate(d, "down", a, b), 20e6 * 1442 / 1400, 0.25)


# ---------------------------------------------------------------- 3-6: an asymmetric lossy path

# down: 5 ms, no loss, a deep buffer (Reno's bursts must not overflow it); up: 25 ms, 5 % loss
# and a deep buffer too: on a slow host iperf3 sends its small datagrams in bursts after each
# stall, and netem's limit counts packets (8.75 % of the up packets were dropped, once, with
# the profile's 1 BDP of full-size packets)
ASYM_OVERRIDE = {"down": {"delay": "5ms", "loss": 0, "buffer": 1000},
                 "up": {"delay": "25ms", "loss": 5, "buffer": 4000}}
ASYM_START = 10
UP_DATAGRAMS = 30_000


def asym_watch(nodes):
    prof = profile_of("wired", ASYM_OVERRIDE)
    out = {"ethtool": {}, "sysctl": {}}
    # the delay probes first: they need the path idle, the settings read below do not (a
    # slow guest once spent more than ASYM_START reading them first, and the probes met the flows)
    warm_up(nodes)
    out["delays"] = both_ways(nodes, n=60)
    out["t_probed"] = time.time()
    for node, devs in topo.interfaces(prof).items():
        for dev in devs:
            text = in_ns(nodes[node], "ethtool", "-k", dev)
            out["ethtool"][(node, dev)] = dict(
                (k.strip(), v.split()[0]) for k, _, v in
                (line.partition(":") for line in text.splitlines()[1:]) if v.strip())
    # each interface's receive steering, read from the node's own sysfs (as the engine set it)
    out["rps"] = {}
    for node, devs in topo.interfaces(prof).items():
        text = in_ns(nodes[node], "unshare", "-m", "sh", "-c",
                     "umount -l /sys && mount -t sysfs sysfs /sys && "
                     + " && ".join(f"cat /sys/class/net/{d}/queues/rx-0/rps_cpus" for d in devs))
        out["rps"].update({(node, d): int(m.replace(",", ""), 16)
                           for d, m in zip(devs, text.split())})
    for node in topo.hosts(prof):
        out["sysctl"][node] = {k: sysctl(nodes[node], k) for k in SYSCTLS}
    for node in (topo.R1, topo.R2):
        out["sysctl"][node] = {"net.ipv4.ip_forward": sysctl(nodes[node], "net.ipv4.ip_forward")}
    # the size of the node's own TCP socket table (negative: it shares the machine's)
    out["ehash"] = {node: int(sysctl(pid, "net.ipv4.tcp_ehash_entries")) for node, pid in nodes.items()}
    return out


SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")


@pytest.fixture(scope="module")
def asym(tmp_path_factory):
    # Flow 1: Reno, rate-capped far below the down link (no queue overflow), captured on its
    # sender; flow 2: 30,000 64-byte UDP datagrams up, ~5,900/s (5 s; longer on a slow host,
    # whose emulated sender made 23,500 in 5 s once), to count the up loss.
    flows = [Flow(cca="reno", rate="10mbit", start=ASYM_START, duration=4),
             Flow(cca="cubic", protocol="udp", rate="3mbit", length=64, direction="up",
                  start=ASYM_START, bytes=UP_DATAGRAMS * 64)]
    root = {k: Path("/proc/sys/" + k.replace(".", "/")).read_text().split() for k in SYSCTLS}
    root["child_ehash"] = Path(topo.CHILD_EHASH).read_text().split()
    d, man, seen = watched_run(tmp_path_factory, lambda: Watch(asym_watch), "wired", flows,
                               override=ASYM_OVERRIDE, ping=False, capture=True)
    root["child_ehash_after"] = Path(topo.CHILD_EHASH).read_text().split()
    return d, man, seen, root


def test_per_direction_delay(asym):
    d, man, seen, root = asym
    med = {}
    for direction, want in (("down", 0.005), ("up", 0.025)):
        got = seen["delays"][direction]
        assert len(got) >= 40, (direction, len(got))
        med[direction] = statistics.median(got)
        print(f"{direction}: one-way median {med[direction] * 1000:.3f} ms (min "
              f"{min(got) * 1000:.3f}) over {len(got)} datagrams, profile {want * 1000:g} ms")
        assert min(got) >= want
        # the guest adds about a millisecond per direction at most (see the print)
        assert med[direction] <= want + 0.003, direction
    assert 0.018 <= med["up"] - med["down"] <= 0.022


def test_per_direction_loss(asym):
    d, man, seen, root = asym
    q = results.load(d, "qdisc")
    last = {dev: q[(q.dev == dev) & (q.kind == "netem")].sort_values("t").iloc[-1]
            for dev in ("cc-r1-core", "cc-r2-core")}
    up, down = last["cc-r2-core"], last["cc-r1-core"]
    seen_up = up.packets + up.drops + up.backlog_packets
    print(f"up netem: {up.drops} dropped of {seen_up}; down netem: {down.drops} dropped of "
          f"{down.packets + down.drops}")
    # Netem's drop fraction over what it was offered: 4 standard errors of a 5 % binomial
    # over that count (30,000 datagrams and Reno's ACKs: 11 %).  A busy host's guest loses some
    # datagrams before netem sees them (30,924 packets with about 1,700 ACKs among them, once),
    # which changes the count, not the fraction; half the datagrams still judge it within 16 %.
    assert seen_up > 0.5 * UP_DATAGRAMS, seen_up
    assert near(100 * up.drops / seen_up, 5.0, 4 * ((1 - 0.05) / (0.05 * seen_up)) ** 0.5)
    assert down.drops == 0 and down.packets > 2000
    lost, sent = udp_loss(d, 2)
    assert lost >= 0.95 * up.drops * sent / seen_up       # what netem dropped never arrived
    # End to end, iperf3 also counts what a starved guest drops outside netem (the router's
    # input backlog, the receiving socket): 6.5 % once on a busy host, 11.9 % beside two CPU
    # hogs, where netem dropped 5.1 % both times.  That depends on the host's speed, so the
    # loss applied twice on the way is judged where it would be set: the engine's snapshot of
    # every qdisc on every node holds one lossy netem, on the up direction's bottleneck, at 5 %.
    print(f"end to end: {100 * lost / sent:.2f} % lost, netem {100 * up.drops / seen_up:.2f} %")
    lossy = [(node, dev, q["options"]["loss-random"]["loss"])
             for node, devs in man["tc"].items() for dev, got in devs.items()
             for q in got["qdisc"] if q.get("kind") == "netem"
             and q.get("options", {}).get("loss-random", {}).get("loss", 0) > 0]
    assert lossy == [(topo.R2, "cc-r2-core", pytest.approx(0.05))], lossy
    fl = results.load(d, "flows")
    print("reno retransmissions:", fl.retransmits[0])


def test_offloads_off_on_a_lossy_path(asym):
    d, man, seen, root = asym
    prof = profile_of("wired", ASYM_OVERRIDE)
    want = sum(len(v) for v in topo.interfaces(prof).values())
    assert len(seen["ethtool"]) == want >= 6
    for (node, dev), feats in seen["ethtool"].items():
        for f in ("tcp-segmentation-offload", "generic-segmentation-offload",
                  "generic-receive-offload"):
            assert feats.get(f) == "off", (node, dev, f, feats.get(f))


def test_every_interface_steers_a_flow_to_one_cpu(asym):
    # RPS over every CPU on every interface of every node: a flow's packets keep their order
    # (topo.steering); the mask read in each node's own sysfs, not the machine's
    d, man, seen, root = asym
    prof = profile_of("wired", ASYM_OVERRIDE)
    every = (1 << os.cpu_count()) - 1
    print("rps_cpus per interface:", {f"{n}/{dev}": f"{m:x}" for (n, dev), m in seen["rps"].items()})
    assert set(seen["rps"]) == {(n, dev) for n, devs in topo.interfaces(prof).items() for dev in devs}
    assert all(m == every for m in seen["rps"].values()) and every >= 3


def test_sysctls_set_inside_the_namespaces(asym):
    d, man, seen, root = asym
    prof = profile_of("wired", ASYM_OVERRIDE)
    print("root namespace:", root)
    for node, cca in (("cc-s1", "reno"), ("cc-c1", "cubic")):
        want = topo.host_sysctls(prof, cca, {})
        got = seen["sysctl"][node]
        print(node, got)
        for k in SYSCTLS:
            assert got[k].split() == want[k].split(), (node, k, got[k], want[k])
            assert got[k].split() == man["sysctls"][node][k].split(), (node, k)
    # the namespaces differ from the root namespace the test runs in
    assert root["net.ipv4.tcp_congestion_control"] != ["reno"]
    assert root["net.ipv4.tcp_rmem"] != seen["sysctl"]["cc-s1"]["net.ipv4.tcp_rmem"].split()
    for r in (topo.R1, topo.R2):
        assert seen["sysctl"][r]["net.ipv4.ip_forward"] == "1"
    fl = results.load(d, "flows")
    assert fl.cca_ss[0] == "reno"


def test_each_node_has_its_own_small_socket_table(asym):
    # The socket sampler's dumps walk the whole table of a node's namespace: the engine gives
    # every node a small one of its own, and leaves the machine's setting as it found it.
    d, man, seen, root = asym
    print("tcp_ehash_entries per node:", seen["ehash"], "root:", root["child_ehash"],
          root["child_ehash_after"])
    assert seen["ehash"] == {n: topo.NODE_SOCKET_BUCKETS for n in seen["ehash"]}
    assert len(seen["ehash"]) == 4
    assert man["node_socket_buckets"] == topo.NODE_SOCKET_BUCKETS
    assert root["child_ehash_after"] == root["child_ehash"] != [str(topo.NODE_SOCKET_BUCKETS)]


def test_capture_holds_the_flow(asym):
    d, man, seen, root = asym
    doc = json.loads((d / "raw" / "iperf-1.json").read_text())
    (conn,) = doc["start"]["connected"]
    lport = conn["local_port"]
    assert conn["remote_port"] == 5201 and conn["local_host"] == "10.0.1.2"
    cap = tshark.read(d / "raw" / "capture-cc-s1.pcap")
    data = cap[(cap.src == "10.0.1.2") & (cap.sport == lport) & (cap.dst == "10.1.1.2")
               & (cap.dport == 5201)]
    acks = cap[(cap.src == "10.1.1.2") & (cap.sport == 5201) & (cap.dst == "10.0.1.2")
               & (cap.dport == lport)]
    fl = results.load(d, "flows")
    sent, received = int(fl.sent_bytes[0]), int(fl.received_bytes[0])
    segs = data[data.len > 0]
    top_seq = int((segs.seq + segs.len).max()) - 1
    top_ack = int(acks.ack.max()) - 1
    print(f"capture: {len(cap)} packets, flow 1 (port {lport}): {len(segs)} data segments "
          f"up to byte {top_seq}, {len(acks)} ACKs up to {top_ack}; iperf3 sent {sent}, "
          f"the receiver got {received}")
    assert segs.stream.nunique() == 1 and acks.stream.nunique() == 1
    assert set(segs.stream) == set(acks.stream)
    assert len(segs) >= 0.99 * sent / 1448
    assert segs.len.max() <= 1448                 # real segments: GSO is off
    assert near(top_seq, sent, 0.01)
    # iperf3's receiver counts what its application read before the test's end; the kernel
    # acknowledges what reached the socket, which can be more (ci failed once on 5,111,845
    # acknowledged of 5,111,808 sent against 5,051,688 read: 1.2 % still in the buffer). So the
    # ACKs cover at least what was read, and never more than what was sent and the FIN, which
    # takes one sequence number (acknowledged: top_seq + 1).
    assert received <= top_ack <= top_seq + 1, (received, top_ack, top_seq)
    # the rest is iperf3's control connections (flow 1's, and flow 2's to cc-s1:5202): a few
    # hundred bytes each, none of the flow's data
    other = cap[~cap.index.isin(data.index) & ~cap.index.isin(acks.index)]
    assert not set(other.stream) & set(segs.stream)
    assert ((other.sport.isin([5201, 5202])) | (other.dport.isin([5201, 5202]))).all()
    assert other.stream.nunique() <= 2 and other.len.sum() < 10_000, other.len.sum()


@pytest.mark.nightly
def test_tsharks_shortcuts_change_no_field_of_a_lossy_capture(tmp_path):
    # tshark.command decodes TCP payloads as plain data and time_sequence turns two TCP analyses
    # off (TSG_OPTIONS), to save tshark's time.  On lab 1's capture of a Cubic flow's losses,
    # every field the kit reads is the same as tshark gives without these shortcuts.
    r = subprocess.run([sys.executable, "-m", "cclab", "run",
                        str(KIT_DIR / "labs" / "lab1" / "quick" / "loss.toml"), "--out",
                        str(tmp_path)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(KIT_DIR)))
    assert r.returncode == 0, r.stderr[-2000:]
    (run_dir,) = results.runs(tmp_path)
    pcap = run_dir / "raw" / "capture-cc-s1.pcap"

    def fields(fields, options, shortcuts):
        argv = tshark.command(pcap, fields, "tcp", options)
        if not shortcuts:
            i = argv.index(tshark.PAYLOAD_AS_DATA[0])
            assert argv[i:i + 2] == list(tshark.PAYLOAD_AS_DATA)
            del argv[i:i + 2]
        began = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return out, time.monotonic() - began

    for names, options in ((tshark.FIELDS, ()), (tshark.TSG_FIELDS, tshark.TSG_OPTIONS)):
        fast, fast_s = fields(names, options, True)
        plain, plain_s = fields(names, (), False)
        print(f"{len(names)} fields: {fast.count(chr(10))} lines; tshark {fast_s:.1f} s with the "
              f"shortcuts, {plain_s:.1f} s without")
        assert fast.count("\n") > 1000
        assert fast == plain
    ts = tshark.time_sequence(pcap, results.read_manifest(run_dir)["start_epoch"])
    print(f"time sequence: {len(ts)} segments, {int(ts.retrans.sum())} retransmitted, "
          f"{int(ts.dupack.sum())} duplicate ACKs")
    assert ts.retrans.sum() > 0 and ts.dupack.sum() > 0


# ---------------------------------------------------------------- 7: module event tables

SPLINE_MODES = ["START_PROBE", "PROBE_BW", "PROBE_RTT", "DRAIN_PROBE"]
SEARCH_THRESH = "/sys/module/tcp_search/parameters/thresh"


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    flows = [Flow(cca="spline", start=0.5, duration=5), Flow(cca="search", start=0.5,
                                                               duration=5)]
    d, man = run(tmp_path_factory.mktemp("events"), "wired", flows, ping=False,
                 events=["spline:spline_mode", "search:search_exit"])
    return d, man


def flow_ports(d, flow):
    doc = json.loads((d / "raw" / f"iperf-{flow}.json").read_text())
    return {c["local_port"] for c in doc["start"]["connected"]}


def check_common(d, table, flow, port):
    fl = results.load(d, "flows").set_index("flow")
    t_start, t_end = fl.t_start[flow], fl.t_end[flow]
    assert set(table.flow) == {flow}, set(table.flow)
    assert table.t.is_monotonic_increasing, table.t.tolist()
    # flows.csv's t_start is measure.test_start's estimate, off by up to half the socket
    # sampling period (a Spline mode change 3.7 ms before it, 25 ms allowed, failed a strict
    # comparison once)
    hz = ((results.read_manifest(d).get("spec") or {}).get("measure") or {}).get("ss_hz") or 20.0
    assert table.t.min() > t_start - 0.5 / float(hz) and table.t.max() < t_end + 1.0, \
        (table.t.min(), table.t.max(), t_start, t_end)
    assert set(table.dport) == {port}
    assert set(table.sport) == flow_ports(d, flow)
    return t_start, t_end


@pytest.mark.nightly
def test_spline_event_table(events):
    d, man = events
    sp = results.load(d, "spline")
    print(sp.to_string())
    assert {"t", "flow", "sport", "dport", "old", "new", "cwnd", "bw", "min_rtt_us",
            "fairness"} <= set(sp.columns)
    assert len(sp) >= 2
    check_common(d, sp, 1, 5201)
    assert set(sp.old) | set(sp.new) <= set(SPLINE_MODES)
    assert sp.old.iloc[0] == "START_PROBE"
    assert (sp.old != sp.new).all()
    assert (sp.new.iloc[:-1].values == sp.old.iloc[1:].values).all()   # one chain of modes
    # windows in segments: at least Spline's floor of 4, at most the send buffer's 16 MiB
    assert sp.cwnd.between(4, 16 * 2**20 // 1448).all()
    # bw in bytes/s: positive and below twice the 50 Mbit/s link; min_rtt near the 40 ms path
    assert (sp.bw > 0).all() and (sp.bw < 3 * 50e6 / 8).all(), sp.bw.tolist()
    assert sp.min_rtt_us.between(40_000, 60_000).all(), sp.min_rtt_us.tolist()
    assert sp.fairness.between(0, 16).all()


@pytest.mark.nightly
def test_search_event_table(events):
    d, man = events
    se = results.load(d, "search")
    print(se.to_string())
    assert {"t", "flow", "sport", "dport", "reason", "cwnd", "norm_diff", "elapsed_us",
            "bin_us"} <= set(se.columns)
    assert len(se) >= 1
    t_start, _ = check_common(d, se, 2, 5202)
    assert set(se.reason) <= {"search", "hystart", "loss"}
    assert se.cwnd.between(1, 16 * 2**20 // 1448).all()
    assert (se[se.reason != "loss"].cwnd >= 10).all()          # no exit below the initial window
    assert (se.norm_diff <= 1000).all()                        # per mille of a ratio <= 1
    thresh = int(Path(SEARCH_THRESH).read_text()) if Path(SEARCH_THRESH).exists() else 350
    by_search = se[se.reason == "search"]
    assert by_search.norm_diff.between(thresh, 1000).all()
    # bins of 3.5 RTT / 10 of the first RTT (40 ms path): 14 ms and a little more
    armed = se[se.bin_us > 0]
    assert len(by_search) == 0 or len(armed) >= len(by_search)
    assert armed.bin_us.between(0.35 * 40_000, 0.35 * 60_000).all(), armed.bin_us.tolist()
    # SEARCH's clock starts after the flow does
    assert (se.elapsed_us / 1e6 <= se.t - t_start + 0.05).all(), \
        (se.elapsed_us.tolist(), (se.t - t_start).tolist())


# ---------------------------------------------------------------- runs that stop early

def world():
    """The VM's namespaces, interfaces and iperf3 processes: a stopped run leaves none."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                      text=True).stdout)
    iperf = subprocess.run(["pgrep", "-x", "iperf3"], capture_output=True, text=True).stdout
    return sorted(netns.split()), sorted(link["ifname"] for link in links), iperf.split()


def test_unavailable_module_stops_before_any_flow(tmp_path):
    """A flow whose congestion control cannot be loaded (its .ko is not a module) stops the
    run with one line naming it, before anything is created: no namespace, interface,
    iperf3 process or result folder, and the algorithm beside it never starts."""
    from cclab.spec import available_ccas

    ko = tmp_path / "tcp_nosuch.ko"
    ko.write_bytes(b"this is not a kernel module\n")
    spec = tmp_path / "nosuch.toml"
    spec.write_text(f'name = "nosuch"\nprofile = "wired"\nmodules = ["{ko}"]\n'
                    '[override]\npairs = 2\n'
                    '[[flow]]\ncca = "cubic"\nduration = "2s"\n'
                    '[[flow]]\ncca = "nosuch"\nduration = "2s"\n')

    before = world()
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "cclab", "run", str(spec), "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=KIT_DIR)
    print(r.stderr)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "'nosuch'" in lines[0] and "insmod" in lines[0] and "no flow was started" in lines[0]
    assert world() == before
    assert not out.exists() or not any(out.iterdir()), list(out.rglob("*"))
    assert "nosuch" not in available_ccas()


def drop_udp_at_c1(nodes):
    """The receiver's interface drops every UDP datagram arriving from the path, so iperf3's
    UDP handshake datagram never reaches its server (the control connection is TCP)."""
    dev = topo.host_dev("cc-c1")
    in_ns(nodes["cc-c1"], "tc", "qdisc", "add", "dev", dev, "ingress")
    in_ns(nodes["cc-c1"], "tc", "filter", "add", "dev", dev, "ingress", "protocol", "ip",
          "flower", "ip_proto", "udp", "action", "drop")


@pytest.mark.nightly
def test_a_udp_flow_that_never_started_is_named(tmp_path):
    spec = tmp_path / "stall.toml"
    spec.write_text('name = "stall"\nprofile = "wired"\n'
                    '[[flow]]\ncca = "cubic"\nprotocol = "udp"\nrate = "1mbit"\n'
                    'start = "2s"\nduration = "1s"\n')
    out = tmp_path / "out"
    before = world()
    with Watch(drop_udp_at_c1) as w:
        r = subprocess.run([sys.executable, "-m", "cclab", "run", str(spec), "--out", str(out)],
                           capture_output=True, text=True, timeout=120, cwd=KIT_DIR)
    w.check()
    print(r.stderr)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert "did not finish" in last and "UDP flow(s) 1 never sent data" in last, last
    assert "run the experiment again" in last
    (d,) = [p.parent for p in out.rglob("manifest.json")]
    man = results.read_manifest(d)
    assert man["status"] == "incomplete" and "never sent data" in man["error"]
    assert measure.udp_never_started(measure.read_json(d / "raw" / "iperf-1.json"))
    assert world() == before

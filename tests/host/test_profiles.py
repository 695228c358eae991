"""Link profiles and the configuration they generate (tc, sysctl, ethtool), as pure data."""
import time
from pathlib import Path

import pytest

from cclab import dynamics, profiles, tc, topo
from cclab.profiles import Direction, Profile
from cclab.spec import Experiment, Flow
from cclab.units import SpecError

SHIPPED = ["cellular", "geo", "leo", "starlink-seed", "wifi", "wired"]


def exp(profile="wired", flows=None, **kw):
    return Experiment(name="t", profile=profile, flows=flows or [Flow(cca="cubic")], **kw)


def cmds(e, node=None, tool=None):
    return [" ".join(c) for n, c in topo.plan(e)
            if (node is None or n == node) and (tool is None or c[0] == tool)]


def test_every_shipped_profile_is_valid_and_summarised():
    assert set(SHIPPED) <= set(profiles.names())
    for name in SHIPPED:
        p = profiles.load(name)
        assert p.summary and len(p.summary.splitlines()) == 1


def test_starlink_seed_is_the_recipe_exactly():
    e = exp("starlink-seed")
    assert cmds(e, tool="tc") == [
        "tc qdisc add dev cc-r1-core root handle 1: tbf rate 10mbit burst 32kbit latency 400ms",
        "tc qdisc add dev cc-r1-core parent 1:1 handle 10: netem delay 50ms loss 2% limit 1000"]
    assert e.link.up is None                      # the ACK path is not shaped


def test_starlink_seed_on_the_senders_nic():
    e = exp("starlink-seed", override={"down": {"at": "host"}})
    assert cmds(e, tool="tc")[0].startswith("tc qdisc add dev cc-s1-eth0 root handle 1: tbf")


def test_wired_bottleneck_on_router_egress_both_directions():
    e = exp("wired")
    r1, r2 = cmds(e, "cc-r1", "tc"), cmds(e, "cc-r2", "tc")
    assert r1 == [
        "tc qdisc add dev cc-r1-core root handle 1: htb default 1",
        "tc class add dev cc-r1-core parent 1: classid 1:1 htb rate 50mbit ceil 50mbit "
        "burst 200kbit cburst 200kbit quantum 1514",
        # limit = 50 Mbit/s x 20 ms / 1500 B (84 packets in flight) + 1 BDP (167)
        "tc qdisc add dev cc-r1-core parent 1:1 handle 10: netem delay 20ms limit 251"]
    assert r2[0] == "tc qdisc add dev cc-r2-core root handle 1: htb default 1"
    assert not [c for c in cmds(e, tool="tc") if "cc-s1" in c or "cc-c1" in c]


def test_netem_limit_covers_delay_line_plus_buffer():
    g = profiles.load("geo")
    buf = topo.buffers(g)
    assert buf["down"] == 5000                    # 2 BDP: 2 x 50 Mbit/s x 600 ms / 1500 B
    assert tc.netem_limit(g.down, tc.LinkState.of(g.down), buf["down"]) == 1250 + 5000


def test_buffer_in_packets_and_bdp():
    d = Direction(rate="10mbit", delay="50ms", buffer=77)
    assert d.buffer_packets(0.1) == 77
    d = Direction(rate="12mbit", buffer="1.5bdp")
    assert d.buffer_packets(0.1) == 150


def test_unshaped_direction_when_no_delay():
    e = exp(override={"down": {"delay": 0}, "up": {"delay": 0, "buffer": 50}})
    assert "tc qdisc add dev cc-r2-core parent 1:1 handle 10: pfifo limit 50" in cmds(e, tool="tc")


def test_wifi_jitter_without_reordering_and_slots():
    c = cmds(exp("wifi"), "cc-r1", "tc")
    assert c == ["tc qdisc add dev cc-r1-core root handle 1: netem rate 50mbit delay 3ms 2ms "
                 "slot 800us 10ms packets 42 limit 363"]


def test_jitter_needs_netem_rate():
    with pytest.raises(SpecError, match="jitter"):
        Direction(rate="10mbit", jitter="1ms")


def test_sysctls_per_namespace():
    e = exp("geo", flows=[Flow(cca="bbr"), Flow(cca="reno", direction="up")])
    s = cmds(e, tool="sysctl")
    assert "sysctl -qw net.ipv4.tcp_congestion_control=bbr" in cmds(e, "cc-s1", "sysctl")
    assert "sysctl -qw net.ipv4.tcp_congestion_control=reno" in cmds(e, "cc-c1", "sysctl")
    assert "sysctl -qw net.ipv4.tcp_rmem=4096 131072 67108864" in s
    assert "sysctl -qw net.ipv4.tcp_wmem=4096 16384 67108864" in s
    assert cmds(e, "cc-r1", "sysctl") == ["sysctl -qw net.ipv4.ip_forward=1"]


def test_socket_buffers_grow_with_bdp():
    assert topo.socket_buffer_max(profiles.load("wired")) == 16 << 20
    big = profiles.load("geo", {"down": {"rate": "100mbit"}, "sysctl": {}})
    assert topo.socket_buffer_max(big) >= 4 * (100e6 / 8 * 0.6)


def test_experiment_sysctls_override():
    e = exp(sysctl={"net.ipv4.tcp_ecn": 1})
    assert "sysctl -qw net.ipv4.tcp_ecn=1" in cmds(e, "cc-s1")


def test_offloads_off_on_every_interface():
    e = exp("leo", override={"pairs": 2})
    eth = cmds(e, tool="ethtool")
    devs = {c.split()[2] for c in eth}
    assert devs == {"cc-r1-core", "cc-r2-core", "cc-r1-s1", "cc-r1-s2", "cc-r2-c1", "cc-r2-c2",
                    "cc-s1-eth0", "cc-s2-eth0", "cc-c1-eth0", "cc-c2-eth0"}
    assert all(c.endswith("tso off gso off gro off") for c in eth)


def test_offloads_cannot_stay_on_with_loss():
    with pytest.raises(SpecError, match="offloads"):
        profiles.load("leo", {"offloads": True})


def test_addresses_and_routes():
    e = exp(override={"pairs": 2})
    assert "ip addr add 10.1.2.2/24 dev cc-c2-eth0" in cmds(e, "cc-c2")
    assert "ip route add default via 10.0.1.1" in cmds(e, "cc-s1")
    assert "ip route add 10.1.0.0/16 via 10.255.0.2" in cmds(e, "cc-r1")


def test_change_keeps_queue_and_restates_every_netem_field():
    leo = profiles.load("leo")
    s = tc.LinkState(60e6, 0.02, 1.0)
    c = [" ".join(x) for x in tc.change(leo.down, "cc-r1-core", 500, s)]
    assert c == ["tc class change dev cc-r1-core parent 1: classid 1:1 htb rate 60mbit ceil 60mbit "
                 "burst 240kbit cburst 240kbit quantum 1514",
                 "tc qdisc change dev cc-r1-core parent 1:1 handle 10: netem delay 20ms loss 1% limit 600"]
    assert not any(" del " in x or "replace" in x for x in c)
    outage = tc.change(leo.down, "cc-r1-core", 500, tc.LinkState(60e6, 0.02, 100.0), rate_changed=False)
    assert [" ".join(x) for x in outage] == [
        "tc qdisc change dev cc-r1-core parent 1:1 handle 10: netem delay 20ms loss 100% limit 600"]
    wifi = profiles.load("wifi")
    w = " ".join(tc.change(wifi.down, "d", 300, tc.LinkState(40e6, 0.003, 0))[0])
    assert w == "tc qdisc change dev d root handle 1: netem rate 40mbit delay 3ms 2ms slot 800us 10ms packets 42 limit 350"
    seed = profiles.load("starlink-seed")
    t = [" ".join(x) for x in tc.change(seed.down, "d", 10, tc.LinkState(5e6, 0.05, 2))]
    assert t[0] == "tc qdisc change dev d root handle 1: tbf rate 5mbit burst 32kbit latency 400ms"


def test_leo_reconfigures_at_12_27_42_57():
    leo = profiles.load("leo")
    start = time.mktime((2024, 1, 1, 12, 0, 5, 0, 1, -1))      # hh:mm:05
    t = dynamics.instants(leo.dynamics, start, 60)
    assert t == [7.0, 22.0, 37.0, 52.0]                         # :12 :27 :42 :57
    ch = dynamics.schedule(leo, 1, start, 60)
    down = [c for c in ch if c.direction == "down"]
    assert [c.why for c in down[:2]] == ["handover", "reconfigure"]
    assert down[0].state.loss == 100 and down[1].t == pytest.approx(7.04)
    for c in down[1::2]:
        assert 50e6 <= c.state.rate <= 100e6 and 0.010 <= c.state.delay <= 0.025
    assert ch == dynamics.schedule(leo, 1, start, 60)            # same seed, same draws
    assert ch != dynamics.schedule(leo, 2, start, 60)


def test_leo_short_period_from_start():
    leo = profiles.load("leo", {"dynamics": {"period": "3s", "offset": "1s", "align": "start"}})
    assert dynamics.instants(leo.dynamics, 123.4, 10) == [1.0, 4.0, 7.0]


def test_only_wall_clock_reconfigurations_depend_on_the_start_time():
    # the runner works a schedule out before t = 0 and again at t = 0 only when this is true
    leo = profiles.load("leo")
    assert dynamics.on_wall_clock(leo)
    assert dynamics.schedule(leo, 1, 5.0, 60) != dynamics.schedule(leo, 1, 9.0, 60)
    for p in (profiles.load("leo", {"dynamics": {"align": "start"}}), profiles.load("cellular"),
              profiles.load("wired")):
        assert not dynamics.on_wall_clock(p)
        assert dynamics.schedule(p, 1, 5.0, 60) == dynamics.schedule(p, 1, 9.0, 60)


def test_cellular_schedule_follows_trace():
    cell = profiles.load("cellular")
    ch = [c for c in dynamics.schedule(cell, 1, 0, 10) if c.direction == "down"]
    assert ch and all(c.why == "trace" and c.rate_changed for c in ch)
    assert all(abs(round(c.t / 0.1) * 0.1 - c.t) < 1e-9 for c in ch)
    first = dynamics.initial(cell, "down")
    c0 = [" ".join(c) for c in tc.setup(cell.down, "x", 400, True, first)]
    assert f"rate {int(first.rate // 1000)}kbit" in c0[1] or "mbit" in c0[1]


def test_profile_file_errors_name_file_and_field(tmp_path, monkeypatch):
    (tmp_path / "mine.toml").write_text('[down]\nrate = "10mbit"\nloss = 101\n')
    (tmp_path / "typo.toml").write_text('[down]\nrate = "10mbit"\nqueue = 5\n')
    (tmp_path / "trace.toml").write_text('[down]\nrate = "10mbit"\n[dynamics]\nkind = "trace"\n'
                                         'down = "missing.trace"\n')
    (tmp_path / "bad.trace").write_text("1\n2\nthree\n")
    (tmp_path / "badtrace.toml").write_text('[down]\nrate = "10mbit"\n[dynamics]\nkind = "trace"\n'
                                            'down = "bad.trace"\n')
    monkeypatch.setenv("CCLAB_TOPOLOGIES", str(tmp_path))
    for name, field in (("mine", "down.loss"), ("typo", "down.queue"),
                        ("trace", "dynamics.down"), ("badtrace", "dynamics.down")):
        with pytest.raises(SpecError) as e:
            profiles.load(name)
        assert field in str(e.value) and f"{name}.toml" in str(e.value)
    with pytest.raises(SpecError, match="line 3"):
        profiles.load("badtrace")


def test_adding_a_profile_is_one_file(tmp_path, monkeypatch):
    (tmp_path / "dsl.toml").write_text('summary = "ADSL"\n[down]\nrate = "16mbit"\ndelay = "15ms"\n'
                                       '[up]\nrate = "1mbit"\ndelay = "15ms"\n')
    monkeypatch.setenv("CCLAB_TOPOLOGIES", str(tmp_path))
    assert "dsl" in profiles.names()
    e = exp("dsl")
    assert "htb rate 1mbit" in " ".join(cmds(e, "cc-r2", "tc"))


def test_dynamics_cannot_target_an_unshaped_direction():
    with pytest.raises(SpecError, match="dynamics.up"):
        profiles.load("starlink-seed", {"dynamics": {"kind": "reconfigure", "up_rate": ["1mbit", "2mbit"]}})

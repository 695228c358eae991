"""Engine pieces that need no network: traces, measurement parsers, results, CLI."""
import copy
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from cclab import measure, measurements, netlink, results, traces
from cclab.spec import Experiment, Flow
from cclab.units import SpecError

KIT = Path(__file__).resolve().parents[2]


def cclab(*args):
    return subprocess.run([sys.executable, "-m", "cclab", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(KIT)), timeout=120)


# ---------------------------------------------------------------- traces

def test_trace_generator_is_deterministic_and_near_its_mean():
    a = traces.generate(30, 10e6, seed=3)
    assert a == traces.generate(30, 10e6, seed=3) and a != traces.generate(30, 10e6, seed=4)
    assert a == sorted(a) and a[-1] == 30000
    assert 0.5 * 10e6 < traces.mean_rate(a) < 1.5 * 10e6


def test_trace_rates_per_window_and_looping():
    tr = [1, 1, 2, 3, 10]                       # 5 packets in a 10 ms trace, then it loops
    assert traces.opportunities(tr, 0, 10, 10) == 4
    assert traces.opportunities(tr, 0, 20, 10) == 9    # the ms 10 entry of loop 0 and loop 1's
    r = traces.rates(tr, 0.01, 0.03)
    assert len(r) == 3 and r[0] == 4 * 12000 / 0.01


def test_shipped_traces_parse():
    for p in (KIT / "topologies" / "traces").iterdir():
        t = traces.read(p)
        assert traces.mean_rate(t) > 1e6


@pytest.mark.parametrize("text", ["", "1\nx\n", "5\n3\n", "0\n", "-1\n"])
def test_bad_traces_are_refused(text):
    with pytest.raises(SpecError):
        traces.parse(text)


def test_trace_cli(tmp_path):
    out = tmp_path / "t.down"
    r = subprocess.run([sys.executable, "-m", "cclab.traces", "--seconds", "2", "--mean", "5mbit",
                        "-o", str(out)], env=dict(os.environ, PYTHONPATH=str(KIT)),
                       capture_output=True, text=True)
    assert r.returncode == 0 and traces.read(out)[-1] == 2000


# ---------------------------------------------------------------- parsers

def test_sockdiag_reads_what_ss_shows():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
    c.connect(("127.0.0.1", port))
    a, _ = srv.accept()
    try:
        c.sendall(b"x" * 100000)
        a.recv(65536)
        time.sleep(0.05)
        (mine,) = [s for s in netlink.dump() if s["peer_port"] == port]
        r = netlink.row(mine)
        assert r["cca"] == "reno" and r["local_port"] == c.getsockname()[1]
        assert r["cwnd"] >= 10 and r["bytes_acked"] > 0 and r["mss"] > 0
        assert r["rtt_ms"] > 0 and r["ssthresh"] is None      # still in slow start
        ss = subprocess.run(["ss", "-tinHO", f"dport = :{port}"], capture_output=True, text=True)
        if ss.returncode == 0 and ss.stdout:
            assert f"cwnd:{r['cwnd']}" in ss.stdout and " reno " in ss.stdout
    finally:
        for s in (a, c, srv):
            s.close()


def test_tcp_info_fields_sit_where_the_kernel_puts_them_and_stop_where_the_data_ends():
    import struct
    data = bytes(range(256))
    full = netlink.parse_tcp_info(data)
    assert full["state"] == 0 and full["flags"] == 7 and full["delivery_rate_app_limited"] == 1
    assert full["snd_cwnd"] == struct.unpack_from("=I", data, 80)[0]
    assert full["total_retrans"] == struct.unpack_from("=I", data, 100)[0]
    assert full["pacing_rate"] == struct.unpack_from("=Q", data, 104)[0]     # u64 at 8-byte alignment
    assert list(full) == [n for n, _ in netlink.TCP_INFO] + ["delivery_rate_app_limited"]
    assert "pacing_rate" in netlink.parse_tcp_info(data[:112])
    short = netlink.parse_tcp_info(data[:111])
    assert list(short)[-2:] == ["total_retrans", "delivery_rate_app_limited"]
    assert netlink.parse_tcp_info(b"") == {}


def test_sockdiag_module_info_like_ss():
    import struct
    data = struct.pack("=IIIII", 1_187_500, 0, 20100, 739, 512)
    assert netlink.module_info(netlink.INET_DIAG_BBRINFO, data) == \
        "bbr:(bw:9.500Mbps,mrtt:20.100,pacing_gain:2.8867,cwnd_gain:2)"


def test_recorder_samples_sockets_and_qdiscs(tmp_path):
    """The sampler thread records raw netlink dumps; the parsers turn them into rows."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    c = socket.create_connection(("127.0.0.1", port))
    a, _ = srv.accept()
    rec = netlink.Recorder()
    try:
        rec.add(os.getpid(), "sockets", 50, tmp_path / "s.bin")
        rec.add(os.getpid(), "qdiscs", 20, tmp_path / "q.bin")
        began = time.monotonic()
        rec.start()
        c.sendall(b"x" * 10000)
        time.sleep(0.5)
    finally:
        rec.stop()
        ran = time.monotonic() - began
        for s in (a, c, srv):
            s.close()
    rows = measure.parse_sockets(tmp_path / "s.bin", "h", 0.0,
                                 lambda local, peer: 7 if peer == port else None)
    # How many samples a busy host allows is a figure, not a check.  What holds on any host:
    # it sampled more than once, and never faster than 50 Hz by its own stamps (each sample is
    # due a period after the one before, or later)
    print(f"figure: {len(rows)} samples while the sampler ran {ran:.2f} s at 50 Hz "
          f"({len(rows) / ran:.0f} a second)")
    span = rows[-1]["t"] - rows[0]["t"]
    assert len(rows) >= 2 and len(rows) <= 50 * span + 2
    assert {r["flow"] for r in rows} == {7} and rows[0]["host"] == "h"
    assert all(r["cwnd"] and r["cca"] for r in rows)
    lo = socket.if_nametoindex("lo")
    q = measure.parse_qdiscs(tmp_path / "q.bin", "n", {lo: ("lo", "down")}, 0.0)
    assert len(q) >= 5 and q[0]["dev"] == "lo" and q[0]["parent"] == "root"
    assert q[0]["kind"] and q[0]["packets"] is not None


def test_records_cut_short_are_dropped(tmp_path):
    import struct
    p = tmp_path / "r.bin"
    p.write_bytes(struct.pack("=dI", 1.5, 3) + b"abc" + struct.pack("=dI", 2.5, 10) + b"abc")
    assert list(netlink.read_records(p)) == [(1.5, b"abc")]


def test_parse_ping():
    text = ("PING 10.0.1.2 (10.0.1.2) 56(84) bytes of data.\n"
            "[1000.200000] 64 bytes from 10.0.1.2: icmp_seq=1 ttl=62 time=20.0 ms\n"
            "[1000.600000] no answer yet for icmp_seq=2\n"
            "[1000.620000] 64 bytes from 10.0.1.2: icmp_seq=3 ttl=62 time=20.0 ms\n")
    rows = measure.parse_ping(text, "a", "b", 1000.0, 0.2)
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert rows[0]["t"] == pytest.approx(0.18) and rows[1]["rtt_ms"] is None


def test_parse_probe():
    line = ("iperf3-812 [001] ..s1. 1234.500000: tcp_probe: family=AF_INET src=10.0.1.2:40022 "
            "dest=10.1.1.2:5201 mark=0x0 data_len=0 snd_nxt=0x10 snd_una=0x8 snd_cwnd=14 "
            "ssthresh=2147483647 snd_wnd=64256 srtt=20500 rcv_wnd=65160 sock_cookie=2\n")
    e = Experiment(name="t", profile="wired", flows=[Flow(cca="cubic")])
    rows = measure.parse_probe(line, 1234.0, measure.flow_lookup(e, {}))
    assert rows == [{"t": 0.5, "flow": 1, "local_port": 40022, "peer_port": 5201, "snd_cwnd": 14,
                     "ssthresh": 2147483647, "srtt_us": 20500, "snd_wnd": 64256,
                     "snd_nxt": 16, "snd_una": 8, "data_len": 0}]


def test_parse_probe_reads_every_line_form_the_same_way(monkeypatch):
    """The whole-line fast path and the field-by-field reading give the same rows; a trace with
    a line in another form (a field added, one left out) is read field by field, all of it."""
    line = ("iperf3-812 [001] ..s1. {t}: tcp_probe: family=AF_INET src=10.0.1.2:{port} "
            "dest=10.1.1.2:5201 mark=0x0 data_len={n} snd_nxt=0x{nxt:x} snd_una=0 snd_cwnd={cwnd} "
            "ssthresh=2147483647 snd_wnd=64256 srtt=20500 rcv_wnd=65160 sock_cookie=2\n")
    text = "".join(line.format(t=f"{1234 + i / 100:.6f}", port=40022 + i % 2, n=i % 3 * 1448,
                               nxt=i * 1448, cwnd=10 + i) for i in range(40))
    e = Experiment(name="t", profile="wired", flows=[Flow(cca="cubic")])
    flow_of = measure.flow_lookup(e, {1: [40022]})           # the other port is not the flow's
    by_fields = measure._probe_fields(text, 1234.0, flow_of)
    with monkeypatch.context() as m:                 # the kernel's own lines: the fast path
        m.setattr(measure, "_probe_fields", None)
        fast = measure.parse_probe(text, 1234.0, flow_of)
    assert fast == by_fields
    assert len(fast) == 20 and {r["local_port"] for r in fast} == {40022}
    assert fast[0]["snd_una"] == 0 and fast[1]["snd_nxt"] == 2 * 1448
    odd = text + ("iperf3-812 [001] ..s1. 1300.000000: tcp_probe: family=AF_INET "
                  "src=10.0.1.2:40022 dest=10.1.1.2:5201 snd_cwnd=99 srtt=7\n")
    rows = measure.parse_probe(odd, 1234.0, flow_of)
    assert rows[:-1] == fast
    assert rows[-1]["snd_cwnd"] == 99 and rows[-1]["ssthresh"] is None


def test_parse_module_events():
    text = (
        "iperf3-812 [001] ..s1. 1234.500000: spline_mode: sport=40022 dport=5202 "
        "old=START_PROBE new=DRAIN_PROBE cwnd=44 bw=1245000 min_rtt_us=50120 fairness=1\n"
        "iperf3-815 [000] ..s1. 1235.250000: search_exit: sport=40030 dport=5203 reason=search "
        "cwnd=5234 norm_diff=362 elapsed_us=8801234 bin_us=210000\n"
        "iperf3-815 [000] ..s1. 1235.300000: search_exit: sport=40031 dport=5203 reason=loss "
        "cwnd=10 norm_diff=-5 elapsed_us=1 bin_us=2\n"                  # a control connection
        "iperf3-812 [001] ..s1. 1234.600000: tcp_probe: src=10.0.1.2:40022 dest=10.1.1.2:5202\n"
        "iperf3-812 [001] ..s1. 1234.700000: spline_mode: sport=1 dport=9999 old=A new=B\n")
    e = Experiment(name="t", profile="wired", flows=[Flow(cca=c) for c in
                                                      ("cubic", "spline", "search")])
    flow_of = measure.flow_lookup(e, {2: [40022], 3: [40030]})
    ev = measure.parse_module_events(text, 1234.0, flow_of)
    assert ev["spline"] == [{"t": 0.5, "flow": 2, "sport": 40022, "dport": 5202,
                             "old": "START_PROBE", "new": "DRAIN_PROBE", "cwnd": 44,
                             "bw": 1245000, "min_rtt_us": 50120, "fairness": 1}]
    assert ev["search"] == [{"t": 1.25, "flow": 3, "sport": 40030, "dport": 5203,
                             "reason": "search", "cwnd": 5234, "norm_diff": 362,
                             "elapsed_us": 8801234, "bin_us": 210000}]
    # the lines are found by substring search: the first line, the last without its newline,
    # and the order of the text whatever the event's name
    last = ("iperf3-812 [001] ..s1. 1236.000000: spline_mode: sport=40022 dport=5202 "
            "old=DRAIN_PROBE new=PROBE_BW cwnd=40")
    ev = measure.parse_module_events(text + last, 1234.0, flow_of)
    assert [r["new"] for r in ev["spline"]] == ["DRAIN_PROBE", "PROBE_BW"]
    assert len(ev["search"]) == 1
    assert measure.parse_module_events(text.replace(": spline_mode: ", ": tcp_probe: ")
                                       .replace(": search_exit: ", ": tcp_probe: "),
                                       1234.0, flow_of) == {"spline": [], "search": []}


def test_event_tables_match_what_analysis_reads():
    from cclab.analysis.data import EXTRA_TABLES
    for name, columns in EXTRA_TABLES.items():
        assert results.TABLES[name] == columns


def test_measure_events_and_cpu_are_validated():
    from cclab.spec import Measure
    m = Measure(events=["search:search_exit", "search:search_exit"], cpu_hz=5)
    assert m.events == ["search:search_exit"] and m.cpu and m.cpu_hz == 5
    for bad, field in (({"events": ["tcp:tcp_probe"]}, "events[0]"), ({"events": "spline"}, "events"),
                       ({"cpu": "yes"}, "cpu"), ({"cpu_hz": 0}, "cpu_hz")):
        with pytest.raises(SpecError) as e:
            Measure(**bad)
        assert e.value.field == field, e.value


def test_parse_iperf():
    doc = {"start": {"connected": [{"local_port": 40022}]},
           "intervals": [{"streams": [{"socket": 5, "start": 0, "end": 0.1, "bytes": 125000,
                                       "bits_per_second": 1e7, "retransmits": 0,
                                       "snd_cwnd": 14480, "rtt": 20000, "rttvar": 500}]}],
           "end": {"sum_sent": {"bytes": 125000, "retransmits": 1},
                   "sum_received": {"bytes": 120000, "bits_per_second": 9.6e6},
                   "streams": [{"sender": {"mean_rtt": 21000, "min_rtt": 20000}}],
                   "sender_tcp_congestion": "cubic"}}
    rows, s = measure.parse_iperf(doc, 1, 2.0)
    assert rows[0]["t_end"] == 2.1 and rows[0]["snd_cwnd"] == 14480
    assert s["cca_iperf"] == "cubic" and s["throughput_bps"] == 9.6e6 and s["local_ports"] == [40022]
    assert s["mean_rtt_us"] == 21000 and s["min_rtt_us"] == 20000


def test_test_start_comes_from_the_socket_samples():
    """iperf3's intervals count from its test start, which follows the connections: the socket
    samples bound it (cookie only, then payload), never before the client's spawn."""
    def ss(t, port, segs, flow=1):
        return {"t": t, "flow": flow, "local_port": port, "data_segs_out": segs}
    # two streams: one up with its cookie from 0.3 s, the other stuck on a lost SYN until 1.4 s
    rows = [ss(0.3, 1, 1), ss(0.4, 1, 1), ss(0.4, 2, 0), ss(1.4, 1, 1), ss(1.4, 2, 1),
            ss(1.5, 1, 14), ss(1.5, 2, 3), ss(1.5, 9, 500, flow=2)]
    assert measure.test_start(rows, 1, 0.01, 0.1) == pytest.approx(1.45)
    # payload in the first sample of the flow: the sampling period bounds it, as does the spawn
    assert measure.test_start([ss(2.0, 1, 40)], 1, 1.5, 0.1) == pytest.approx(1.95)
    assert measure.test_start([ss(2.0, 1, 40)], 1, 1.98, 0.1) == pytest.approx(1.99)
    # no samples (UDP, no sampler) or no payload: the spawn time
    assert measure.test_start([], 1, 3.0, 0.1) == 3.0
    assert measure.test_start([ss(4.0, 1, 1)], 1, 3.0, 0.1) == 3.0


def test_a_cookie_sent_again_is_not_the_test_starting():
    """Under loss the cookie goes out more than once; each copy is a data segment but no new
    byte.  The samples of a lab 3 run at 20 % loss (CI): SYN answered at 5.68 s, the cookie sent
    again at 5.93 s and 6.18 s, acknowledged at 6.23 s with the first payload beside it.  Its
    test began after 6.18 s, not at 5.9 s as a count of segments said."""
    def ss(t, segs, sent, again):
        return {"t": t, "flow": 1, "local_port": 46002, "data_segs_out": segs,
                "bytes_sent": sent, "bytes_retrans": again}
    rows = [ss(5.68, 1, 37, 0), ss(5.93, 2, 74, 37), ss(6.18, 3, 111, 74),
            ss(6.23, 11, 111 + 8 * 1448, 74)]
    assert measure.test_start(rows, 1, 2.0, 0.05) == pytest.approx(6.205)
    assert [measure.sent_payload(r) for r in rows] == [False, False, False, True]
    # a table row (numpy numbers, NaN where a counter is missing) reads the same way
    frame = pd.DataFrame(rows)
    assert [measure.sent_payload(r) for _, r in frame.iterrows()] == [False, False, False, True]
    # samples without the byte counters (tables from before) count segments, as before
    old = frame.drop(columns=["bytes_sent"]).assign(bytes_sent=float("nan"))
    assert [measure.sent_payload(r) for _, r in old.iterrows()] == [False, True, True, True]


def test_overlapping_tests_of_flows_meant_to_run_apart_are_reported():
    def fl(n, start, t_start, dur=3.0):
        return {"flow": n, "start": start, "duration": dur, "t_start": t_start, "t_end": t_start + dur}
    apart = [fl(1, 0.0, 0.9), fl(2, 3.5, 4.4), fl(3, 7.0, 7.5)]
    assert measure.overlaps(apart) == []
    late = [fl(1, 0.0, 0.9), fl(2, 3.5, 6.6), fl(3, 7.0, 7.5)]
    (w,) = measure.overlaps(late)
    assert w.startswith("flow 2's test ran until 9.60 s, 2.10 s into flow 3's")
    # flows the spec runs together (lab 2's share) are not reported
    assert measure.overlaps([fl(1, 0.0, 0.5, 10), fl(2, 1.0, 1.5)]) == []


def test_a_udp_client_stuck_in_its_handshake_is_told_apart():
    """The fields iperf3 3.12 writes when a UDP client is stopped (SIGINT) while it waits for
    the reply to its handshake datagram (recorded with a relay that swallowed the datagram)."""
    zero = {"start": 0, "end": 0, "seconds": 0, "bytes": 0, "packets": 0, "sender": True}
    stuck = {"start": {"connected": [], "cookie": "zjnsa2enwllcqfih2teo4jv3xzrrzjuogluk",
                       "connecting_to": {"host": "127.0.0.1", "port": 15300}},
             "intervals": [], "end": {"streams": [], "sum": zero, "sum_sent": zero},
             "error": "interrupt - the client has terminated"}
    assert measure.udp_never_started(stuck)
    # a client that sent something, one that never reached its server, or no document at all
    ran = copy.deepcopy(stuck)
    ran["intervals"] = [{"streams": [{"socket": 5, "start": 0, "end": 0.1, "bytes": 1400,
                                      "packets": 1, "sender": True}],
                         "sum": {"start": 0, "end": 0.1, "bytes": 1400, "packets": 1}}]
    assert not measure.udp_never_started(ran)
    ended = copy.deepcopy(stuck)
    ended["end"]["sum_sent"]["bytes"] = 2800
    assert not measure.udp_never_started(ended)
    refused = {"start": {"connected": [], "connecting_to": {"host": "x", "port": 1}},
               "intervals": [], "error": "unable to connect to server: Connection refused"}
    assert not measure.udp_never_started(refused)
    assert not measure.udp_never_started({})


def test_iperf_client_command():
    f = Flow(cca="bbr", duration=5, streams=4)
    assert measure.iperf_client(f, "10.1.1.2", 5201, 0.1) == [
        "iperf3", "-c", "10.1.1.2", "-p", "5201", "-J", "-i", "0.1", "-P", "4",
        "--connect-timeout", "5000", "-t", "5", "-C", "bbr"]
    u = Flow(cca="cubic", protocol="udp", rate="5mbit", length=100, bytes="1MB")
    assert measure.iperf_client(u, "x", 1, 0.5)[-7:] == ["-n", "1000000", "-u", "-b", "5000000",
                                                          "-l", "100"]


# ---------------------------------------------------------------- results and CLI

def fake_run(tmp_path) -> Path:
    run = tmp_path / "results" / "demo" / "20240101-000000-1"
    results.write_json(run / "manifest.json", {"experiment": "demo", "repetition": 1,
                                               "status": "complete", "profile": {"name": "wired"},
                                               "kit": {"commit": "abc"}, "kernel": "6.1"})
    results.write_table(run, "flows", [{"flow": 1, "cca": "cubic", "direction": "down"}])
    results.write_table(run, "iperf", [{"flow": 1, "stream": 5, "t_start": i / 10,
                                        "t_end": (i + 1) / 10, "bits_per_second": 1e7}
                                       for i in range(20)])
    results.write_table(run, "ss", [{"t": i / 20, "flow": 1, "local_port": 4000, "cwnd": 10 + i,
                                     "rtt_ms": 20} for i in range(40)])
    results.write_table(run, "ping", [{"t": i / 5, "seq": i, "rtt_ms": 20.5} for i in range(10)])
    return run


def test_write_atomic_leaves_no_temporary(tmp_path):
    results.write_atomic(tmp_path / "a.txt", "x")
    results.write_atomic(tmp_path / "a.txt", "y")
    assert os.listdir(tmp_path) == ["a.txt"] and (tmp_path / "a.txt").read_text() == "y"


def test_loaders_return_dataframes(tmp_path):
    pytest.importorskip("pandas")
    run = fake_run(tmp_path)
    assert list(results.load(run, "ss").columns) == results.TABLES["ss"]
    assert len(results.load(run, "iperf")) == 20
    assert results.load(run, "probe").empty                  # absent: empty, with columns
    both = results.load_runs(tmp_path / "results", "flows")
    assert list(both.columns[:3]) == ["experiment", "run", "repetition"] and len(both) == 1
    with pytest.raises(ValueError):
        results.load(run, "nope")


def test_cli_plot(tmp_path):
    pytest.importorskip("matplotlib")
    run = fake_run(tmp_path)
    r = cclab("plot", str(run))
    assert r.returncode == 0, r.stderr
    assert (run / "timeseries.png").stat().st_size > 1000
    assert cclab("plot", str(tmp_path)).returncode == 2


def test_cli_profiles_lists_every_profile():
    r = cclab("profiles")
    assert r.returncode == 0
    names = [l.split()[0] for l in r.stdout.splitlines()]
    assert {"wired", "wifi", "cellular", "geo", "leo", "starlink-seed"} <= set(names)
    assert "invalid" not in r.stdout


def test_cli_usage_errors_exit_2():
    assert cclab().returncode == 2
    assert cclab("frobnicate").returncode == 2


def _run_with(servers=(), clients=(), captures=()):
    """A Run whose Iperf (and Capture) measurements hold real processes standing in for iperf3
    servers and clients (and tcpdump: (pcap path, Popen))."""
    from cclab import measurements, spec
    from cclab.runner import Run
    exp = spec.from_dict({"profile": "wired", "flow": [{"cca": "cubic", "duration": "1s"}]}, "t")
    r = Run(exp, 1, Path("/nonexistent"), "x")
    r.iperf.servers = {i + 1: p for i, p in enumerate(servers)}
    r.iperf.clients.update({i + 1: (p, 0.0) for i, p in enumerate(clients)})
    capture = measurements.Capture(96)
    capture.files = list(captures)
    return r, capture


def test_iperf_settles_waiting_for_servers_then_reports_one_it_must_kill(monkeypatch):
    from cclab import measurements, runner
    monkeypatch.setattr(measurements, "SERVER_GRACE_S", 3.0)     # well past the quick one's 0.4 s
    monkeypatch.setattr(runner, "patience", lambda link: 0.0)     # the grace time alone
    client = subprocess.Popen(["true"])
    client.wait()
    quick = subprocess.Popen(["sleep", "0.4"])          # finishes within the grace time
    began = time.monotonic()
    r, _ = _run_with([quick], [client])
    r.iperf.settle(r)
    print(f"a server that ends within the grace: waited {time.monotonic() - began:.2f} s")
    assert quick.poll() == 0 and r.errors == []             # it ended by itself, not killed
    stuck = subprocess.Popen(["sleep", "30"])
    try:
        r, _ = _run_with([stuck], [client])
        began = time.monotonic()
        r.iperf.settle(r)
        print(f"a server stuck past the grace: waited {time.monotonic() - began:.2f} s")
        assert stuck.poll() is None                     # it returned without waiting it out
        assert len(r.errors) == 1 and "3.0 s after every client finished" in r.errors[0]
        assert len(r.errors) == 1 and r.errors[0].startswith("iperf3 server 1 still waiting")
        assert "intervals of those flows are lost" in r.errors[0]
        # a server whose client failed is not waited for (the client's failure is the error)
        failed = subprocess.Popen(["false"])
        failed.wait()
        r, _ = _run_with([stuck], [failed])
        began = time.monotonic()
        r.iperf.settle(r)
        print(f"not waited for: returned in {time.monotonic() - began:.2f} s")
        assert r.errors == []               # a wait through the grace would report the server
        # an interrupted run (a client still running) does not wait at all
        running = subprocess.Popen(["sleep", "30"])
        r, _ = _run_with([stuck], [running])
        began = time.monotonic()
        r.iperf.settle(r)
        print(f"not waited for: returned in {time.monotonic() - began:.2f} s")
        assert r.errors == []               # a wait through the grace would report the server
        running.kill()
        running.wait()
    finally:
        stuck.kill()
        stuck.wait()


def test_slow_paths_get_longer_connection_timeouts():
    from cclab import runner, spec
    geo = spec.from_dict({"profile": "geo", "override": {"down": {"rate": "50mbit", "buffer": "8bdp"}},
                          "flow": [{"cca": "cubic", "duration": "1s"}]}, "t")
    # 600 ms of base RTT, then 8 BDP of queue draining at 50 Mbit/s: 4.8 s
    assert geo.link.worst_rtt == pytest.approx(5.4, rel=0.01)
    wired = spec.from_dict({"profile": "wired", "flow": [{"cca": "cubic", "duration": "1s"}]}, "t")
    assert wired.link.worst_rtt < 0.2
    assert geo.link.handshake_loss == 0
    argv = measure.iperf_client(geo.flows[0], "10.1.1.2", 5201, 0.5, connect_timeout=runner.patience(geo.link))
    assert argv[argv.index("--connect-timeout") + 1] == "16200"          # 3 x 5.4 s
    assert runner.patience(wired.link) == runner.CONNECT_TIMEOUT_S
    # 20 % loss on the data direction: six tries of a SYN (0.2^6 < 1e-4), sent at 0, 1, 3, 7, 15,
    # 31 s; the sixth may be answered until a seventh would go out, at 63 s
    lossy = spec.from_dict({"profile": "wired", "override": {"down": {"loss": 20}},
                            "flow": [{"cca": "cubic", "duration": "1s"}]}, "t")
    assert lossy.link.handshake_loss == pytest.approx(0.2)
    assert runner.patience(lossy.link) == pytest.approx(63)
    # 2 %: three tries (0, 1 and 3 s), the third answered before 7 s
    two_pct = spec.from_dict({"profile": "wired", "override": {"down": {"loss": 2}},
                              "flow": [{"cca": "cubic", "duration": "1s"}]}, "t")
    assert runner.patience(two_pct.link) == pytest.approx(7)
    # lab 3's 10 %: four tries, the fourth at 7 s answered before 15 s (one RTT, 7.04 s, was
    # too little for the emulated guest once)
    ten = spec.from_dict({"profile": "wired", "override": {"down": {"loss": 10}},
                          "flow": [{"cca": "cubic", "duration": "1s"}]}, "t")
    assert runner.patience(ten.link) == pytest.approx(15)


def test_a_clients_deadline_runs_from_its_own_start_and_grows_with_the_path():
    from cclab import runner, spec
    from cclab.runner import Run
    flows = [{"cca": "cubic", "duration": "32s", "start": "2s"},
             {"cca": "search", "duration": "15s", "start": "40s", "pair": 2}]
    geo = spec.from_dict({"profile": "geo", "override": {"pairs": 2, "down": {
        "rate": "50mbit", "buffer": "8bdp"}}, "flow": flows}, "t")
    wired = spec.from_dict({"profile": "wired", "override": {"pairs": 2}, "flow": flows}, "t")
    g, w = Run(geo, 1, Path("/nonexistent"), "x"), Run(wired, 1, Path("/nonexistent"), "x")
    limit = geo.planned_length()                                   # 56 s
    # lab 4's GEO case: flow 2's client started 5 s late (an earlier flow's queue still
    # draining); its deadline follows its own start, plus two patiences of the path (16.2 s)
    assert g._deadline(2, 45.0, limit) == pytest.approx(45 + 15 + 2 * 16.2 + runner.CLIENT_GRACE_S)
    assert g._deadline(2, 45.0, limit) > g._deadline(2, 40.0, limit) > limit + 15
    # a short path gets a shorter wait: two connection timeouts and the slack
    assert w._deadline(2, 40.0, limit) == pytest.approx(40 + 15 + 2 * runner.CONNECT_TIMEOUT_S
                                                        + runner.CLIENT_GRACE_S)
    # a sized flow has the experiment's time limit
    sized = spec.from_dict({"profile": "wired", "flow": [{"cca": "cubic", "bytes": "1MB"}]}, "t")
    s = Run(sized, 1, Path("/nonexistent"), "x")
    assert s._deadline(1, 0.0, sized.time_limit) == sized.time_limit + runner.CLIENT_GRACE_S


def test_a_capture_settles_before_it_is_stopped(tmp_path, monkeypatch):
    from cclab import measurements
    # a capture counts as settled after CAPTURE_SETTLE_S without growth: longer here than the
    # writer's pauses could be stretched on a busy host
    monkeypatch.setattr(measurements, "CAPTURE_SETTLE_S", 1.5)
    monkeypatch.setattr(measurements, "CAPTURE_WAIT_S", 5.0)
    client = subprocess.Popen(["true"])
    client.wait()
    pcap = tmp_path / "raw" / "capture-cc-s1.pcap"
    pcap.parent.mkdir()
    # a tcpdump still writing what it had buffered for 1 s after the flows
    writer = subprocess.Popen(["sh", "-c", f"for i in 1 2 3 4 5 6 7 8 9 10; do echo x >> {pcap}; "
                                            "sleep 0.1; done; sleep 30"])
    try:
        r, capture = _run_with(clients=[client], captures=[(pcap, writer)])
        began = time.monotonic()
        capture.settle(r)
        print(f"capture caught up in {time.monotonic() - began:.2f} s")
        assert pcap.read_text().count("x") == 10 and r.warnings == []
    finally:
        writer.kill()
        writer.wait()
    # one that never stops growing: stopped after CAPTURE_WAIT_S with a warning
    endless = subprocess.Popen(["sh", "-c", f"while :; do echo x >> {pcap}; sleep 0.05; done"])
    try:
        r, capture = _run_with(clients=[client], captures=[(pcap, endless)])
        began = time.monotonic()
        capture.settle(r)
        print(f"a capture that never settles: stopped after {time.monotonic() - began:.2f} s")
        assert endless.poll() is None and "still growing" in r.warnings[0]
    finally:
        endless.kill()
        endless.wait()


def test_listening_ports_read_from_a_namespaces_own_tables():
    """A listening socket of this process shows in /proc/<pid>/net/tcp (or tcp6) as LISTEN; a
    connected one does not."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    try:
        ports = measurements.listening_ports(os.getpid())
        assert port in ports and cli.getsockname()[1] not in ports
    finally:
        cli.close()
        srv.close()
    assert port not in measurements.listening_ports(os.getpid())
    assert measurements.listening_ports(2 ** 22 + 7) == set()       # no such process



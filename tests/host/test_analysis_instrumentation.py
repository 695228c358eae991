"""The tcp_probe tracer's cheap mode, against a fake tracefs: nothing is read while the flows
run unless a CPU's ring buffer passes half full; everything is read at stop()."""

import os
import time

from cclab import measure

LINE = ("iperf3-812 [001] ..s1. 1234.500000: tcp_probe: family=AF_INET src=10.0.1.2:40022 "
        "dest=10.1.1.2:5201 mark=0x0 data_len=0 snd_nxt=0x10 snd_una=0x8 snd_cwnd=10 "
        "ssthresh=2147483647 snd_wnd=64000 srtt=40123 rcv_wnd=65536 sock_cookie=1\n")

STATS = ("entries: {n}\noverrun: 0\ncommit overrun: 0\nbytes: {b}\noldest event ts: 12.5\n"
         "now ts: 13.0\ndropped events: {d}\nread events: 0\n")


def test_buffer_stats_parses_the_kernel_counters():
    s = measure.buffer_stats(STATS.format(n=7, b=4096, d=3))
    assert s["entries"] == 7 and s["bytes"] == 4096 and s["dropped events"] == 3
    assert s["commit overrun"] == 0
    assert "oldest event ts" not in s            # not a whole number


def test_trace_buffer_size_is_bounded_by_memory():
    assert measure.trace_buffer_kb(4_000_000, 2) == 32768          # plenty: the cap
    assert measure.trace_buffer_kb(1_000_000, 4) == 15625          # 1/16 of memory over CPUs
    assert measure.trace_buffer_kb(100_000, 8) == 4096              # never below the floor
    assert measure.trace_buffer_kb(None, 2) == 4096


def _fake(root):
    def on_created(path):
        os.makedirs(os.path.join(path, "events", "tcp", "tcp_probe"))
        os.makedirs(os.path.join(path, "options"))
        for cpu in (0, 1):
            d = os.path.join(path, "per_cpu", f"cpu{cpu}")
            os.makedirs(d)
            with open(os.path.join(d, "stats"), "w") as f:
                f.write(STATS.format(n=0, b=0, d=0))
        with open(os.path.join(path, "trace_pipe"), "w") as f:
            f.write(LINE * 3)
    os.makedirs(os.path.join(root, "instances"))
    os.makedirs(os.path.join(root, "options"))
    with open(os.path.join(root, "options", "record-cmd"), "w") as f:
        f.write("1")
    return on_created


def _set_stats(inst, cpu, b, d=0):
    with open(os.path.join(inst, "per_cpu", f"cpu{cpu}", "stats"), "w") as f:
        f.write(STATS.format(n=b // 128, b=b, d=d))


def test_tracer_reads_nothing_during_the_run_until_a_buffer_fills(tmp_path):
    out = tmp_path / "tcp_probe.txt"
    t = measure.ProbeTracer([5201, 5202], out)
    t.root = str(tmp_path / "tracefs")
    t.check_every = 0.05
    t.start(_fake(t.root))
    inst = t.path
    try:
        assert open(os.path.join(inst, "events/tcp/tcp_probe/filter")).read() == \
            "dport >= 5201 && dport <= 5202"
        assert open(os.path.join(inst, "events/tcp/tcp_probe/enable")).read() == "1"
        assert open(os.path.join(inst, "options/overwrite")).read() == "0"
        # no command-name recording: it would rewrite the scheduler's code at each enable
        assert open(os.path.join(t.root, "options/record-cmd")).read() == "0"
        assert open(os.path.join(inst, "options/record-cmd")).read() == "0"
        assert int(open(os.path.join(inst, "buffer_size_kb")).read()) == t.buffer_kb >= 4096
        time.sleep(0.3)
        assert out.read_bytes() == b""           # below half full: the thread left it alone
        _set_stats(inst, 1, t.buffer_kb * 1024 * 6 // 10)
        deadline = time.monotonic() + 5
        while out.read_bytes() == b"" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.read_text() == LINE * 3        # past half full: drained
        with open(os.path.join(inst, "trace_pipe"), "a") as f:
            f.write(LINE)                          # more events after the drain
        _set_stats(inst, 0, 0, d=5)
        _set_stats(inst, 1, 0)
    finally:
        t.stop()
    assert out.read_text() == LINE * 4             # the rest was read at stop()
    assert t.lost == 5
    assert measure.parse_probe(out.read_text(), 1234.0, lambda a, b: 1)[0]["srtt_us"] == 40123

"""The tcp_probe tracer's cheap mode, against a fake tracefs: nothing is read while the flows
run unless a CPU's ring buffer passes half full; everything is read at stop()."""

import os
import shutil
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


def test_a_kept_instance_is_emptied_and_set_up_again_by_the_next_tracer(tmp_path, monkeypatch):
    """stop(keep=True) leaves the instance (events off) for this process's next tracer, which
    clears its buffers and sets its own filters instead of making a new one; a plain stop(), or
    drop_kept_instances(), removes it."""
    removed = []

    def remove(path):                         # a fake tracefs's files do not go with rmdir
        removed.append(path)
        shutil.rmtree(path)
    monkeypatch.setattr(measure, "stop_trace_instance", remove)
    monkeypatch.setattr(measure, "_KEPT_INSTANCES", {})
    root = str(tmp_path / "tracefs")
    first = measure.ProbeTracer([5201, 5202], tmp_path / "a.txt")
    first.root = root
    first.start(_fake(root))
    inst = first.path
    first.stop(keep=True)
    assert removed == [] and os.path.isdir(inst)
    assert open(os.path.join(inst, "events/tcp/tcp_probe/enable")).read() == "0"
    assert measure._KEPT_INSTANCES == {inst: first.buffer_kb}
    with open(os.path.join(inst, "trace"), "w") as f:
        f.write("events of the last run\n")

    _set_stats(inst, 0, 0, d=3)               # what the kernel dropped before, if it counts on
    made = []
    second = measure.ProbeTracer([5203, 5206], tmp_path / "b.txt")
    second.root = root
    second.check_every = 0.05
    second.start(made.append)                 # a new instance would have no events/ folder
    assert made == [inst] and second.path == inst and measure._KEPT_INSTANCES == {}
    assert open(os.path.join(inst, "trace")).read() == ""            # its buffers emptied
    assert open(os.path.join(inst, "events/enable")).read() == "0"   # every event off first
    assert open(os.path.join(inst, "events/tcp/tcp_probe/filter")).read() == \
        "dport >= 5203 && dport <= 5206"
    assert open(os.path.join(inst, "events/tcp/tcp_probe/enable")).read() == "1"
    _set_stats(inst, 0, 0, d=7)
    second.stop()
    assert second.lost == 4                   # this run's drops only
    assert removed == [inst] and measure._KEPT_INSTANCES == {}

    third = measure.ProbeTracer([5201], tmp_path / "c.txt")
    third.root = root
    third.start(_fake(str(tmp_path / "elsewhere")))            # a new instance: its files
    third.stop(keep=True)
    measure._KEPT_INSTANCES[inst] = 1                           # as if kept with other buffers
    fourth = measure.ProbeTracer([5201], tmp_path / "d.txt")
    fourth.root = root
    fourth.start(_fake(str(tmp_path / "elsewhere-too")))
    assert removed == [inst, inst] and measure._KEPT_INSTANCES == {}   # not reused: made again
    fourth.stop(keep=True)
    assert measure._KEPT_INSTANCES == {inst: fourth.buffer_kb}
    measure.drop_kept_instances()
    assert removed == [inst, inst, inst] and measure._KEPT_INSTANCES == {}

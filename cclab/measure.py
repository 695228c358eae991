"""Measurements: the commands that take them, and the parsers that turn their output into rows.

    iperf3 -J            flows.csv, iperf.csv      (sender side: cwnd, rtt, retransmits)
    sock_diag, 20 Hz     ss.csv                    (what ss -ti shows: cwnd, ssthresh, rtt,
                                                    pacing, delivery, retransmissions, module
                                                    info like bbr:(...); see netlink.py)
    tcp:tcp_probe        probe.csv                 (per ACK: cwnd, ssthresh, srtt)
    rtnetlink, 10 Hz     qdisc.csv                 (what tc -s qdisc shows: backlog, drops)
    ping -D              ping.csv                  (RTT idle and under load)
    tcpdump (optional)   raw/capture-<host>.pcap   (open with tshark or Wireshark)
    /proc/stat, 10 Hz    cpu.csv                   (busy fraction per CPU and "all")
    spline:spline_mode   spline.csv                (the kit's modules' tracepoints, when
    search:search_exit   search.csv                 measure.events names them)

The parsers are pure functions of the text, so they are tested without a network.  The classes
that take each measurement during a run are in cclab.measurements.
"""

from __future__ import annotations

import glob
import json
import os
import numbers
import re
import threading
import time
from pathlib import Path

from . import netlink
from .spec import MODULE_EVENTS, Experiment, Flow  # noqa: F401

TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


# ---------------------------------------------------------------- commands

def iperf_server(port: int, interval: float) -> list[str]:
    return ["iperf3", "-s", "-1", "-J", "-p", str(port), "-i", f"{interval:g}"]


def iperf_client(f: Flow, dst: str, port: int, interval: float, connect_timeout: float = 5.0) -> list[str]:
    argv = ["iperf3", "-c", dst, "-p", str(port), "-J", "-i", f"{interval:g}",
            "-P", str(f.streams), "--connect-timeout", str(int(connect_timeout * 1000))]
    argv += ["-n", str(f.bytes)] if f.bytes is not None else ["-t", f"{f.duration:g}"]
    if f.protocol == "udp":
        argv += ["-u", "-b", str(int(f.rate))]
        if f.length:
            argv += ["-l", str(f.length)]
    else:
        argv += ["-C", f.cca]
        if f.rate:
            argv += ["-b", str(int(f.rate))]
    return argv


def ping(dst: str, interval: float) -> list[str]:
    return ["ping", "-D", "-O", "-n", "-i", f"{interval:g}", dst]


def capture(dev: str, path: str, snaplen: int) -> list[str]:
    return ["tcpdump", "-q", "-n", "-U", "-i", dev, "-s", str(snaplen), "-w", path, "tcp"]


# ---------------------------------------------------------------- tcp_probe via tracefs

def tracefs() -> str | None:
    """Where tracefs is mounted; mounts it at /sys/kernel/tracing if it is not."""
    for d in TRACEFS:
        if os.path.isdir(os.path.join(d, "instances")):
            return d
    if os.path.isdir(TRACEFS[0]):
        import subprocess
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS[0]], capture_output=True)
        if os.path.isdir(os.path.join(TRACEFS[0], "instances")):
            return TRACEFS[0]
    return None


def trace_instance_candidates() -> list[str]:
    return [os.path.join(d, "instances", "cclab") for d in TRACEFS]


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def no_cmdline_recording(root: str) -> bool:
    """Turn off tracefs' record-cmd on the machine (`root`'s options, which a new instance
    copies when it is made).  With it on, enabling or disabling any event registers or
    removes the tracer's own probes on the scheduler's tracepoints (sched_switch,
    sched_wakeup), and each of those rewrites the scheduler's code while it runs
    (text_poke_bp).  In the software-emulated VM a vCPU inside __schedule at that moment
    never answered the patching CPU's call: the guest froze for good (the stacks of a frozen
    make test guest, NMI'd by vm/run.sh, showed exactly that).  The kit's parsers read no
    command names.  True when it is off."""
    try:
        _write(os.path.join(root, "options", "record-cmd"), "0")
        return True
    except OSError:
        return False


def stop_trace_instance(path: str) -> None:
    try:
        _write(os.path.join(path, "events/enable"), "0")
    except OSError:
        pass
    for _ in range(20):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)          # busy while a reader still has trace_pipe open


def missing_events(events) -> list[str]:
    """The tracepoints among `events` the running kernel does not offer (module not loaded)."""
    root = tracefs()
    if root is None:
        return list(events)
    return [e for e in events if not os.path.isdir(os.path.join(root, "events", *e.split(":")))]


def buffer_stats(text: str) -> dict[str, int]:
    """A per-CPU ring buffer's counters from tracefs per_cpu/cpuN/stats ("bytes: 123" ...)."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        v = v.strip()
        if sep and v.isdigit():
            out[k.strip()] = int(v)
    return out


def trace_buffer_kb(mem_available_kb: int | None, cpus: int, most: int = 32768,
                    least: int = 4096) -> int:
    """Per-CPU ring buffer size for a run: large enough that a run of tens of seconds at a few
    hundred Mbit/s (~130 bytes per event, one event per ACK) never has to be read while its
    flows run, at most 1/16 of the available memory over all CPUs."""
    if not mem_available_kb:
        return least
    return int(max(least, min(most, mem_available_kb // (16 * max(1, cpus)))))


def _mem_available_kb() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


# Tracing instances this process stopped with keep=True, for its next run (path -> per-CPU
# buffer size in KB).  Making an instance and sizing its buffers, then removing it, costs about
# 0.55 s a run in the software-emulated VM; clearing a kept one about 0.05 s.
_KEPT_INSTANCES: dict[str, int] = {}


def drop_kept_instances() -> None:
    """Remove the tracing instances kept for a next run (the runner's kept network went down)."""
    while _KEPT_INSTANCES:
        stop_trace_instance(_KEPT_INSTANCES.popitem()[0])


class ProbeTracer:
    """tcp:tcp_probe (and any module tracepoints asked for) in a private tracing instance,
    filtered to the run's ports in the kernel.  Timestamps use CLOCK_MONOTONIC ("mono").

    Cheap while the flows run: the kernel keeps events in a large per-CPU ring buffer in
    binary form; they are turned into text (trace_pipe) and written to `out` only when a CPU's
    buffer passes `drain_at` of its size (checked every `check_every` s by a thread that
    otherwise sleeps) and once more at stop(), after the flows.  Overwriting is off, so a full
    buffer drops the newest events rather than old ones; `lost` counts what the kernel dropped."""

    drain_at = 0.5
    check_every = 0.5

    def __init__(self, ports: list[int], out: Path, events=("tcp:tcp_probe",)):
        self.ports = ports
        self.out = out
        self.events = list(events)
        self.path = None
        self.thread = None
        self.fd = None
        self.stopping = False
        self.stop_event = threading.Event()
        self.buffer_kb = None
        self.lost = 0
        self.lost_before = 0
        self.root = None                         # tests point this at a fake tracefs

    def start(self, on_created) -> None:
        root = self.root or tracefs()
        if root is None:
            raise RuntimeError("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)")
        self.path = os.path.join(root, "instances", "cclab")
        self.buffer_kb = trace_buffer_kb(_mem_available_kb(), os.cpu_count() or 1)
        if _KEPT_INSTANCES.pop(self.path, None) == self.buffer_kb and os.path.isdir(self.path):
            # this process's instance from its last run, set up as below: every event off
            # and every CPU's buffer emptied
            _write(os.path.join(self.path, "events/enable"), "0")
            with open(os.path.join(self.path, "trace"), "w"):
                pass
            on_created(self.path)
        else:
            if os.path.isdir(self.path):
                stop_trace_instance(self.path)
            no_cmdline_recording(root)           # before the instance copies the setting
            os.mkdir(self.path)
            on_created(self.path)
            no_cmdline_recording(self.path)      # kernels that let an instance have its own
            _write(os.path.join(self.path, "trace_clock"), "mono")
            _write(os.path.join(self.path, "buffer_size_kb"), str(self.buffer_kb))
            try:
                _write(os.path.join(self.path, "options/overwrite"), "0")
            except OSError:
                pass                             # older kernels: overwrite the oldest instead
        self.lost_before = self._lost_count()    # a kept instance's counters go on counting
        lo, hi = min(self.ports), max(self.ports)
        for event in self.events:
            ev = os.path.join(self.path, "events", *event.split(":"))
            _write(os.path.join(ev, "filter"), f"dport >= {lo} && dport <= {hi}")
            _write(os.path.join(ev, "enable"), "1")
        self.fd = os.open(os.path.join(self.path, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK)
        self.thread = threading.Thread(target=self._copy, daemon=True)
        self.thread.start()

    def _cpu_stats(self) -> list[dict[str, int]]:
        out = []
        for d in sorted(glob.glob(os.path.join(self.path, "per_cpu", "cpu*"))):
            try:
                with open(os.path.join(d, "stats")) as f:
                    out.append(buffer_stats(f.read()))
            except OSError:
                pass
        return out

    def _fullest(self) -> float:
        """The fullest CPU buffer's fill, as a fraction of its size."""
        size = (self.buffer_kb or 1) * 1024.0
        return max((s.get("bytes", 0) / size for s in self._cpu_stats()), default=0.0)

    def _drain(self, f, budget: float | None = None) -> None:
        """Copy what trace_pipe holds to `f` in big reads, until it is empty (or `budget` s)."""
        until = None if budget is None else time.monotonic() + budget
        while until is None or time.monotonic() < until:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            f.write(chunk)
        f.flush()

    def _copy(self) -> None:
        with open(self.out, "ab") as f:
            while not self.stop_event.wait(self.check_every):
                if self._fullest() >= self.drain_at:
                    self._drain(f, budget=5.0)
            self._drain(f)                       # the events are off: read what is left
            self.lost = self._lost_count() - self.lost_before

    def _lost_count(self) -> int:
        """Events the kernel dropped in this instance so far, over its CPUs."""
        return sum(s.get("overrun", 0) + s.get("dropped events", 0) for s in self._cpu_stats())

    def stop(self, keep: bool = False) -> None:
        """Events off, the rest of the buffers read; then the instance is removed, or with
        `keep` left (empty events, full-size buffers) for this process's next start()."""
        if self.path is None:
            return
        for event in self.events:
            try:
                _write(os.path.join(self.path, "events", *event.split(":"), "enable"), "0")
            except OSError:
                pass
        self.stopping = True
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=120)      # the last drain formats the whole run's events
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if keep and self.thread is not None and not self.thread.is_alive():
            _KEPT_INSTANCES[self.path] = self.buffer_kb
        else:
            stop_trace_instance(self.path)
        self.path = None


# ---------------------------------------------------------------- parsers

def parse_sockets(path, host: str, t0: float, flow_of) -> list[dict]:
    """Rows for ss.csv from a socket recording; flow_of(local_port, peer_port) gives the flow
    number, or None for sockets that are not a flow's data connection."""
    rows = []
    for stamp, raw in netlink.read_records(path):
        for sock in netlink.parse_sockets(raw):
            flow = flow_of(sock["local_port"], sock["peer_port"])
            if flow is not None:
                rows.append(dict(netlink.row(sock), t=round(stamp - t0, 6), flow=flow, host=host))
    return rows


def parse_qdiscs(path, node: str, devs: dict[int, tuple[str, str]], t0: float) -> list[dict]:
    """Rows for qdisc.csv from a qdisc recording; devs maps ifindex to (device, direction)."""
    rows = []
    for stamp, raw in netlink.read_records(path):
        for q in netlink.parse_qdiscs(raw, devs):
            dev, direction = devs[q["ifindex"]]
            rows.append({"t": round(stamp - t0, 6), "node": node, "dev": dev,
                         "direction": direction, "kind": q.get("kind"), "handle": q["handle"],
                         "parent": q["parent"], "bytes": q.get("bytes"),
                         "packets": q.get("packets"), "drops": q.get("drops"),
                         "overlimits": q.get("overlimits"), "requeues": q.get("requeues"),
                         "backlog_bytes": q.get("backlog"), "backlog_packets": q.get("qlen")})
    return rows


_PING = re.compile(r"^\[(\d+\.\d+)\] (?:\d+ bytes from \S+ icmp_seq=(\d+) .*time=([\d.]+) ms"
                   r"|no answer yet for icmp_seq=(\d+))")


def parse_ping(text: str, src: str, dst: str, t0: float, interval: float) -> list[dict]:
    """One row per echo request: t is when it was sent, rtt_ms empty if it got no reply."""
    replies, missing = {}, {}
    for line in text.splitlines():
        m = _PING.match(line)
        if not m:
            continue
        stamp = float(m.group(1))
        if m.group(2):
            rtt = float(m.group(3))
            replies[int(m.group(2))] = (stamp - rtt / 1000.0, rtt)
        else:
            missing[int(m.group(4))] = stamp - interval
    rows = []
    for seq in sorted(set(replies) | set(missing)):
        sent, rtt = replies.get(seq, (missing.get(seq), None))
        rows.append({"t": round(sent - t0, 6), "src": src, "dst": dst, "seq": seq, "rtt_ms": rtt})
    return rows


_PROBE = re.compile(r"\s(\d+\.\d+): tcp_probe: (.*)$")
# The whole line as Linux 6.1-6.12 print it (include/trace/events/tcp.h): one match per line
# over the whole text is 1.4 times faster than splitting each line into fields (a lab 4 trace on
# the host).  A trace with any other line form is read field by field (_probe_fields).
_PROBE_LINE = re.compile(
    r"\s(\d+\.\d+): tcp_probe: family=\S+ src=\S*:(\d+) dest=\S*:(\d+) mark=\S+ "
    r"data_len=(\d+) snd_nxt=(0x[0-9a-f]+|0) snd_una=(0x[0-9a-f]+|0) snd_cwnd=(\d+) "
    r"ssthresh=(\d+) snd_wnd=(\d+) srtt=(\d+) [^\n]*$", re.M)


def parse_probe(text: str, mono0: float, flow_of) -> list[dict]:
    """Rows of the tcp_probe table from tracefs text, for the sockets flow_of() knows."""
    found = _PROBE_LINE.findall(text)
    if len(found) != text.count(": tcp_probe: "):
        return _probe_fields(text, mono0, flow_of)
    # A lab run's trace holds tens of thousands of these lines, parsed in a software-emulated
    # guest: each socket's flow is looked up once, and a field is made a number only in a row
    # that is kept (the sequence numbers print in hex, 0x..., or as 0; the rest in decimal).
    rows, flows = [], {}
    for stamp, local, peer, data_len, nxt, una, cwnd, ssthresh, wnd, srtt in found:
        flow = flows.get((local, peer), 0)
        if flow == 0:
            flow = flows[local, peer] = flow_of(int(local), int(peer))
        if flow is None:
            continue
        rows.append({"t": round(float(stamp) - mono0, 6), "flow": flow, "local_port": int(local),
                     "peer_port": int(peer), "snd_cwnd": int(cwnd), "ssthresh": int(ssthresh),
                     "srtt_us": int(srtt), "snd_wnd": int(wnd), "snd_nxt": int(nxt, 16),
                     "snd_una": int(una, 16), "data_len": int(data_len)})
    return rows


def _probe_fields(text: str, mono0: float, flow_of) -> list[dict]:
    rows = []
    for line in text.splitlines():
        m = _PROBE.search(line)
        if not m:
            continue
        kv = dict(p.split("=", 1) for p in m.group(2).split() if "=" in p)
        try:
            local = int(kv["src"].rsplit(":", 1)[1])
            peer = int(kv["dest"].rsplit(":", 1)[1])
        except (KeyError, ValueError, IndexError):
            continue
        flow = flow_of(local, peer)
        if flow is None:
            continue
        rows.append({"t": round(float(m.group(1)) - mono0, 6), "flow": flow, "local_port": local,
                     "peer_port": peer, "snd_cwnd": _probe_int(kv, "snd_cwnd"),
                     "ssthresh": _probe_int(kv, "ssthresh"), "srtt_us": _probe_int(kv, "srtt"),
                     "snd_wnd": _probe_int(kv, "snd_wnd"), "snd_nxt": _probe_int(kv, "snd_nxt"),
                     "snd_una": _probe_int(kv, "snd_una"), "data_len": _probe_int(kv, "data_len")})
    return rows


def _probe_int(kv: dict, key: str) -> int | None:
    """A tcp_probe field as a number: sequence numbers print in hex (0x...), the rest in
    decimal; a field the kernel did not print is None."""
    try:
        return int(kv[key], 0)
    except (KeyError, ValueError):
        return None


_EVENT = re.compile(r"\s(\d+\.\d+): (spline_mode|search_exit): (.*)$")
_EVENT_TABLE = {ev.split(":", 1)[1]: table for ev, table in MODULE_EVENTS.items()}


_EVENT_MARKS = tuple(f": {name}: " for name in _EVENT_TABLE)


def _lines_with(text: str, marks) -> list[str]:
    """The lines of `text` that hold any of `marks`, in order: found by substring search, not
    line by line (the modules' events are a few lines among tcp_probe's thousands)."""
    starts = set()
    for mark in marks:
        i = text.find(mark)
        while i >= 0:
            starts.add(text.rfind("\n", 0, i) + 1)
            i = text.find(mark, i + len(mark))
    lines = []
    for start in sorted(starts):
        end = text.find("\n", start)
        lines.append(text[start:] if end < 0 else text[start:end])
    return lines


def parse_module_events(text: str, mono0: float, flow_of) -> dict[str, list[dict]]:
    """Rows of the module event tables ({"spline": [...], "search": [...]}) from tracefs text
    (Spline's modes by name, SEARCH's norm_diff in per mille, as the tracepoints print them)."""
    out = {"spline": [], "search": []}
    for line in _lines_with(text, _EVENT_MARKS):
        m = _EVENT.search(line)
        if not m:
            continue
        kv = dict(p.split("=", 1) for p in m.group(3).split() if "=" in p)
        try:
            local, peer = int(kv["sport"]), int(kv["dport"])
        except (KeyError, ValueError):
            continue
        flow = flow_of(local, peer)
        if flow is None:
            continue
        row = {"t": round(float(m.group(1)) - mono0, 6), "flow": flow}
        for k, v in kv.items():
            row[k] = int(v) if v.lstrip("-").isdigit() else v
        out[_EVENT_TABLE[m.group(2)]].append(row)
    return out


def parse_iperf(doc: dict, flow: int, t_spawn: float) -> tuple[list[dict], dict]:
    """Interval rows and a summary from an iperf3 -J document (possibly a partial one)."""
    rows = []
    for iv in doc.get("intervals", []):
        for s in iv.get("streams", []):
            rows.append({"flow": flow, "side": "sender" if s.get("sender", True) else "receiver",
                         "stream": s.get("socket"),
                         "t_start": round(t_spawn + s.get("start", 0), 6),
                         "t_end": round(t_spawn + s.get("end", 0), 6),
                         "bytes": s.get("bytes"), "bits_per_second": s.get("bits_per_second"),
                         "retransmits": s.get("retransmits"), "snd_cwnd": s.get("snd_cwnd"),
                         "rtt_us": s.get("rtt"), "rttvar_us": s.get("rttvar"),
                         "lost_packets": s.get("lost_packets"), "packets": s.get("packets")})
    end = doc.get("end", {})
    sent = end.get("sum_sent") or end.get("sum") or {}
    recv = end.get("sum_received") or {}
    udp = end.get("sum") if "lost_percent" in end.get("sum", {}) else None
    streams = [s.get("sender", {}) for s in end.get("streams", []) if s.get("sender")]
    summary = {
        "cca_iperf": end.get("sender_tcp_congestion"),
        "sent_bytes": sent.get("bytes"),
        "received_bytes": recv.get("bytes"),
        "throughput_bps": recv.get("bits_per_second"),
        "retransmits": sent.get("retransmits"),
        "mean_rtt_us": (sum(s.get("mean_rtt", 0) for s in streams) / len(streams)
                        if streams and all("mean_rtt" in s for s in streams) else None),
        "min_rtt_us": min((s["min_rtt"] for s in streams if "min_rtt" in s), default=None),
        "lost_percent": udp.get("lost_percent") if udp else None,
        "error": doc.get("error"),
        "local_ports": [c.get("local_port") for c in doc.get("start", {}).get("connected", [])],
    }
    if udp:
        recv_bytes = udp.get("bytes", 0) * (1 - (udp.get("lost_percent") or 0) / 100)
        summary["received_bytes"] = summary["received_bytes"] or int(recv_bytes)
        secs = udp.get("seconds") or 0
        if summary["throughput_bps"] is None and secs:
            summary["throughput_bps"] = recv_bytes * 8 / secs
    return rows, summary


def udp_never_started(doc: dict) -> bool:
    """True for the iperf3 -J document of a stopped client that reached its server (the
    control connection gave it a cookie) but sent no data: a UDP client stuck in its
    stream handshake, which iperf3 3.12 does not retry."""
    if not doc.get("start", {}).get("cookie"):
        return False                               # never connected, or nothing written
    rows, summary = parse_iperf(doc, 0, 0.0)
    return not any(r["bytes"] for r in rows) and not summary["sent_bytes"]


def read_json(path: Path) -> dict:
    """An iperf3 JSON file; iperf3 may have been killed, so take what parses."""
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        start = text.find("{")
        try:
            return json.loads(text[start:]) if start >= 0 else {}
        except ValueError:
            return {}


# iperf3 sends a cookie (37 bytes, one segment) on every connection before its test begins
COOKIE_SEGMENTS = 1
COOKIE_BYTES = 37


def sent_payload(sample) -> bool:
    """Whether a socket sample (a dict or a table row) shows bytes beyond iperf3's cookie.

    Counted in new bytes: what the socket sent less what it sent again.  Under loss the cookie
    itself goes out more than once, and every copy is a data segment: a lab 3 run at 20 % loss
    sent its cookie twice, and counting segments put the test's start 0.3 s before the cookie
    had even arrived.  Samples without the byte counters (older tables) fall back to segments."""
    def counter(name):
        v = sample.get(name)
        return v if isinstance(v, numbers.Real) and v == v else None     # not None, not NaN
    sent = counter("bytes_sent")
    if sent is not None:
        return sent - (counter("bytes_retrans") or 0) > COOKIE_BYTES
    return (sample.get("data_segs_out") or 0) > COOKIE_SEGMENTS


def test_start(ss_rows: list[dict], flow: int, t_spawn: float, period: float) -> float:
    """When a flow's iperf3 test began -- the zero of its intervals -- on the run's clock.

    iperf3 connects its control connection and then each stream in turn, sends a cookie on
    each, and starts the test once all are up.  On an idle path that takes a few RTTs, but a SYN
    that is lost waits 1 s to be sent again, and a SYN behind another flow's queue waits for
    it: ten streams started 0.5 s after a flow ended on the 400 ms starlink-seed queue took
    0.8-4.3 s to connect in the lab VM.  So the client's spawn time is not the start.  The
    flow's socket samples bound it: the test began after the last sample in which none of its
    sockets had sent more than the cookie, and by the first in which one had; this returns the
    midpoint (off by at most half the sampling period), and never a time before the spawn.
    Without such samples (UDP, no socket sampler) it returns the spawn time."""
    mine = [r for r in ss_rows if r["flow"] == flow]
    sent = [r["t"] for r in mine if sent_payload(r)]
    if not sent:
        return t_spawn
    first = min(sent)
    before = [r["t"] for r in mine if r["t"] < first]
    last_idle = max(before) if before else first - period
    return max(t_spawn, (max(last_idle, t_spawn) + first) / 2)


def overlaps(flows: list[dict], slack: float = 0.1) -> list[str]:
    """Warnings for flows the spec runs one after the other (its windows start .. start +
    duration do not meet) whose tests overlapped by more than `slack` s: their results are not
    those of one flow alone on the link (a test begins late when its connections were slow)."""
    out = []
    timed = [f for f in flows if f.get("t_start") is not None and f.get("t_end") is not None
             and f.get("duration")]
    for a in timed:
        for b in timed:
            if b["start"] < a["start"] + a["duration"] or a is b:
                continue
            late = a["t_end"] - b["t_start"]
            if late > slack:
                out.append(f"flow {a['flow']}'s test ran until {a['t_end']:.2f} s, {late:.2f} s into "
                           f"flow {b['flow']}'s, which the spec starts after it ends")
    return out


def flow_lookup(experiment: Experiment, local_ports: dict[int, list[int]]):
    """flow_of(local_port, peer_port) for the sender's sockets of each flow; iperf3's control
    connection is left out when the data connections' ports are known."""
    by_port = {experiment.port(i): i + 1 for i in range(len(experiment.flows))}

    def flow_of(local: int, peer: int):
        flow = by_port.get(peer)
        if flow is None:
            return None
        known = local_ports.get(flow)
        if known and local not in known:
            return None
        return flow
    return flow_of

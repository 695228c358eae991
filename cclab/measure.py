"""Measurements: the commands that take them, and the parsers that turn their output into rows.

    iperf3 -J            flows.csv, iperf.csv      (sender side: cwnd, rtt, retransmits)
    sock_diag, 20 Hz     ss.csv                    (what ss -ti shows: cwnd, ssthresh, rtt,
                                                    pacing, delivery, retransmissions, module
                                                    info like bbr:(...); see netlink.py)
    tcp:tcp_probe        probe.csv                 (per ACK: cwnd, ssthresh, srtt)
    rtnetlink, 10 Hz     qdisc.csv                 (what tc -s qdisc shows: backlog, drops)
    ping -D              ping.csv                  (RTT idle and under load)
    tcpdump (optional)   raw/capture-<host>.pcap   (open with tshark or Wireshark)

The parsers are pure functions of the text, so they are tested without a network.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

from . import netlink
from .spec import Experiment, Flow

TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


# ---------------------------------------------------------------- commands

def iperf_server(port: int, interval: float) -> list[str]:
    return ["iperf3", "-s", "-1", "-J", "-p", str(port), "-i", f"{interval:g}"]


def iperf_client(f: Flow, dst: str, port: int, interval: float) -> list[str]:
    argv = ["iperf3", "-c", dst, "-p", str(port), "-J", "-i", f"{interval:g}",
            "-P", str(f.streams), "--connect-timeout", "5000"]
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


def ping(dst: str, interval: float) -> list[str]:
    return ["ping", "-D", "-O", "-n", "-i", f"{interval:g}", dst]


def socket_sampler(python: str, hz: float, out: str, ports: list[int]) -> list[str]:
    return [python, "-m", "cclab.sampler", "sockets", "--hz", f"{hz:g}", "--out", out,
            "--ports", f"{min(ports)}-{max(ports)}"]


def qdisc_sampler(python: str, hz: float, out: str, devs: list[str]) -> list[str]:
    return [python, "-m", "cclab.sampler", "qdisc", "--hz", f"{hz:g}", "--out", out, *devs]


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


def stop_trace_instance(path: str) -> None:
    try:
        _write(os.path.join(path, "events/tcp/tcp_probe/enable"), "0")
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


class ProbeTracer:
    """tcp:tcp_probe in a private tracing instance, filtered to the run's ports, copied from
    trace_pipe to a file by a thread.  Timestamps use CLOCK_MONOTONIC ("mono")."""

    def __init__(self, ports: list[int], out: Path):
        self.ports = ports
        self.out = out
        self.path = None
        self.thread = None
        self.fd = None
        self.stopping = False

    def start(self, on_created) -> None:
        root = tracefs()
        if root is None:
            raise RuntimeError("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)")
        self.path = os.path.join(root, "instances", "cclab")
        if os.path.isdir(self.path):
            stop_trace_instance(self.path)
        os.mkdir(self.path)
        on_created(self.path)
        _write(os.path.join(self.path, "trace_clock"), "mono")
        _write(os.path.join(self.path, "buffer_size_kb"), "8192")
        lo, hi = min(self.ports), max(self.ports)
        ev = os.path.join(self.path, "events/tcp/tcp_probe")
        _write(os.path.join(ev, "filter"), f"dport >= {lo} && dport <= {hi}")
        _write(os.path.join(ev, "enable"), "1")
        self.fd = os.open(os.path.join(self.path, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK)
        self.thread = threading.Thread(target=self._copy, daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        import select
        with open(self.out, "ab") as f:
            while True:
                r, _, _ = select.select([self.fd], [], [], 0.2)
                if r:
                    try:
                        chunk = os.read(self.fd, 1 << 16)
                    except BlockingIOError:
                        chunk = b""
                    if chunk:
                        f.write(chunk)
                        continue
                if self.stopping:
                    return

    def stop(self) -> None:
        if self.path is None:
            return
        try:
            _write(os.path.join(self.path, "events/tcp/tcp_probe/enable"), "0")
        except OSError:
            pass
        self.stopping = True
        if self.thread is not None:
            self.thread.join(timeout=3)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
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
        for q in netlink.parse_qdiscs(raw):
            if q["ifindex"] not in devs:
                continue
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


def parse_probe(text: str, mono0: float, flow_of) -> list[dict]:
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
                     "peer_port": peer, "snd_cwnd": kv.get("snd_cwnd"),
                     "ssthresh": kv.get("ssthresh"), "srtt_us": kv.get("srtt"),
                     "snd_wnd": kv.get("snd_wnd"), "snd_nxt": kv.get("snd_nxt"),
                     "snd_una": kv.get("snd_una"), "data_len": kv.get("data_len")})
    return rows


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

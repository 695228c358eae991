"""Kernel state over netlink: TCP sockets (sock_diag, what `ss -ti` shows) and qdisc
statistics (rtnetlink, what `tc -s qdisc` shows).

Asking the kernel directly costs a system call per sample instead of starting `ss` or `tc`,
which matters at 20 Hz in a software-emulated VM.  The runner's sampler thread enters each
node's network namespace once to open a netlink socket there (`socket_in`), then polls all of
them and records the kernel's raw answers (`Recorder`); they are decoded after the run.

What comes back per TCP socket:

    struct inet_diag_msg      ports, addresses, state
    INET_DIAG_INFO            struct tcp_info: cwnd, ssthresh, rtt, min_rtt, pacing and
                              delivery rate, retransmissions, bytes acked ...
    INET_DIAG_CONG            the congestion control's name
    INET_DIAG_BBRINFO         bw, min_rtt, pacing and cwnd gain (BBR, and any module whose
    INET_DIAG_VEGASINFO       get_info fills these: ss prints them as "bbr:(...)")
    INET_DIAG_DCTCPINFO

and per qdisc: its kind, handle, parent, interface, and TCA_STATS2 (bytes, packets, drops,
overlimits, requeues, backlog, qlen).

Layouts follow include/uapi/linux/{netlink,rtnetlink,inet_diag,sock_diag,tcp,pkt_sched,
gen_stats}.h; tcp_info fields an older kernel does not send are left out.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
import time

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO, INET_DIAG_VEGASINFO, INET_DIAG_CONG = 2, 3, 4
INET_DIAG_DCTCPINFO, INET_DIAG_BBRINFO = 9, 16
# every TCP state but LISTEN, TIME_WAIT and NEW_SYN_RECV
STATES = sum(1 << s for s in (1, 2, 3, 4, 5, 7, 8, 9, 11))

_NLMSGHDR = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBBI")                  # family, protocol, ext, pad, states
_SOCKID = struct.Struct("!HH16s16sI8s")        # sport, dport (big endian), src, dst, if, cookie
_MSG = struct.Struct("=BBBB")                   # family, state, timer, retrans
_MSG_TAIL = struct.Struct("=IIIII")             # expires, rqueue, wqueue, uid, inode
_RTA = struct.Struct("=HH")

# struct tcp_info, in order: (name, struct code)
TCP_INFO = [
    ("state", "B"), ("ca_state", "B"), ("retransmits", "B"), ("probes", "B"), ("backoff", "B"),
    ("options", "B"), ("wscale", "B"), ("flags", "B"),
    ("rto", "I"), ("ato", "I"), ("snd_mss", "I"), ("rcv_mss", "I"),
    ("unacked", "I"), ("sacked", "I"), ("lost", "I"), ("retrans", "I"), ("fackets", "I"),
    ("last_data_sent", "I"), ("last_ack_sent", "I"), ("last_data_recv", "I"),
    ("last_ack_recv", "I"),
    ("pmtu", "I"), ("rcv_ssthresh", "I"), ("rtt", "I"), ("rttvar", "I"), ("snd_ssthresh", "I"),
    ("snd_cwnd", "I"), ("advmss", "I"), ("reordering", "I"),
    ("rcv_rtt", "I"), ("rcv_space", "I"), ("total_retrans", "I"),
    ("pacing_rate", "Q"), ("max_pacing_rate", "Q"), ("bytes_acked", "Q"), ("bytes_received", "Q"),
    ("segs_out", "I"), ("segs_in", "I"),
    ("notsent_bytes", "I"), ("min_rtt", "I"), ("data_segs_in", "I"), ("data_segs_out", "I"),
    ("delivery_rate", "Q"),
    ("busy_time", "Q"), ("rwnd_limited", "Q"), ("sndbuf_limited", "Q"),
    ("delivered", "I"), ("delivered_ce", "I"),
    ("bytes_sent", "Q"), ("bytes_retrans", "Q"),
    ("dsack_dups", "I"), ("reord_seen", "I"),
    ("rcv_ooopack", "I"), ("snd_wnd", "I"),
]


def _tcp_info_layouts() -> list[tuple[int, struct.Struct, tuple[str, ...]]]:
    """For each count n of leading TCP_INFO fields: (bytes they end at, one Struct that reads
    them with the padding native alignment puts before u64 fields, their names)."""
    out, fmt, offset, names = [], "=", 0, []
    for name, code in TCP_INFO:
        size = struct.calcsize(code)
        if offset % size:                       # natural alignment of u64 fields
            fmt += f"{size - offset % size}x"
            offset += size - offset % size
        fmt += code
        offset += size
        names.append(name)
        out.append((offset, struct.Struct(fmt), tuple(names)))
    return out


_TCP_INFO_LAYOUTS = _tcp_info_layouts()


def parse_tcp_info(data: bytes) -> dict:
    """As many tcp_info fields as `data` holds (native alignment, as the kernel lays it out)."""
    out = {}
    for end, st, names in reversed(_TCP_INFO_LAYOUTS):
        if end <= len(data):
            out = dict(zip(names, st.unpack_from(data)))
            break
    if "flags" in out:
        out["delivery_rate_app_limited"] = out["flags"] & 1
    return out


def module_info(attr: int, data: bytes) -> str | None:
    """A congestion control's own state, written like `ss` writes it."""
    if attr == INET_DIAG_BBRINFO and len(data) >= 20:
        lo, hi, min_rtt, pg, cg = struct.unpack_from("=IIIII", data)
        bw = ((hi << 32) | lo) * 8
        return (f"bbr:(bw:{bw / 1e6:.3f}Mbps,mrtt:{min_rtt / 1000:.3f},"
                f"pacing_gain:{pg / 256:.5g},cwnd_gain:{cg / 256:.5g})")
    if attr == INET_DIAG_VEGASINFO and len(data) >= 16:
        enabled, rttcnt, rtt, minrtt = struct.unpack_from("=IIII", data)
        return f"vegas:(enabled:{enabled},rttcnt:{rttcnt},rtt:{rtt},minrtt:{minrtt})"
    if attr == INET_DIAG_DCTCPINFO and len(data) >= 16:
        enabled, ce_state, alpha, ab_ecn, ab_tot = struct.unpack_from("=HHIII", data)
        return f"dctcp:(ce_state:{ce_state},alpha:{alpha},ab_ecn:{ab_ecn},ab_tot:{ab_tot})"
    return None


def request(family: int = socket.AF_INET, seq: int = 1) -> bytes:
    ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_VEGASINFO - 1)) | (1 << (INET_DIAG_CONG - 1))
    body = _REQ.pack(family, socket.IPPROTO_TCP, ext, 0, STATES) + bytes(_SOCKID.size)
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY,
                          NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def parse_message(data: bytes) -> dict:
    """One inet_diag_msg with its attributes."""
    family, state, timer, retrans = _MSG.unpack_from(data, 0)
    sport, dport, src, dst, _if, _cookie = _SOCKID.unpack_from(data, _MSG.size)
    _exp, rqueue, wqueue, _uid, _inode = _MSG_TAIL.unpack_from(data, _MSG.size + _SOCKID.size)
    n = 4 if family == socket.AF_INET else 16
    sock = {"local": socket.inet_ntop(family, src[:n]), "peer": socket.inet_ntop(family, dst[:n]),
            "local_port": sport, "peer_port": dport, "state": state, "rqueue": rqueue,
            "wqueue": wqueue}
    off = _MSG.size + _SOCKID.size + _MSG_TAIL.size
    while off + _RTA.size <= len(data):
        length, kind = _RTA.unpack_from(data, off)
        if length < _RTA.size:
            break
        payload = data[off + _RTA.size: off + length]
        if kind == INET_DIAG_INFO:
            sock["info"] = parse_tcp_info(payload)
        elif kind == INET_DIAG_CONG:
            sock["cca"] = payload.split(b"\0", 1)[0].decode()
        else:
            info = module_info(kind, payload)
            if info:
                sock["module_info"] = info
        off += (length + 3) & ~3
    return sock


def dump_raw(nl: socket.socket, req: bytes) -> bytes:
    """Send a dump request; return every answer message, concatenated, up to NLMSG_DONE."""
    nl.send(req)
    chunks = []
    while True:
        buf = nl.recv(1 << 17)
        chunks.append(buf)
        off = 0
        while off + _NLMSGHDR.size <= len(buf):
            length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(buf, off)
            if kind == NLMSG_DONE:
                return b"".join(chunks)
            if kind == NLMSG_ERROR:
                err = struct.unpack_from("=i", buf, off + _NLMSGHDR.size)[0]
                raise OSError(-err, os.strerror(-err))
            if length < _NLMSGHDR.size:
                return b"".join(chunks)
            off += (length + 3) & ~3


def messages(raw: bytes, kind: int):
    """The payloads of the messages of one type in a dump."""
    off = 0
    while off + _NLMSGHDR.size <= len(raw):
        length, k, _flags, _seq, _pid = _NLMSGHDR.unpack_from(raw, off)
        if length < _NLMSGHDR.size:
            return
        if k == kind:
            yield raw[off + _NLMSGHDR.size: off + length]
        off += (length + 3) & ~3


def parse_sockets(raw: bytes) -> list[dict]:
    return [parse_message(m) for m in messages(raw, SOCK_DIAG_BY_FAMILY)]


def dump(nl: socket.socket | None = None, family: int = socket.AF_INET) -> list[dict]:
    """Every TCP socket of the calling thread's network namespace."""
    own = nl is None
    if own:
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    try:
        return parse_sockets(dump_raw(nl, request(family)))
    finally:
        if own:
            nl.close()


# ---------------------------------------------------------------- qdisc statistics

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
_TCMSG = struct.Struct("=BxxxiIII")            # family, ifindex, handle, parent, info


def qdisc_request(seq: int = 1) -> bytes:
    body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETQDISC,
                          NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def _attrs(data: bytes, off: int = 0):
    while off + _RTA.size <= len(data):
        length, kind = _RTA.unpack_from(data, off)
        if length < _RTA.size:
            return
        yield kind & 0x3fff, data[off + _RTA.size: off + length]
        off += (length + 3) & ~3


def _handle(h: int) -> str:
    return f"{h >> 16:x}:" if h & 0xffff == 0 else f"{h >> 16:x}:{h & 0xffff:x}"


def parse_qdiscs(raw: bytes, ifindexes=None) -> list[dict]:
    """The qdiscs of a dump; with `ifindexes`, only those of these interfaces (the others'
    attributes are not parsed)."""
    out = []
    for m in messages(raw, RTM_NEWQDISC):
        _fam, ifindex, handle, parent, _info = _TCMSG.unpack_from(m, 0)
        if ifindexes is not None and ifindex not in ifindexes:
            continue
        q = {"ifindex": ifindex, "handle": _handle(handle),
             "parent": "root" if parent == 0xffffffff else _handle(parent)}
        for kind, data in _attrs(m, _TCMSG.size):
            if kind == TCA_KIND:
                q["kind"] = data.split(b"\0", 1)[0].decode()
            elif kind == TCA_STATS2:
                for k, d in _attrs(data):
                    if k == TCA_STATS_BASIC and len(d) >= 12:
                        q["bytes"], q["packets"] = struct.unpack_from("=QI", d)
                    elif k == TCA_STATS_PKT64 and len(d) >= 8:
                        q["packets"] = struct.unpack_from("=Q", d)[0]
                    elif k == TCA_STATS_QUEUE and len(d) >= 20:
                        (q["qlen"], q["backlog"], q["drops"], q["requeues"],
                         q["overlimits"]) = struct.unpack_from("=IIIII", d)
        out.append(q)
    return out


# ---------------------------------------------------------------- namespaces and recording

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def socket_in(pid: int, proto: int) -> socket.socket:
    """A netlink socket living in the network namespace of process `pid`.  The calling thread
    enters that namespace just long enough to create it (a socket keeps its namespace)."""
    def setns(fd):
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns: {os.strerror(e)}")
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        setns(target)
        try:
            return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
        finally:
            setns(home)
    finally:
        os.close(target)
        os.close(home)


_RECORD = struct.Struct("=dI")                  # epoch, length; then the raw dump


class Recorder:
    """A thread that dumps sockets and qdiscs at fixed rates from inside each namespace and
    appends the raw answers, timestamped, to one file per source."""

    def __init__(self):
        self.sources = []                       # (socket, request, hz, file)
        self.stop_flag = threading.Event()
        self.thread = None

    def add(self, pid: int, what: str, hz: float, path) -> None:
        proto, req = ((NETLINK_SOCK_DIAG, request()) if what == "sockets"
                      else (socket.NETLINK_ROUTE, qdisc_request()))
        self.sources.append([socket_in(pid, proto), req, 1.0 / hz, open(path, "ab"), 0.0])

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop_flag.is_set():
            now = time.monotonic()
            for src in self.sources:
                nl, req, period, f, due = src
                if now >= due:
                    src[4] = max(due + period, now) if due else now + period
                    stamp = time.time()
                    try:
                        raw = dump_raw(nl, req)
                    except OSError:
                        continue
                    f.write(_RECORD.pack(stamp, len(raw)) + raw)
            nxt = min(s[4] for s in self.sources) if self.sources else now + 0.1
            self.stop_flag.wait(max(0.0, nxt - time.monotonic()))

    def stop(self) -> None:
        self.stop_flag.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        for nl, _req, _p, f, _d in self.sources:
            f.close()
            nl.close()
        self.sources = []


def read_records(path):
    """(epoch, raw dump) pairs from a Recorder file; a record cut short at the end is dropped."""
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off + _RECORD.size <= len(data):
        stamp, n = _RECORD.unpack_from(data, off)
        off += _RECORD.size
        if off + n > len(data):
            return
        yield stamp, data[off: off + n]
        off += n


def row(sock: dict) -> dict:
    """A socket as a row of ss.csv (without t, flow and host)."""
    i = sock.get("info", {})
    r = {"local_port": sock["local_port"], "peer_port": sock["peer_port"], "cca": sock.get("cca"),
         "module_info": sock.get("module_info")}
    if i:
        r.update(cwnd=i.get("snd_cwnd"), mss=i.get("snd_mss"),
                 ssthresh=i.get("snd_ssthresh") if i.get("snd_ssthresh", 0) < 0x7fffffff else None,
                 rtt_ms=i.get("rtt", 0) / 1000, rttvar_ms=i.get("rttvar", 0) / 1000,
                 min_rtt_ms=(i["min_rtt"] / 1000 if i.get("min_rtt") not in (None, 0xffffffff)
                             else None),
                 pacing_rate_bps=(i["pacing_rate"] * 8 if "pacing_rate" in i
                                  and i["pacing_rate"] != 2**64 - 1 else None),
                 delivery_rate_bps=i["delivery_rate"] * 8 if "delivery_rate" in i else None,
                 bytes_acked=i.get("bytes_acked"), bytes_sent=i.get("bytes_sent"),
                 bytes_retrans=i.get("bytes_retrans"),
                 retrans=i.get("retrans"), retrans_total=i.get("total_retrans"),
                 lost=i.get("lost"), unacked=i.get("unacked"),
                 data_segs_out=i.get("data_segs_out"), delivered=i.get("delivered"),
                 app_limited=i.get("delivery_rate_app_limited"))
    return r

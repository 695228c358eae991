"""Looking inside an engine run while it runs (for the in-VM tests, as root).

runner.run() has to stay on the main thread (it installs signal handlers), so `Watch` runs a
function on a background thread once the run's network is up -- every node exists and the
first flow's iperf3 server listens -- and keeps what the function returns or raises.  The
function gets {node name: pid of its Mininet shell}; `in_ns` runs a command in a node's
network namespace (tc, ethtool, cat /proc/sys/net/..., python).
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import time

from cclab import state

NSENTER = ["nsenter", "--net=/proc/{pid}/ns/net"]


def in_ns(pid: int, *argv, timeout: float = 30, check: bool = True) -> str:
    cmd = [a.format(pid=pid) for a in NSENTER] + [str(a) for a in argv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def run_nodes() -> dict[str, int]:
    st = state.read() or {}
    return {name: n["pid"] for name, n in st.get("nodes", {}).items()}


class NsShell:
    """A shell kept open in a node's namespace: a command run through it starts one process,
    not two (nsenter, then the command).  Each process start takes tens of milliseconds in
    the software-emulated VM, which matters to a watcher that reads the qdiscs in a loop."""

    END = "@@end-of-command@@"

    def __init__(self, pid: int):
        self.p = subprocess.Popen([a.format(pid=pid) for a in NSENTER] + ["sh"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, *argv) -> str:
        self.p.stdin.write(" ".join(shlex.quote(str(a)) for a in argv)
                           + f"; printf '\\n%s\\n' {self.END}\n")
        self.p.stdin.flush()
        lines = []
        for line in self.p.stdout:
            if line.rstrip("\n") == self.END:
                return "".join(lines)
            lines.append(line)
        raise RuntimeError(f"the shell in the namespace ended (exit {self.p.wait()})")

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def qdiscs(pid: int, dev: str, shell: NsShell | None = None) -> list[dict]:
    """`tc -s -j qdisc show dev DEV` in a node: every qdisc with its options and counters
    (through `shell`, a shell open in that node, when given)."""
    argv = ("tc", "-s", "-j", "qdisc", "show", "dev", dev)
    return json.loads((shell.run(*argv) if shell else in_ns(pid, *argv)).strip() or "[]")


def sysctl(pid: int, key: str) -> str:
    """A sysctl as the namespace of `pid` sees it (read from /proc/sys inside it)."""
    return in_ns(pid, "cat", "/proc/sys/" + key.replace(".", "/")).strip()


class Watch:
    """with Watch(fn) as w: runner.run(...)  ->  w.result (or w.error) afterwards."""

    def __init__(self, fn, want=("cc-r1", "cc-r2", "cc-s1", "cc-c1"), listener="cc-c1",
                 port=5201, timeout=180.0):
        self.fn, self.want, self.listener, self.port = fn, want, listener, port
        self.timeout = timeout
        self.result = None
        self.error = None
        self.t_ready = None                      # time.time() when fn started
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _ready(self) -> dict[str, int] | None:
        nodes = run_nodes()
        if not all(n in nodes for n in self.want):
            return None
        out = in_ns(nodes[self.listener], "ss", "-ltnH", f"sport = :{self.port}", check=False)
        return nodes if out.strip() else None

    def _main(self):
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                nodes = self._ready()
                if nodes:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("the run's network never came up")
                time.sleep(0.1)
            self.t_ready = time.time()
            self.result = self.fn(nodes)
        except BaseException as e:           # reported by check()
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.thread.join(timeout=60)

    def check(self):
        assert not self.thread.is_alive(), "the watcher did not finish"
        if self.error is not None:
            raise AssertionError(f"watcher failed: {self.error!r}") from self.error
        return self.result


# One-way delay: both namespaces share the kernel's clock, so a datagram carrying its send
# time measures the path in one direction.
_RECEIVER = r"""
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(20.0)                      # the sender's interpreter takes a while to start
print("ready", flush=True)
while True:
    try:
        data = s.recv(64)
    except socket.timeout:
        break
    now = time.time()
    s.settimeout(float(sys.argv[3]))    # then: done once the datagrams stop for this long
    seq, sent = struct.unpack("!Id", data[:12])
    print(seq, now - sent, flush=True)
"""

_SENDER = r"""
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n, gap = int(sys.argv[3]), float(sys.argv[4])
for i in range(n):
    s.sendto(struct.pack("!Id", i, time.time()) + bytes(36), (sys.argv[1], int(sys.argv[2])))
    time.sleep(gap)
"""


def one_way(src_pid: int, dst_pid: int, dst_addr: str, n: int = 40, gap: float = 0.02,
            port: int = 6999, idle: float = 3.0) -> dict[int, float]:
    """{sequence number: one-way delay in s} of n small datagrams sent src -> dst."""
    rx = subprocess.Popen([a.format(pid=dst_pid) for a in NSENTER]
                          + [sys.executable, "-c", _RECEIVER, dst_addr, str(port), str(idle)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready", rx.stderr.read()
        in_ns(src_pid, sys.executable, "-c", _SENDER, dst_addr, str(port), str(n), str(gap))
        out, err = rx.communicate(timeout=n * gap + idle + 30)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    got = {}
    for line in out.splitlines():
        seq, d = line.split()
        got[int(seq)] = float(d)
    return got

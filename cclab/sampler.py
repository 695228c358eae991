"""Samplers that run inside a host's namespace and log timestamped measurements.

    python3 -m cclab.sampler sockets --hz 20 --out F [--ports 5201-5232]
        TCP socket state from sock_diag (see sockdiag.py): one JSON line per sample,
        {"t": <epoch>, "s": [<row>, ...]}, the rows as in ss.csv.
    python3 -m cclab.sampler qdisc --hz 10 --out F DEV [DEV ...]
        `tc -s -j qdisc show dev DEV` through one long-lived `tc -batch`:
        "@<epoch> <dev>" followed by tc's JSON line.

Neither starts a process per sample: that would cost more CPU than the flows under a
software-emulated VM.  Both run until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time


def every(hz: float, stop: list):
    """Yield at `hz` until stopped; if a sample runs late, skip rather than catch up."""
    period = 1.0 / hz
    nxt = time.monotonic()
    while not stop:
        yield
        nxt += period
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            nxt = time.monotonic()


def sockets(a, stop) -> None:
    import socket
    from . import sockdiag
    lo, _, hi = a.ports.partition("-")
    lo, hi = int(lo), int(hi or lo)
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, sockdiag.NETLINK_SOCK_DIAG)
    with open(a.out, "a", buffering=1) as out:
        for _ in every(a.hz, stop):
            stamp = time.time()
            try:
                socks = sockdiag.dump(nl)
            except OSError:
                continue
            rows = [sockdiag.row(s) for s in socks if lo <= s["peer_port"] <= hi]
            if rows:
                out.write(json.dumps({"t": round(stamp, 6), "s": rows}, separators=(",", ":")) + "\n")


def qdisc(a, stop) -> None:
    tc = subprocess.Popen(["tc", "-s", "-j", "-batch", "-"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
    try:
        with open(a.out, "a", buffering=1) as out:
            for _ in every(a.hz, stop):
                for dev in a.devs:
                    stamp = time.time()
                    tc.stdin.write(f"qdisc show dev {dev}\n")
                    tc.stdin.flush()
                    line = tc.stdout.readline()
                    if not line:
                        return
                    out.write(f"@{stamp:.6f} {dev}\n{line}")
    finally:
        tc.kill()
        tc.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m cclab.sampler")
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sockets")
    s.add_argument("--ports", default="1-65535", help="peer ports to keep, e.g. 5201-5232")
    q = sub.add_parser("qdisc")
    q.add_argument("devs", nargs="+")
    for p in (s, q):
        p.add_argument("--hz", type=float, default=20.0)
        p.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    try:
        (sockets if a.what == "sockets" else qdisc)(a, stop)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run a command periodically and log its output with timestamps.

The runner starts one inside a host's namespace for socket state (ss -tinHO) and one inside
each router for qdisc statistics (tc -s -j qdisc show).  Output, appended to --out:

    @1700000000.123456
    <the command's output>
    @1700000000.173456
    ...

Runs until SIGTERM or SIGINT.  Started as: python3 -m cclab.sampler --hz 20 --out F -- CMD ...
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m cclab.sampler")
    ap.add_argument("--hz", type=float, default=20.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no command to sample")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    period = 1.0 / a.hz
    with open(a.out, "a", buffering=1) as out:
        next_t = time.monotonic()
        while not stop:
            stamp = time.time()
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True, timeout=5)
                out.write(f"@{stamp:.6f}\n{r.stdout}")
            except (subprocess.TimeoutExpired, OSError):
                pass
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.monotonic()       # fell behind: do not try to catch up
    return 0


if __name__ == "__main__":
    sys.exit(main())

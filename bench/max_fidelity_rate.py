#!/usr/bin/env python3
"""The highest bottleneck rate at which a run still passes the fidelity verdict in this guest.

    vm/run.sh -- python3 bench/max_fidelity_rate.py [--rates 100,150,200,250,300,400,500] [--duration 8]

Runs one bulk cubic flow over the wired profile (40 ms RTT, 1 BDP of buffer) at each rate
(Mbit/s, ascending) with full instrumentation (per-ACK tcp_probe, sockets at 20 Hz, qdisc
statistics, ping at 10 Hz, CPU load), computes the verdict (cclab.analysis.fidelity,
unchanged thresholds) and prints a line per rate: goodput, the link-limited and backlogged-rate
fractions, the packet spacing against the ideal serialisation time, the guest's busiest CPU and
the failed checks.  Stops after two consecutive failures.

To tell why a rate fails, it then measures what the guest carries at all through the same
dumbbell with no instrumentation and a link it cannot fill (--ceiling-rate, default 2 Gbit/s):
if that ceiling is near or below a failing rate, the guest's CPU (forwarding every 1500-byte
packet through three namespaces under software emulation) is the limit, not the verdict.

Prints the highest passing rate; target >= 500 Mbit/s.  Exit status 0 if met, 1 if not.
"""
import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cclab import results, runner  # noqa: E402
from cclab import cpu  # noqa: E402
from cclab.analysis import fidelity  # noqa: E402
from cclab.spec import Experiment, Flow, Measure  # noqa: E402


def experiment(name, rate, duration, instrumented=True):
    m = Measure(ping_interval=0.1) if instrumented else \
        Measure(tcp_probe=False, ss=False, qdisc=False, ping=False, cpu=True)
    return Experiment(name=name, profile="wired", override={"down": {"rate": rate}, "up": {"rate": rate}},
                      flows=[Flow(cca="cubic", start=2, duration=duration)], measure=m, tail=0.5)


class StatLog:
    """/proc/stat every 0.5 s beside a run.  The guest accounts a busy tick only when its vCPU
    runs, and idle time by the clock, so the jiffies each CPU accounts per second of wall time
    (USER_HZ when complete) fall short when the host does not run the vCPU: time the guest's own
    busy fraction (the verdict's CPU check) cannot see."""

    def __init__(self):
        self.rows, self.stop_flag = [], threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while True:
            self.rows.append((time.time(), cpu.read_stat()))
            if self.stop_flag.wait(0.5):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join()

    def window(self, a, b):
        """{cpu: (busy fraction, accounted fraction)} between epochs a and b."""
        w = [r for r in self.rows if a <= r[0] <= b]
        if len(w) < 2:
            return {}
        (t0, s0), (t1, s1) = w[0], w[-1]
        hz = os.sysconf("SC_CLK_TCK")
        return {k: ((s1[k][0] - s0[k][0]) / max(1, s1[k][1] - s0[k][1]),
                    (s1[k][1] - s0[k][1]) / ((t1 - t0) * hz)) for k in s1 if k != "all" and k in s0}


def flow_window(d, duration):
    t0 = float(results.read_manifest(d)["start_epoch"])
    return t0 + 3.0, t0 + 2.0 + duration - 0.5


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="100,150,200,250,300,400,500")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--target", type=float, default=500.0)
    ap.add_argument("--ceiling-rate", default="2gbit",
                    help="link rate for the uninstrumented ceiling run ('' to skip it)")
    ap.add_argument("--out", help="keep the runs here (default: a temporary folder)")
    a = ap.parse_args()
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="cclab-bench-"))
    best, fails = None, 0
    for mbit in sorted(float(r) for r in a.rates.split(",")):
        with StatLog() as log:
            (d,) = runner.run(experiment(f"maxrate-{mbit:g}", f"{mbit:g}mbit", a.duration), out=out)
        acc = log.window(*flow_window(d, a.duration))
        v = fidelity.write_verdict(d)
        checks = {c["name"]: c for c in v["checks"]}
        gp = float(results.load(d, "flows")["throughput_bps"].sum()) / 1e6

        def m(name):
            return checks.get(name, {}).get("measured")
        print(f"{mbit:6g} Mbit/s: {'PASS' if v['ok'] else 'FAIL'}  goodput {gp:6.1f}  "
              f"link-limited {fmt(m('link_limited'))}  backlogged rate {fmt(m('rate_backlogged'))}  "
              f"spacing {fmt(m('packet_spacing'), '.2f')}x  busiest guest CPU {fmt(m('cpu_headroom'), '.2f')}"
              + f"  CPU time accounted {'/'.join(f'{x[1]:.2f}' for x in acc.values()) or '-'}"
              + ("" if v["ok"] else f"  failed: {', '.join(v['failed'])}"), flush=True)
        if v["ok"]:
            best, fails = mbit, 0
        else:
            fails += 1
            if fails >= 2:
                break
    if a.ceiling_rate:
        with StatLog() as log:
            (d,) = runner.run(experiment("maxrate-ceiling", a.ceiling_rate, a.duration, False), out=out)
        acc = log.window(*flow_window(d, a.duration))
        gp = float(results.load(d, "flows")["throughput_bps"].sum()) / 1e6
        print(f"\nceiling: uninstrumented cubic over a {a.ceiling_rate} link: {gp:.1f} Mbit/s; "
              f"guest CPUs busy {'/'.join(f'{x[0]:.2f}' for x in acc.values()) or '-'}, "
              f"CPU time accounted {'/'.join(f'{x[1]:.2f}' for x in acc.values()) or '-'} "
              f"(1.00: the host ran the vCPUs all the time)", flush=True)
    print(f"\nhighest rate passing the fidelity verdict: {f'{best:g}' if best is not None else 'none'} Mbit/s "
          f"(target >= {a.target:g}: {'met' if best and best >= a.target else 'NOT met'})")
    return 0 if best and best >= a.target else 1


if __name__ == "__main__":
    sys.exit(main())

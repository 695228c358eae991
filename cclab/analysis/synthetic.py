"""Synthetic run folders with known answers, for tests and for trying the plots without a VM.

    from cclab.analysis import synthetic
    d = synthetic.make_run("/tmp/r", ccas=("cubic", "bbr"), shares=(0.5, 0.5))

The folder has the engine's layout (manifest.json and the tables of cclab/results.py, written
with its writers) plus cpu.csv and search.csv.  Every number follows from the arguments:
a dumbbell of `rate` bit/s and `delay` s one way each direction; flows start together at t=0
and send for `duration` s; flow i gets shares[i] of `achieved` x rate; its cwnd doubles every
RTT from 10 packets until ss_exit[i] s after its first ACK, then ssthresh = 0.7 x cwnd.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cclab import files, results
from cclab.schema import MSS, MTU, WIRE_PACKET as WIRE


def make_run(path, experiment: str = "synthetic", repetition: int = 1, ccas=("cubic", "bbr"),
             shares=None, rate: float = 10e6, delay: float = 0.010, duration: float = 6.0,
             achieved: float = 1.0, over: float = 1.0, idle_rtt_extra_ms: float = 0.0,
             queue_pkts: float = 5.0, ss_exit=None, cpu_busy: float | None = 0.3,
             bytes_requested=None, seed: int = 1, status: str = "complete",
             retransmits: int = 12) -> Path:
    """Write a run folder; returns its path.  `achieved` scales what the link delivers while
    backlogged (0.7: an emulator that cannot keep up); `over` scales the departures above the
    configured rate (1.2: a rate limiter that leaks); `cpu_busy` None writes no cpu.csv."""
    rng = np.random.default_rng(seed)
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    n = len(ccas)
    shares = list(shares) if shares is not None else [1.0 / n] * n
    ss_exit = list(ss_exit) if ss_exit is not None else [0.04 + 0.01 * i for i in range(n)]
    rtt = 2 * delay
    link_bps = rate * achieved * over
    qdelay = queue_pkts * WIRE * 8 / rate
    t_first_ack = rtt

    manifest = {
        "experiment": experiment, "repetition": repetition, "repetitions": 3, "status": status,
        "error": None, "seed": seed, "start": "2024-01-01T00:00:00.000+00:00",
        "start_epoch": 1704067200.0, "end": "2024-01-01T00:00:10.000+00:00",
        "kernel": "6.1.0-synthetic-amd64", "uname": "Linux lab 6.1.0-synthetic-amd64",
        "kit": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "tools": {"iperf3": "iperf 3.12"},
        "profile": {"name": "wired", "pairs": 1, "offloads": False, "dynamics": None,
                    "down": {"rate": rate, "delay": delay, "jitter": 0.0, "loss": 0.0,
                             "buffer": "1bdp", "limit": None, "shaper": "htb"},
                    "up": {"rate": rate, "delay": delay, "jitter": 0.0, "loss": 0.0,
                           "buffer": "1bdp", "limit": None, "shaper": "htb"}},
        "spec": {"name": experiment, "flows": [{"cca": c, "direction": "down"} for c in ccas]},
        "tc": {"cc-r1": {"cc-r1-core": [{"kind": "htb", "handle": "1:", "root": True},
                                        {"kind": "netem", "handle": "10:", "parent": "1:1"}]}},
        "flows": [], "beside": dict(results.BESIDE),
    }

    flows, iperf, ss, probe = [], [], [], []
    step = 0.1
    for i, cca in enumerate(ccas):
        f = i + 1
        port, local = 5201 + i, 40000 + i
        share_bps = shares[i] * rate * achieved * MSS / WIRE
        size = None if bytes_requested is None else bytes_requested[i]
        dur = duration if size is None else size * 8 / share_bps + rtt
        tx = t_first_ack + ss_exit[i]
        cw_exit = 10 * 2 ** (ss_exit[i] / rtt)

        def cwnd(tt, tx=tx, cw_exit=cw_exit):
            if tt < tx:
                return 10 * 2 ** ((tt - t_first_ack) / rtt)
            base = 0.7 * cw_exit
            period = 0.3 * cw_exit * rtt        # +1 packet per RTT back to the peak
            return base + ((tt - tx) % period) / rtt

        # iperf3 intervals
        t = 0.0
        total = 0
        while t < dur - 1e-9:
            e = min(dur, t + step)
            b = int(share_bps * (e - t) / 8)
            total += b
            for side in ("sender", "receiver"):
                iperf.append({"flow": f, "side": side, "stream": 5, "t_start": round(t, 6),
                              "t_end": round(e, 6), "bytes": b, "bits_per_second": b * 8 / (e - t),
                              "retransmits": 0 if side == "sender" else None,
                              "snd_cwnd": int(cwnd(e) * MSS) if side == "sender" else None,
                              "rtt_us": int((rtt + qdelay) * 1e6) if side == "sender" else None,
                              "rttvar_us": 500 if side == "sender" else None})
            t = e
        flows.append({"flow": f, "cca": cca, "direction": "down", "pair": 1, "sender": "cc-s1",
                      "receiver": "cc-c1", "port": port, "protocol": "tcp", "streams": 1,
                      "start": 0.0, "duration": None if size else duration,
                      "bytes_requested": size, "cca_iperf": cca, "cca_ss": cca,
                      "t_start": 0.0, "t_end": round(dur, 6), "sent_bytes": total,
                      "received_bytes": total, "throughput_bps": total * 8 / dur,
                      "retransmits": retransmits, "mean_rtt_us": int((rtt + qdelay) * 1e6),
                      "min_rtt_us": int(rtt * 1e6), "exit_code": 0})

        def acked(tt):
            return share_bps / 8 * max(0.0, tt - t_first_ack)

        # per-ACK probe events every 5 ms
        for tt in np.arange(t_first_ack, dur, 0.005):
            probe.append({"t": round(float(tt), 6), "flow": f, "local_port": local, "peer_port": port,
                          "snd_cwnd": int(cwnd(tt)),
                          "ssthresh": 2147483647 if tt < tx else int(0.7 * cw_exit),
                          "srtt_us": int((rtt + qdelay) * 1e6), "snd_wnd": 65535,
                          "snd_nxt": (int(acked(tt)) + 1000 + 7 * 2 ** 31) % 2 ** 32,
                          "snd_una": (int(acked(tt)) + 7 * 2 ** 31) % 2 ** 32, "data_len": 0})
        # ss at 20 Hz
        for k, tt in enumerate(np.arange(t_first_ack, dur, 0.05)):
            frac = k / max(1, int((dur - t_first_ack) / 0.05))
            nd = min(0.5, 0.4 * (tt - t_first_ack) / max(ss_exit[i], 1e-3)) if tt < tx + 0.2 else 0.0
            info = None
            if cca == "search":
                info = f"bbr:(bw:{share_bps / 1e6:.1f}Mbps,mrtt:{rtt * 1e3:g},pacing_gain:{nd:.4f},cwnd_gain:{1 if tt < tx else 2})"
            elif cca == "spline":
                mode = 1 if tt < tx else 2 + int((tt - tx) / 1.0) % 3
                info = f"bbr:(bw:{share_bps / 1e6:.1f}Mbps,mrtt:{rtt * 1e3:g},pacing_gain:{mode},cwnd_gain:3)"
            r_ms = (rtt + qdelay * (0.5 + rng.random())) * 1e3
            ss.append({"t": round(float(tt), 6), "flow": f, "host": "cc-s1", "local_port": local,
                       "peer_port": port, "cca": cca, "cwnd": int(cwnd(tt)),
                       "ssthresh": None if tt < tx else int(0.7 * cw_exit), "mss": MSS,
                       "rtt_ms": round(r_ms, 3), "rttvar_ms": 0.5, "min_rtt_ms": rtt * 1e3,
                       "pacing_rate_bps": share_bps * 1.2, "delivery_rate_bps": share_bps,
                       "send_bps": share_bps, "bytes_acked": int(acked(tt)),
                       "bytes_sent": int(acked(tt) + cwnd(tt) * MSS), "bytes_retrans": 0,
                       "retrans": 0, "retrans_total": int(retransmits * frac),
                       "lost": 0, "unacked": int(cwnd(tt)),
                       "data_segs_out": int(acked(tt) / MSS) + 1, "delivered": int(acked(tt) / MSS),
                       "app_limited": 0, "module_info": info})
    flow_end = max(fl["t_end"] for fl in flows)

    # qdisc samples at 10 Hz: htb root and netem child on cc-r1-core
    qd = []
    dline = rate * delay / (8 * MTU)
    for tt in np.arange(-0.5, flow_end + 1.0, 0.1):
        active = 0.0 <= tt <= flow_end
        sent = link_bps / 8 * min(max(tt, 0.0), flow_end)
        backlog = int(dline + queue_pkts) if active else 0
        for kind, handle, parent in (("htb", "1:", "root"), ("netem", "10:", "1:1")):
            qd.append({"t": round(float(tt), 6), "node": "cc-r1", "dev": "cc-r1-core",
                       "direction": "down", "kind": kind, "handle": handle, "parent": parent,
                       "bytes": int(sent), "packets": int(sent / WIRE), "drops": int(sent / WIRE / 500),
                       "overlimits": 0, "requeues": 0, "backlog_bytes": backlog * WIRE,
                       "backlog_packets": backlog})
    # ping: three idle samples, then under load
    ping = []
    for k, tt in enumerate(np.arange(-0.6, flow_end, 0.2)):
        load = tt >= 0
        ping.append({"t": round(float(tt), 6), "src": "cc-c1", "dst": "cc-s1", "seq": k + 1,
                     "rtt_ms": round(rtt * 1e3 + idle_rtt_extra_ms + (qdelay * 1e3 if load else 0.05), 3)})

    for name, rows in (("flows", flows), ("iperf", iperf), ("ss", ss), ("probe", probe),
                       ("qdisc", qd), ("ping", ping), ("changes", [])):
        results.write_table(d, name, rows)
    manifest["flows"] = flows
    results.write_json(d / "manifest.json", manifest)

    if cpu_busy is not None:
        lines = ["t,cpu,busy_frac"]
        for tt in np.arange(0, flow_end, 0.1):
            for c in ("all", "cpu0", "cpu1"):
                b = min(1.0, max(0.0, cpu_busy + 0.02 * rng.standard_normal()))
                lines.append(f"{tt:.3f},{c},{b:.4f}")
        files.write_atomic(d / "cpu.csv", "\n".join(lines) + "\n")
    # search:search_exit events, one per SEARCH flow
    ev = ["t,flow,sport,dport,reason,cwnd,norm_diff,elapsed_us,bin_us"]
    for i, cca in enumerate(ccas):
        if cca == "search":
            tx = t_first_ack + ss_exit[i]
            ev.append(f"{tx:.6f},{i + 1},{40000 + i},{5201 + i},search,"
                      f"{int(10 * 2 ** (ss_exit[i] / rtt))},362,{int(ss_exit[i] * 1e6)},{int(rtt * 3.5 / 10 * 1e6)}")
    if len(ev) > 1:
        files.write_atomic(d / "search.csv", "\n".join(ev) + "\n")
    return d


def make_experiment(root, experiment: str = "synthetic", repetitions: int = 3, **kw) -> list[Path]:
    """Several repetitions of one synthetic experiment under root/experiment/."""
    out = []
    for rep in range(1, repetitions + 1):
        out.append(make_run(Path(root) / experiment / f"20240101-000000-{rep}", experiment=experiment,
                            repetition=rep, seed=rep, **kw))
    return out

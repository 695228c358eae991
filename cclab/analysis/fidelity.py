"""Is a run's emulation trustworthy?  Checks of network invariants on a stock kernel.

Like Mininet-HiFi's invariants, but from what the engine records (qdisc counters, ping, socket
samples) instead of a patched kernel.  Each check gives
    {"name", "ok": True | False | None, "measured", "expected", "reason", "direction", "unit"}
with ok None when the data to decide is missing ("not measured") or the check does not apply.
The verdict is {"ok": bool, "checks": [...], "failed": [names], "unknown": [names], ...}:
ok only if no check failed and at least one rate check passed.  `write_verdict` stores it in
the run's fidelity.json, beside its manifest (atomically: temporary file, then rename); the
manifest's readers (cclab.results.read_manifest) find it under "fidelity".

Checks, per direction that carries data:
  rate_ceiling     departures from the bottleneck never above the configured rate
  rate_backlogged  >= 95 % of the rate while the bottleneck queue holds packets
  link_limited     bulk flows on a clean link (no loss, buffer >= 1 BDP) fill >= 90 % of it
                   (else something other than the emulated link -- CPU -- limited them)
  queue_within_buffer   queue at the bottleneck (qdisc backlog less the delay line, p99) and the
                   queueing delay the flows saw (median RTT - configured RTT) within the buffer
  packet_spacing   time per packet leaving the bottleneck while backlogged close to the ideal
                   serialisation time (capture if given, else qdisc counters)
and once per run:
  run_complete, idle_rtt (ping before the first flow vs configured RTT),
  cpu_headroom (cpu.csv: no CPU busy above 90 % for most of the run),
  link_changes (only where the link changed: changes.csv's every change in force within
  0.25 s of its planned instant; a starved engine applies a trace or a handover late).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from . import metrics
from .. import results
from .data import RunData
from cclab.schema import MTU, TCP_IP_HEADERS, WIRE_OVERHEAD, WIRE_PACKET as WIRE
RATE_CHECKS = ("rate_ceiling", "rate_backlogged", "link_limited")


@dataclass
class Thresholds:
    rate_ceiling_tol: float = 0.05      # sampling jitter allowance above the configured rate
    ceiling_window: float = 2.0         # s per window for the ceiling
    backlog_min_frac: float = 0.95      # rate while backlogged, fraction of configured
    backlog_min_pkts: float = 2.0       # queue beyond the delay line that counts as backlog
    backlog_min_time: float = 0.5       # s of backlog needed to judge
    link_limited_min: float = 0.90      # steady-state utilisation of bulk flows on a clean link
    idle_rtt_abs_ms: float = 2.0        # idle RTT may exceed the configured by this ...
    idle_rtt_rel: float = 0.05          # ... plus this fraction
    idle_rtt_below_ms: float = 0.5      # and fall short of it by at most this
    cpu_busy_max: float = 0.90          # busy fraction of the busiest CPU ...
    cpu_quantile: float = 0.75          # ... at this quantile of the run's samples
    queue_rel: float = 0.05             # qdisc queue may exceed the buffer by this fraction
    rtt_queue_rel: float = 0.25         # RTT-implied queue may exceed it by this fraction
    queue_slack_pkts: float = 2.0
    queue_slack_ms: float = 2.0         # timing noise allowance for the RTT-implied queue
    spacing_tol: float = 0.10           # qdisc-based spacing: |measured/ideal - 1|
    spacing_tol_capture: float = 0.5    # capture-based (per-ACK median) spacing
    change_late_max: float = 0.25       # s a link change may come after its planned instant


def _check(name, ok, measured, expected, reason, direction=None, unit=None, **extra):
    c = {"name": name, "ok": None if ok is None else bool(ok), "measured": _clean(measured), "expected": expected,
         "reason": reason}
    if direction is not None:
        c["direction"] = direction
    if unit is not None:
        c["unit"] = unit
    c.update({k: _clean(v) for k, v in extra.items()})
    return c


def _clean(v):
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        v = v.item()
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 6)
    return v


def _mbit(bps) -> str:
    return f"{bps / 1e6:.3g} Mbit/s"


def active_window(run: RunData, direction: str) -> tuple[float, float]:
    fl = metrics.flow_info(run)
    if len(fl):
        fl = fl[fl["direction"] == direction]
    if len(fl) and fl["t_start"].notna().any():
        a = float(fl["t_start"].min())
        b = float(fl["t_end"].max()) if fl["t_end"].notna().any() else math.inf
        return a, b
    return -math.inf, math.inf


def _qdisc_intervals(run: RunData, direction: str, a: float, b: float) -> pd.DataFrame:
    """Consecutive root-qdisc sample pairs inside [a, b]: dt, dbytes, dpackets, the rate, the
    queue (backlog less the delay line: counted, see _in_delay_line, else the interval's rate
    and mean packet size) at both ends, expected rate.  Worked out once per run, direction and
    window (four checks ask for the flows' active window), in the run's cache, which a new table
    empties; the checks only read it."""
    return run.derived(("qdisc_intervals", direction, a, b),
                       lambda: _qdisc_intervals_of(run, direction, a, b))


def _in_delay_line(run: RunData, direction: str, q: pd.DataFrame) -> np.ndarray:
    """Packets in netem's delay line at each root-qdisc sample, counted, not estimated; NaN
    where the samples cannot tell.

    Under htb or tbf, netem sits below the rate limiter and releases a packet only once its
    delay D has passed, so the packets still in the delay line at t are exactly those the root
    accepted in (t - D, t]: accepted(t) - accepted(t - D), with accepted = sent + backlog (a
    packet netem drops for loss is neither).  Rate x D would be wrong after an idle spell: a
    burst that has just arrived is all in the delay line while nothing leaves yet, and would
    look like a queue the link does not serve (lab 4's ACK stall: "39.8 % of 10 Mbit/s while
    backlogged" over 0.5 s, 0.3 s of it the GEO path's one-way delay).  netem's own rate (shaper
    = "netem") releases a packet D after its serialisation, which the root's counters cannot
    separate from its queue: NaN there, and the caller keeps rate x D."""
    d = run.direction(direction)
    D = float(d.get("delay") or 0) + float(d.get("jitter") or 0)
    t = q["t"].to_numpy(dtype=float)
    if d.get("shaper", "htb") == "netem":
        return np.full(len(t), math.nan)
    if D <= 0:
        return np.zeros(len(t))
    accepted = q["packets"].to_numpy(dtype=float) + q["backlog_packets"].to_numpy(dtype=float)
    line = accepted - np.interp(t - D, t, accepted)
    return np.where(t - D >= t[0] - 1e-9, line, math.nan)


def _qdisc_intervals_of(run: RunData, direction: str, a: float, b: float) -> pd.DataFrame:
    q = metrics.qdisc_root(run, direction)
    if len(q) < 2:
        return pd.DataFrame()
    q = q.assign(line=_in_delay_line(run, direction, q))
    q = q[(q["t"] >= a - 1e-9) & (q["t"] <= b + 1e-9)].reset_index(drop=True)
    if len(q) < 2:
        return pd.DataFrame()
    iv = pd.DataFrame({"t0": q["t"].iloc[:-1].to_numpy(), "t1": q["t"].iloc[1:].to_numpy(),
                       "dbytes": np.diff(q["bytes"].to_numpy(dtype=float)),
                       "dpackets": np.diff(q["packets"].to_numpy(dtype=float)),
                       "b0": q["backlog_packets"].iloc[:-1].to_numpy(dtype=float),
                       "b1": q["backlog_packets"].iloc[1:].to_numpy(dtype=float),
                       "l0": q["line"].iloc[:-1].to_numpy(), "l1": q["line"].iloc[1:].to_numpy()})
    iv["dt"] = iv["t1"] - iv["t0"]
    iv = iv[(iv["dt"] > 0) & (iv["dbytes"] >= 0)].reset_index(drop=True)
    iv["rate"] = iv["dbytes"] * 8 / iv["dt"]
    size = (iv["dbytes"] / iv["dpackets"]).where(iv["dpackets"] > 0, MTU)    # mean packet bytes
    dl = run.delay_line_packets(direction, iv["rate"], size)     # where not counted
    iv["q0"] = iv["b0"] - iv["l0"].fillna(dl)
    iv["q1"] = iv["b1"] - iv["l1"].fillna(dl)
    if len(run.rate_changes(direction)):
        iv["expected"] = [run.expected_rate(direction, x, y) for x, y in zip(iv["t0"], iv["t1"])]
    else:                                      # a fixed rate: run.expected_rate's own answer
        iv["expected"] = run.rate(direction)
    return iv


def _burst_bytes(run: RunData, direction: str) -> float:
    d = run.direction(direction)
    if d.get("burst"):
        return float(d["burst"])
    return max(2 * WIRE, run.rate(direction) / 8 * 0.004)    # tc.default_burst's depth


def payload_fraction(mss: float = metrics.DEFAULT_MSS) -> float:
    """Goodput per wire byte for full-size segments (what iperf3 can see of the link rate)."""
    return mss / (mss + TCP_IP_HEADERS + WIRE_OVERHEAD)


def _goodput_bins(run: RunData, direction: str, a: float, b: float, width: float) -> pd.DataFrame:
    """Aggregate goodput of a direction's flows in bins of `width` s (from iperf3 intervals)."""
    tp = metrics.throughput_series(run)
    fm = metrics.flow_info(run)
    if len(fm):
        tp = tp[tp["flow"].isin(fm[fm["direction"] == direction].index)]
    if not len(tp) or not (b > a):
        return pd.DataFrame(columns=["t0", "t1", "bps", "expected"])
    edges = np.arange(a, b + 1e-9, width)
    rows = []
    mid = (tp["t_start"] + tp["t_end"]) / 2
    for x, y in zip(edges[:-1], edges[1:]):
        inside = tp[(mid >= x) & (mid < y)]
        if len(inside):
            rows.append({"t0": x, "t1": y, "bps": inside["bytes"].sum() * 8 / (y - x),
                         "expected": run.expected_rate(direction, x, y)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the checks

def check_rate_ceiling(run, direction, th: Thresholds):
    a, b = active_window(run, direction)
    iv = _qdisc_intervals(run, direction, a, b)
    rate = run.rate(direction)
    expected = f"<= {_mbit(rate)} (+{th.rate_ceiling_tol:.0%} and the {_burst_bytes(run, direction):.0f}-byte burst)"
    if len(iv):
        t = iv["t0"].to_numpy()
        cum_b = np.concatenate([[0.0], np.cumsum(iv["dbytes"].to_numpy())])
        times = np.concatenate([t, [iv["t1"].iloc[-1]]])
        worst, worst_ratio, worst_exp = math.nan, -math.inf, rate
        for i in range(len(times) - 1):
            j = int(np.searchsorted(times, times[i] + th.ceiling_window))
            if j >= len(times):
                if i > 0:
                    break
                j = len(times) - 1
            dt = times[j] - times[i]
            if dt <= 0:
                continue
            r = (cum_b[j] - cum_b[i]) * 8 / dt
            exp = run.expected_rate(direction, times[i], times[j])
            limit = exp * (1 + th.rate_ceiling_tol) + _burst_bytes(run, direction) * 8 / dt
            if r / limit > worst_ratio:
                worst_ratio, worst, worst_exp = r / limit, r, exp
        if math.isfinite(worst):
            ok = worst_ratio <= 1.0
            return _check("rate_ceiling", ok, worst, expected,
                          f"highest departure rate over {th.ceiling_window:g} s windows "
                          f"{_mbit(worst)} of a configured {_mbit(worst_exp)}"
                          + ("" if ok else ": the rate limiter let more through than configured"),
                          direction, "bit/s", source="qdisc")
    bins = _goodput_bins(run, direction, a, b, th.ceiling_window)
    if len(bins):
        pf = payload_fraction()
        r = bins["bps"] / pf
        ratio = r / (bins["expected"] * (1 + th.rate_ceiling_tol))
        k = int(ratio.idxmax())
        ok = bool(ratio.max() <= 1.0)
        return _check("rate_ceiling", ok, float(r[k]), expected,
                      f"highest goodput over {th.ceiling_window:g} s, scaled to wire bytes, "
                      f"{_mbit(r[k])} of {_mbit(rate)} (no qdisc statistics: from iperf3)",
                      direction, "bit/s", source="iperf")
    return _check("rate_ceiling", None, None, expected,
                  "not measured: no qdisc statistics and no iperf3 intervals", direction)


def _backlogged(iv: pd.DataFrame, th: Thresholds) -> pd.DataFrame:
    """The sample intervals with a queue beyond the delay line at both ends."""
    return iv[(iv["q0"] >= th.backlog_min_pkts) & (iv["q1"] >= th.backlog_min_pkts)]


def busy_link(run, direction: str, a: float, b: float) -> dict:
    """How a direction's bottleneck spent [a, b]: seconds sampled, seconds it had a queue
    (beyond its delay line), and the bit/s of frames it sent while it had one (None without)."""
    run = run if isinstance(run, RunData) else RunData(run)
    iv = _qdisc_intervals(run, direction, a, b)
    if not len(iv):
        return {"sampled_s": 0.0, "busy_s": 0.0, "busy_bps": None}
    busy = _backlogged(iv, Thresholds())
    T = float(busy["dt"].sum())
    return {"sampled_s": float(iv["dt"].sum()), "busy_s": T,
            "busy_bps": float(busy["dbytes"].sum() * 8 / T) if T > 0 else None}


def check_rate_backlogged(run, direction, th: Thresholds):
    a, b = active_window(run, direction)
    iv = _qdisc_intervals(run, direction, a, b)
    expected = f">= {th.backlog_min_frac:.0%} of the configured rate while backlogged"
    if not len(iv):
        return _check("rate_backlogged", None, None, expected,
                      "not measured: no bottleneck qdisc statistics in the run", direction)
    busy = _backlogged(iv, th)
    T = float(busy["dt"].sum())
    if T < th.backlog_min_time:
        return _check("rate_backlogged", None, None, expected,
                      f"not measured: the bottleneck queue held >= {th.backlog_min_pkts:g} packets "
                      f"for only {T:.2f} s", direction, backlogged_s=T)
    achieved = float(busy["dbytes"].sum() * 8 / T)
    exp = float((busy["expected"] * busy["dt"]).sum() / T)
    frac = achieved / exp
    ok = frac >= th.backlog_min_frac
    return _check("rate_backlogged", ok, frac, expected,
                  f"{_mbit(achieved)} left the bottleneck during {T:.1f} s with a queue, "
                  f"{frac:.1%} of {_mbit(exp)}"
                  + ("" if ok else ": the emulator did not serve its queue at the configured rate "
                     "(CPU starved?)"), direction, "fraction", backlogged_s=T, achieved_bps=achieved)


def _clean_link(run, direction) -> str | None:
    """Why link_limited does not apply, or None if it does."""
    d = run.direction(direction)
    if float(d.get("loss") or 0) > 0:
        return "the link drops packets at random"
    if run.profile.get("dynamics"):
        return "the link changes over time"
    if run.buffer_packets(direction) * MTU < 0.999 * run.bdp_bytes(direction):
        return "the buffer is below one BDP"
    spec_flows = (run.manifest.get("spec") or {}).get("flows") or []
    if any(f.get("rate") for f in spec_flows if f.get("direction", "down") == direction):
        return "a flow has a rate cap"
    fl = metrics.flow_info(run)
    if not len(fl):
        return "no flows"
    fl = fl[fl["direction"] == direction]
    if (fl["protocol"] != "tcp").any() if "protocol" in fl else False:
        return "a flow is not TCP"
    if fl["bytes_requested"].notna().any():
        return "size-limited flows"
    return None


def check_link_limited(run, direction, th: Thresholds):
    expected = f">= {th.link_limited_min:.0%} of the rate in steady state"
    why = _clean_link(run, direction)
    if why:
        return _check("link_limited", None, None, expected, f"does not apply: {why}", direction)
    fl = metrics.flow_info(run)
    fl = fl[fl["direction"] == direction]
    a, b = float(fl["t_start"].max()), float(fl["t_end"].min())
    a = a + max(1.0, 0.25 * (b - a))
    b = b - 0.2
    if not (b - a >= 1.0):
        return _check("link_limited", None, None, expected,
                      "not measured: the flows overlap for too short a steady state", direction)
    iv = _qdisc_intervals(run, direction, a, b)
    if len(iv):
        edges = np.arange(a, b + 1e-9, 1.0)
        fr = []
        for x, y in zip(edges[:-1], edges[1:]):
            w = iv[(iv["t0"] >= x) & (iv["t1"] <= y)]
            if w["dt"].sum() > 0.5:
                fr.append(w["dbytes"].sum() * 8 / w["dt"].sum() / run.expected_rate(direction, x, y))
        src = "qdisc"
    else:
        bins = _goodput_bins(run, direction, a, b, 1.0)
        fr = list(bins["bps"] / payload_fraction() / bins["expected"]) if len(bins) else []
        src = "iperf"
    if not fr:
        return _check("link_limited", None, None, expected, "not measured: no samples", direction)
    med = float(np.median(fr))
    ok = med >= th.link_limited_min
    return _check("link_limited", ok, med, expected,
                  f"bulk flows used {med:.1%} of the link in steady state (median of 1 s, {src})"
                  + ("" if ok else ": with no random loss and a full BDP of buffer they should "
                     "fill it, so something other than the emulated link (CPU, socket buffers) "
                     "limited them"), direction, "fraction", source=src)


def check_queue(run, direction, th: Thresholds):
    cap = run.buffer_packets(direction)
    d = run.direction(direction)
    if d.get("limit"):
        cap = float(d["limit"]) - run.delay_line_packets(direction)
    rate = run.rate(direction)
    slack_ms_pkts = th.queue_slack_ms / 1e3 * rate / (8 * WIRE)
    lim_q = cap * (1 + th.queue_rel) + th.queue_slack_pkts
    lim_r = cap * (1 + th.rtt_queue_rel) + th.queue_slack_pkts + slack_ms_pkts
    expected = f"<= {cap:.0f} packets of buffer (qdisc +{th.queue_rel:.0%}, RTT +{th.rtt_queue_rel:.0%})"
    a, b = active_window(run, direction)
    iv = _qdisc_intervals(run, direction, a, b)
    q99 = float(np.percentile(np.concatenate([iv["q0"], iv["q1"]]), 99)) if len(iv) else math.nan
    rtt = metrics.rtt_samples(run)
    fl = metrics.flow_info(run)
    if len(fl) and len(rtt):
        rtt = rtt[rtt["flow"].isin(fl[fl["direction"] == direction].index)]
    rq = math.nan
    if len(rtt):
        # the median: single samples can carry a delayed ACK (>= 40 ms on Linux), not queueing
        qd_ms = float(np.percentile(rtt["rtt_ms"], 50)) - run.base_rtt() * 1e3
        rq = max(0.0, qd_ms) / 1e3 * rate / (8 * WIRE)
    if not math.isfinite(q99) and not math.isfinite(rq):
        return _check("queue_within_buffer", None, None, expected,
                      "not measured: no qdisc statistics and no RTT samples", direction)
    bad = []
    if math.isfinite(q99) and q99 > lim_q:
        bad.append(f"the bottleneck queue reached {q99:.0f} packets (p99)")
    if math.isfinite(rq) and rq > lim_r:
        bad.append(f"the flows' RTT implies {rq:.0f} packets of queue (median RTT less the "
                   f"configured RTT): delay is added outside the emulated buffer")
    msg = (f"queue p99 {q99:.0f} packets at the qdisc, {rq:.0f} implied by the median RTT, "
           f"buffer {cap:.0f}"
           if not bad else "; ".join(bad) + f" (buffer {cap:.0f} packets)")
    return _check("queue_within_buffer", not bad, q99 if math.isfinite(q99) else rq, expected, msg,
                  direction, "packets", rtt_queue_packets=rq)


def spacing_from_capture(cap: pd.DataFrame, rate: float, sender_port=None) -> float:
    """Median time per acknowledged full-size packet between ACKs arriving at the sender,
    divided by the ideal serialisation time (8 x WIRE / rate).  `cap` is a tshark table
    (cclab.analysis.tshark.parse) taken at the sender; ACKs are the segments without payload."""
    acks = cap[(cap["len"].fillna(0) == 0) & cap["ack"].notna()]
    if sender_port is not None and "dstport" in acks:
        acks = acks[acks["dstport"] == sender_port]
    if len(acks) < 10:
        return math.nan
    acks = acks.sort_values("time")
    dt = np.diff(acks["time"].to_numpy(dtype=float))
    da = np.diff(acks["ack"].to_numpy(dtype=float))
    ok = da > 0
    per_pkt = dt[ok] / (da[ok] / metrics.DEFAULT_MSS)
    if not len(per_pkt):
        return math.nan
    return float(np.median(per_pkt) / (8 * WIRE / rate))


def check_spacing(run, direction, th: Thresholds):
    rate = run.rate(direction)
    ideal_us = 8 * WIRE / rate * 1e6
    expected = f"{ideal_us:.1f} us per {WIRE}-byte packet (+-{th.spacing_tol:.0%})"
    cap = run.table("capture") if "capture" in run._tables or (run.path / "capture.csv").exists() \
        else pd.DataFrame()
    if len(cap):
        ratio = spacing_from_capture(cap, rate)
        if math.isfinite(ratio):
            ok = abs(ratio - 1) <= th.spacing_tol_capture
            return _check("packet_spacing", ok, ratio, f"ratio to {ideal_us:.1f} us within "
                          f"+-{th.spacing_tol_capture:.0%}",
                          f"median ACK spacing per packet at the sender {ratio:.2f} x the ideal "
                          f"serialisation time", direction, "ratio", source="capture")
    a, b = active_window(run, direction)
    iv = _qdisc_intervals(run, direction, a, b)
    if not len(iv):
        return _check("packet_spacing", None, None, expected,
                      "not measured: no capture and no qdisc statistics", direction)
    busy = iv[(iv["q0"] >= th.backlog_min_pkts) & (iv["q1"] >= th.backlog_min_pkts) & (iv["dpackets"] > 0)]
    if busy["dt"].sum() < th.backlog_min_time:
        return _check("packet_spacing", None, None, expected,
                      "not measured: the bottleneck was never backlogged long enough", direction)
    spacing = busy["dt"].sum() / busy["dpackets"].sum()
    mean_pkt = busy["dbytes"].sum() / busy["dpackets"].sum()
    exp_rate = float((busy["expected"] * busy["dt"]).sum() / busy["dt"].sum())
    ideal = 8 * mean_pkt / exp_rate
    ratio = spacing / ideal
    ok = abs(ratio - 1) <= th.spacing_tol
    return _check("packet_spacing", ok, ratio, expected,
                  f"packets left the backlogged bottleneck every {spacing * 1e6:.1f} us, ideal "
                  f"{ideal * 1e6:.1f} us for {mean_pkt:.0f}-byte packets ({ratio:.2f} x)",
                  direction, "ratio", source="qdisc", spacing_us=spacing * 1e6, ideal_us=ideal * 1e6)


def check_idle_rtt(run, th: Thresholds):
    base = run.base_rtt() * 1e3
    dyn = run.profile.get("dynamics") or {}
    lo = hi = base
    if dyn.get("kind") == "reconfigure" and dyn.get("delay"):
        lo, hi = 2e3 * float(dyn["delay"][0]), 2e3 * float(dyn["delay"][1])
    jitter = (float(run.direction("down").get("jitter") or 0) + float(run.direction("up").get("jitter") or 0)) * 1e3
    lo_ok = lo - jitter - th.idle_rtt_below_ms
    hi_ok = hi + jitter + th.idle_rtt_abs_ms + th.idle_rtt_rel * hi
    expected = f"{lo_ok:.2f} .. {hi_ok:.2f} ms (configured {base:g} ms)"
    fl = metrics.flow_info(run)
    first = float(fl["t_start"].min()) if len(fl) and fl["t_start"].notna().any() else 0.0
    ping = run.table("ping")
    vals, src = np.array([]), None
    if len(ping):
        p = ping[(pd.to_numeric(ping["t"], errors="coerce") < first)]
        vals = pd.to_numeric(p["rtt_ms"], errors="coerce").dropna().to_numpy()
        src = f"{len(vals)} ping(s) before the first flow"
    if not len(vals):
        rtt = metrics.rtt_samples(run)
        if len(rtt):
            m = rtt["min_rtt_ms"].dropna()
            vals = np.array([m.min() if len(m) else rtt["rtt_ms"].min()])
            src = "the flows' minimum RTT (no idle ping)"
    if not len(vals):
        return _check("idle_rtt", None, None, expected, "not measured: no ping and no RTT samples",
                      unit="ms")
    med = float(np.median(vals))
    ok = lo_ok <= med <= hi_ok
    return _check("idle_rtt", ok, med, expected,
                  f"idle RTT {med:.2f} ms from {src}, configured {base:g} ms"
                  + ("" if ok else (": slower than configured (processing delay in the emulator)"
                                    if med > hi_ok else ": faster than the configured delay")),
                  unit="ms", source=src)


def check_cpu(run, th: Thresholds):
    expected = f"busiest CPU <= {th.cpu_busy_max:.0%} busy at the {th.cpu_quantile:.0%} quantile"
    cpu = run.table("cpu")
    if not len(cpu):
        return _check("cpu_headroom", None, None, expected,
                      "not measured: the run has no cpu.csv (t, cpu, busy_frac); record CPU load "
                      "(e.g. cclab.cpu.CpuSampler) to check headroom", unit="fraction")
    a = min(active_window(run, d)[0] for d in run.data_directions())
    b = max(active_window(run, d)[1] for d in run.data_directions())
    c = cpu[(pd.to_numeric(cpu["t"], errors="coerce") >= a) & (pd.to_numeric(cpu["t"], errors="coerce") <= b)]
    if not len(c):
        c = cpu
    per = c[c["cpu"].astype(str) != "all"]
    if not len(per):
        per = c
    q = per.groupby(per["cpu"].astype(str))["busy_frac"].quantile(th.cpu_quantile)
    worst = str(q.idxmax())
    val = float(q.max())
    ok = val <= th.cpu_busy_max
    return _check("cpu_headroom", ok, val, expected,
                  f"{worst} was {val:.0%} busy ({th.cpu_quantile:.0%} quantile over {len(c)} samples)"
                  + ("" if ok else ": no CPU headroom, so timing in the emulation cannot be trusted"),
                  unit="fraction", cpu=worst)


def check_complete(run):
    st = run.manifest.get("status")
    ok = st == "complete"
    return _check("run_complete", ok, st, "complete",
                  "the run finished" if ok else f"the run is {st}: {run.manifest.get('error')}")


def check_link_changes(run, th: Thresholds):
    expected = f"every link change within {th.change_late_max:g} s of its planned instant"
    ch = run.table("changes")
    late = (pd.to_numeric(ch["t_applied"]) - pd.to_numeric(ch["t_planned"])).abs()
    worst = int(late.idxmax())
    val = float(late.max())
    ok = val <= th.change_late_max
    return _check("link_changes", ok, val, expected,
                  f"{len(ch)} changes, {late.median() * 1000:.0f} ms late (median), "
                  f"{val * 1000:.0f} ms at most (planned at {float(ch['t_planned'][worst]):.2f} s)"
                  + ("" if ok else ": the emulator did not keep the link's timeline"), unit="s")


# ---------------------------------------------------------------- the verdict

def verdict(run, thresholds: Thresholds | None = None) -> dict:
    """Every check of one run and the overall verdict (does not write anything)."""
    run = run if isinstance(run, RunData) else RunData(run)
    th = thresholds or Thresholds()
    checks = [check_complete(run), check_idle_rtt(run, th), check_cpu(run, th)]
    if len(run.table("changes")):                 # a time-varying link changed during the run
        checks.append(check_link_changes(run, th))
    for d in run.data_directions():
        for fn in (check_rate_ceiling, check_rate_backlogged, check_link_limited, check_queue,
                   check_spacing):
            try:
                checks.append(fn(run, d, th))
            except Exception as e:          # a check that crashes must not hide the others
                checks.append(_check(fn.__name__.removeprefix("check_"), None, None, "",
                                     f"not measured: {type(e).__name__}: {e}", d))
    failed = [c["name"] for c in checks if c["ok"] is False]
    unknown = [c["name"] for c in checks if c["ok"] is None]
    rate_ok = any(c["ok"] for c in checks if c["name"] in RATE_CHECKS)
    ok = not failed and rate_ok
    reasons = [f"{c['name']}: {c['reason']}" for c in checks if c["ok"] is False]
    if not failed and not rate_ok:
        reasons.append("no rate check could be made (no qdisc statistics or bulk flows)")
    return {"ok": bool(ok), "checks": checks, "failed": failed, "unknown": unknown,
            "reasons": reasons, "thresholds": asdict(th),
            "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_verdict(run_dir, thresholds: Thresholds | None = None) -> dict:
    """Compute the verdict and store it beside the manifest (fidelity.json)."""
    v = verdict(RunData(run_dir), thresholds)
    results.write_beside(run_dir, "fidelity", v)
    return v


def summary_line(v: dict | None) -> str:
    if not v:
        return "fidelity: not checked"
    if v.get("ok"):
        return "fidelity: OK"
    return "UNTRUSTWORTHY: " + "; ".join(v.get("reasons") or v.get("failed") or ["?"])

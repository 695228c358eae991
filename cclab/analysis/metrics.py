"""Metrics from a run's raw tables, and their means with confidence intervals across runs.

Per flow (`flow_metrics`):  goodput, RTT percentiles, queueing delay (RTT - min RTT),
retransmissions, slow-start exit (first finite ssthresh: time, cwnd, peak, overshoot beyond the
BDP), completion time of size-limited flows.
Per run (`run_metrics`):    utilisation per direction (goodput and, with qdisc stats, the link's),
bottleneck drop rate, Jain's fairness index and each algorithm's share while flows compete.
Across runs (`summarise`):  mean, standard deviation and t-distribution confidence interval.

Conventions: times in s since the run start; rates in bit/s; RTTs in ms; cwnd in packets
(segments) unless a column says bytes.  Percentiles interpolate linearly (numpy's default).
Where a metric needs a table that is missing, it is NaN.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .data import INFINITE_SSTHRESH, RunData, as_runs
from cclab.schema import MSS as DEFAULT_MSS


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce")


# ---------------------------------------------------------------- time series

def flow_info(run: RunData) -> pd.DataFrame:
    """flows.csv with numeric columns, indexed by flow number (a copy: the caller may change
    it).  Worked out once per run: the fidelity checks alone ask for it about ten times."""
    return run.derived("flow_info", lambda: _flow_info(run)).copy()


def _flow_info(run: RunData) -> pd.DataFrame:
    fl = run.table("flows").copy()
    if not len(fl):
        return fl
    for c in ("t_start", "t_end", "throughput_bps", "received_bytes", "sent_bytes",
              "bytes_requested", "retransmits", "duration", "start"):
        fl[c] = _num(fl, c)
    return fl.set_index("flow", drop=False)


def mss_of(run: RunData, flow) -> float:
    ss = run.table("ss")
    if len(ss) and "mss" in ss:
        m = _num(ss[ss["flow"] == flow], "mss").dropna()
        if len(m):
            return float(m.median())
    return DEFAULT_MSS


def iperf_side(run: RunData, side: str) -> pd.DataFrame:
    """iperf.csv rows of one side ("sender": cwnd, RTT, retransmits; "receiver": what arrived).
    Falls back to the other side's rows if a side is missing (older runs have only the sender)."""
    ip = run.table("iperf")
    if not len(ip) or "side" not in ip:
        return ip
    mine = ip[ip["side"] == side]
    return mine if len(mine) else ip[ip["side"] != side]


def rtt_samples(run: RunData) -> pd.DataFrame:
    """RTT samples: columns t, flow, port, rtt_ms, min_rtt_ms, source (ss, probe or iperf).

    A socket reports an RTT of 0 until it has measured one (the kernel's srtt starts at 0; ss
    shows the handshake's first sample with rtt 0 and mss 524): such samples are not RTTs and
    are left out, so no series starts at 0 ms and no percentile or minimum counts them."""
    ss = run.table("ss")
    if len(ss) and _num(ss, "rtt_ms").notna().any():
        d = pd.DataFrame({"t": _num(ss, "t"), "flow": ss["flow"], "port": _num(ss, "local_port"),
                          "rtt_ms": _num(ss, "rtt_ms"), "min_rtt_ms": _num(ss, "min_rtt_ms")})
        d["source"] = "ss"
    else:
        pr = run.table("probe")
        if len(pr) and _num(pr, "srtt_us").notna().any():
            d = pd.DataFrame({"t": _num(pr, "t"), "flow": pr["flow"], "port": _num(pr, "local_port"),
                              "rtt_ms": _num(pr, "srtt_us") / 1000.0, "min_rtt_ms": np.nan})
            d["source"] = "probe"
        else:
            ip = iperf_side(run, "sender")
            d = pd.DataFrame({"t": _num(ip, "t_end"), "flow": ip.get("flow", pd.Series(dtype=float)),
                              "port": _num(ip, "stream"), "rtt_ms": _num(ip, "rtt_us") / 1000.0,
                              "min_rtt_ms": np.nan})
            d["source"] = "iperf"
    d["min_rtt_ms"] = d["min_rtt_ms"].where(d["min_rtt_ms"] > 0)
    return d[d["rtt_ms"] > 0]


def throughput_series(run: RunData) -> pd.DataFrame:
    """Goodput per flow and iperf3 interval: columns t (interval end), t_start, t_end, flow, bps.
    From the receiver's intervals when recorded (bytes delivered), else the sender's."""
    ip = iperf_side(run, "receiver")
    if not len(ip):
        return pd.DataFrame(columns=["t", "t_start", "t_end", "flow", "bps"])
    d = pd.DataFrame({"flow": ip["flow"], "t_start": _num(ip, "t_start"), "t_end": _num(ip, "t_end"),
                      "bytes": _num(ip, "bytes")})
    d["t_start"], d["t_end"] = d["t_start"].round(3), d["t_end"].round(3)
    g = d.groupby(["flow", "t_start", "t_end"], as_index=False)["bytes"].sum()
    span = (g["t_end"] - g["t_start"]).where(lambda s: s > 0)
    g["bps"] = g["bytes"] * 8 / span
    g["t"] = g["t_end"]
    return g[["t", "t_start", "t_end", "flow", "bps", "bytes"]].dropna(subset=["bps"])


# The window goodput is averaged over when plotted.  Receiver reads are bursty on a 100 ms
# scale: on the recorded lab runs, 100 ms bins of goodput reach 1.7-2.7 times the link rate
# while 0.5 s bins stay within 1.25 times it.
THROUGHPUT_WINDOW = 0.5

# The byte counters a flow's rate can be binned from (throughput_binned's `counter`):
#   goodput    what the receiving application read: the receiver's iperf3 intervals (else ss's
#              bytes_acked, else the sender's intervals).  What the flows' summaries count.
#   delivered  what went through the link: ss's `delivered` (tcpi_delivered, the segments the
#              sender knows arrived, each once, SACKed ones included) times the MSS.
# They part after a loss: the receiver holds what arrives behind the hole, and when the
# retransmission fills it the application reads all of it at once.  On 62 lab VM runs of two
# student journeys, 0.5 s bins of goodput reach 1.05-1.3 times the link rate that way (1.9 for
# 3 s on the GEO link, whose hole stayed open 5 s), while delivered stays within 0.975 times
# it, and the flows' delivered summed per bin is the payload the bottleneck sent within 2 % in
# 97 % of the bins it was busy (goodput: 75 %).  The time-series plot of how fast flows got
# data through the link bins `delivered` (plots.goodput_panel).
COUNTERS = ("goodput", "delivered")


def _ss_counters(run: RunData, col: str) -> list:
    """[(flow, t, bytes)] per connection from one of ss's cumulative counters: bytes_acked, or
    delivered (segments, each counted at the MSS of the sample that saw it delivered).  Each
    starts at its flow's test start (flows.csv t_start, where iperf3's intervals start), not at
    the handshake: the connection carries only iperf3's cookie until then."""
    ss = run.table("ss")
    if not len(ss) or col not in ss or not _num(ss, col).notna().any():
        return []
    fl = flow_info(run)
    starts = fl["t_start"].to_dict() if len(fl) else {}
    out = []
    for (f, _), g in ss.groupby(["flow", "local_port"]):
        g = g.assign(t=_num(g, "t"), v=_num(g, col)).dropna(subset=["t", "v"]).sort_values("t")
        if len(g) < 2:
            continue
        t = g["t"].to_numpy(dtype=float)
        v = np.maximum.accumulate(g["v"].to_numpy(dtype=float))
        if col == "delivered":
            mss = _num(g, "mss").fillna(DEFAULT_MSS).to_numpy(dtype=float)
            v = np.cumsum(np.diff(v, prepend=0.0) * mss)
        t0 = starts.get(f, math.nan)
        if t[0] < t0 < t[-1]:
            keep = t > t0
            t, v = np.r_[t0, t[keep]], np.r_[np.interp(t0, t, v), v[keep]]
        out.append((f, t, v))
    return out


def _counters(run: RunData, counter: str = "goodput") -> tuple[list, str]:
    """Cumulative byte counters per flow: [(flow, t, bytes)] with t increasing, and the source.
    counter "goodput": the receiver's iperf3 intervals (bytes read) when recorded, else ss's
    bytes_acked per connection, else the sender's iperf3 intervals.  counter "delivered": ss's
    delivered per connection when every flow with goodput has it, else the goodput."""
    if counter not in COUNTERS:
        raise ValueError(f"counter: one of {', '.join(COUNTERS)}, not {counter!r}")
    out = []
    ip = iperf_side(run, "receiver")
    source = "iperf receiver"
    if len(ip) and "side" in ip and (ip["side"] != "receiver").all():
        acked = _ss_counters(run, "bytes_acked")
        if acked:
            out, source = acked, "ss bytes_acked"
        else:
            source = "iperf sender"
    if not out:
        tp = throughput_series(run)
        for f, g in tp.groupby("flow"):
            g = g.sort_values("t_end")
            # each interval adds its bytes between its start and its end; gaps add nothing
            t = np.column_stack([g["t_start"], g["t_end"]]).ravel()
            c = np.cumsum(g["bytes"].to_numpy(dtype=float))
            b = np.column_stack([np.concatenate([[0.0], c[:-1]]), c]).ravel()
            out.append((f, t, b))
    if counter == "delivered":
        delivered = _ss_counters(run, "delivered")
        if delivered and {f for f, _, _ in out} <= {f for f, _, _ in delivered}:
            return delivered, "ss delivered"
    return out, source


def sample_spacing(run: RunData, counter: str = "goodput") -> float:
    """The median time between the samples of the `counter` binned (0.1 s for iperf3's
    default interval; ss's period for delivered); NaN without samples."""
    counters, _ = _counters(run, counter)
    gaps = [np.diff(np.unique(t)) for _, t, _ in counters]
    gaps = np.concatenate(gaps) if gaps else np.array([])
    return round(float(np.median(gaps)), 6) if len(gaps) else math.nan


def window_seconds(run: RunData, window=THROUGHPUT_WINDOW, counter: str = "goodput") -> float:
    """A binning window in s: a number of seconds, or "rtt" for the profile's base RTT (no
    shorter than the time between the `counter`'s samples: a bin between two samples would only
    interpolate).  A window in seconds shorter than that is refused."""
    spacing = sample_spacing(run, counter)
    if isinstance(window, str):
        if window.strip().lower() != "rtt":
            raise ValueError(f"window: seconds or 'rtt', not {window!r}")
        w = run.base_rtt()
        if not w > 0:
            raise ValueError(f"window 'rtt': {run.label} has no base RTT in its profile")
        return max(w, spacing) if math.isfinite(spacing) else w
    w = float(window)
    if not w > 0:
        raise ValueError(f"window: {window!r} s is not positive")
    if math.isfinite(spacing) and w < spacing * 0.999:
        raise ValueError(f"window: {w:g} s is shorter than the {spacing:g} s between "
                         f"{run.label}'s {counter} samples")
    return w


def throughput_binned(run: RunData, window=THROUGHPUT_WINDOW, min_cover: float = 0.5,
                      counter: str = "goodput") -> pd.DataFrame:
    """Goodput per flow averaged over fixed bins of `window` s (or "rtt", one base RTT but no
    less than the time between samples; see window_seconds):
    columns flow, t_start, t_end, t (bin centre), bytes, bps, cover, source.
    counter="delivered" bins the data through the link instead (ss's delivered; see COUNTERS),
    where ss sampled every flow; `source` names what was binned.

    Bins are aligned on multiples of the window from the run start, the same for every flow,
    so flows can be compared and summed bin by bin.  The bytes of a bin are read off the
    flow's cumulative counter (linear between samples); a bin the flow only partly covers (its
    first and last) is averaged over the covered part, `cover` s, and left out if that is under
    `min_cover` of the window."""
    w = window_seconds(run, window, counter)
    counters, source = _counters(run, counter)
    rows = []
    for f, t, b in counters:
        t0, t1 = float(t[0]), float(t[-1])
        if not t1 > t0:
            continue
        k0, k1 = math.floor(t0 / w), math.ceil(t1 / w)
        lo = np.arange(k0, k1) * w
        hi = lo + w
        a, z = np.maximum(lo, t0), np.minimum(hi, t1)
        cover = z - a
        keep = cover >= min_cover * w
        got = np.interp(z, t, b) - np.interp(a, t, b)
        rows.append(pd.DataFrame({"flow": f, "t_start": lo[keep], "t_end": hi[keep],
                                  "bytes": got[keep], "bps": got[keep] * 8 / cover[keep],
                                  "cover": cover[keep]}))
    cols = ["flow", "t_start", "t_end", "t", "bytes", "bps", "cover", "source"]
    if not rows:
        return pd.DataFrame(columns=cols)
    d = pd.concat(rows, ignore_index=True)
    # a flow's connections (ss counters) each add their bytes; the bin is covered as far as
    # any of them covers it
    d = d.groupby(["flow", "t_start", "t_end"], as_index=False).agg(
        bytes=("bytes", "sum"), bps=("bps", "sum"), cover=("cover", "max"))
    d["t"] = (d["t_start"] + d["t_end"]) / 2
    d["source"] = source
    return d[cols]


def link_steps(run: RunData, direction: str = "down") -> pd.DataFrame:
    """The configured bottleneck over time, for drawing: columns t, rate_bps, delay_s (each row
    holds from its t on).  The profile's link from -inf, then each change applied (changes.csv);
    an outage (100 % loss, e.g. a LEO handover) shows as rate 0."""
    d = run.direction(direction)
    rows = [(-math.inf, run.rate(direction), float(d.get("delay") or 0))]
    ch = run.table("changes")
    if len(ch) and "direction" in ch:
        ch = ch[ch["direction"] == direction].copy()
        for c in ("t_applied", "rate_bps", "delay_s", "loss_percent"):
            ch[c] = _num(ch, c)
        for r in ch.sort_values("t_applied").itertuples():
            rate = r.rate_bps if math.isfinite(r.rate_bps) else rows[-1][1]
            delay = r.delay_s if math.isfinite(r.delay_s) else rows[-1][2]
            rows.append((r.t_applied, 0.0 if r.loss_percent >= 100 else rate, delay))
    return pd.DataFrame(rows, columns=["t", "rate_bps", "delay_s"])


def link_rate_steps(run: RunData, direction: str = "down") -> pd.DataFrame:
    """link_steps' rate alone: columns t, rate_bps."""
    return link_steps(run, direction)[["t", "rate_bps"]]


def base_rtt_steps(run: RunData) -> pd.DataFrame:
    """The configured round-trip propagation delay over time (down + up delay, following delay
    changes): columns t, base_rtt_ms."""
    down, up = link_steps(run, "down"), link_steps(run, "up")
    t = np.union1d(down["t"], up["t"])
    pick = lambda s: s["delay_s"].to_numpy()[np.searchsorted(s["t"].to_numpy(), t, side="right") - 1]
    return pd.DataFrame({"t": t, "base_rtt_ms": (pick(down) + pick(up)) * 1e3})


def cwnd_series(run: RunData) -> pd.DataFrame:
    """cwnd and ssthresh per flow: columns t, flow, cwnd (packets), ssthresh (packets, NaN while
    infinite), cwnd_bytes, source.  Per-ACK tcp_probe if recorded, else ss, else iperf3."""
    # one connection per flow is plotted per (flow, local_port); sum nothing here
    for source, cwnd_col in (("probe", "snd_cwnd"), ("ss", "cwnd")):
        tab = run.table(source)
        if len(tab) and _num(tab, cwnd_col).notna().any():
            d = pd.DataFrame({"t": _num(tab, "t"), "flow": tab["flow"],
                              "port": _num(tab, "local_port"), "cwnd": _num(tab, cwnd_col),
                              "ssthresh": _num(tab, "ssthresh")})
            d["source"] = source
            break
    else:
        ip = iperf_side(run, "sender")
        d = pd.DataFrame({"t": _num(ip, "t_end"), "flow": ip.get("flow", pd.Series(dtype=float)),
                          "port": _num(ip, "stream"), "cwnd": np.nan, "ssthresh": np.nan})
        d["cwnd_bytes"] = _num(ip, "snd_cwnd")
        d["source"] = "iperf"
        mss = {f: mss_of(run, f) for f in d["flow"].dropna().unique()}
        d["cwnd"] = d["cwnd_bytes"] / d["flow"].map(mss)
        return d.dropna(subset=["cwnd"]).sort_values("t")
    d.loc[d["ssthresh"] >= INFINITE_SSTHRESH, "ssthresh"] = np.nan
    mss = {f: mss_of(run, f) for f in d["flow"].dropna().unique()}
    d["cwnd_bytes"] = d["cwnd"] * d["flow"].map(mss)
    return d.dropna(subset=["cwnd"]).sort_values("t")


def acked_bytes_series(run: RunData, flow) -> pd.DataFrame:
    """Cumulative bytes acknowledged by a flow (all its connections): columns t, acked.
    From tcp_probe's snd_una (unwrapped mod 2^32) or, without it, ss's bytes_acked."""
    pr = run.table("probe")
    pr = pr[pr["flow"] == flow] if len(pr) else pr
    parts = []
    if len(pr) and _num(pr, "snd_una").notna().any():
        for _, g in pr.groupby("local_port"):
            una = _num(g, "snd_una").to_numpy(dtype=float)
            t = _num(g, "t").to_numpy(dtype=float)
            ok = np.isfinite(una) & np.isfinite(t)
            una, t = una[ok], t[ok]
            if not len(una):
                continue
            step = np.diff(una)
            step = np.where(step < -2 ** 31, step + 2 ** 32, step)   # sequence wrap
            step = np.where(step < 0, 0, step)                        # reordering of samples
            parts.append(pd.DataFrame({"t": t, "inc": np.concatenate([[0.0], step])}))
    else:
        ss = run.table("ss")
        ss = ss[ss["flow"] == flow] if len(ss) else ss
        if not len(ss) or not _num(ss, "bytes_acked").notna().any():
            return pd.DataFrame(columns=["t", "acked"])
        for _, g in ss.groupby("local_port"):
            b = _num(g, "bytes_acked").to_numpy(dtype=float)
            t = _num(g, "t").to_numpy(dtype=float)
            ok = np.isfinite(b) & np.isfinite(t)
            b, t = b[ok], t[ok]
            if not len(b):
                continue
            parts.append(pd.DataFrame({"t": t, "inc": np.diff(np.concatenate([[0.0], b])).clip(min=0)}))
    if not parts:
        return pd.DataFrame(columns=["t", "acked"])
    d = pd.concat(parts).sort_values("t", kind="stable")
    return pd.DataFrame({"t": d["t"].to_numpy(), "acked": d["inc"].cumsum().to_numpy()})


def download_time(acked: pd.DataFrame, sizes, origin: float | None = None) -> np.ndarray:
    """Time (s since `origin`, default the first sample) until `acked` first reaches each size;
    linear interpolation between samples; NaN for sizes never reached."""
    sizes = np.asarray(sizes, dtype=float)
    if not len(acked):
        return np.full(len(sizes), np.nan)
    t = acked["t"].to_numpy(dtype=float)
    a = np.maximum.accumulate(acked["acked"].to_numpy(dtype=float))
    t0 = t[0] if origin is None else origin
    out = np.full(len(sizes), np.nan)
    for i, s in enumerate(sizes):
        k = int(np.searchsorted(a, s, side="left"))
        if k >= len(a):
            continue
        if k == 0 or a[k] == a[k - 1]:
            out[i] = t[k] - t0
        else:
            frac = (s - a[k - 1]) / (a[k] - a[k - 1])
            out[i] = t[k - 1] + frac * (t[k] - t[k - 1]) - t0
    return out


# ---------------------------------------------------------------- slow start

def slow_start_exit(cw: pd.DataFrame) -> dict:
    """Slow-start exit of one connection from its cwnd/ssthresh samples (cwnd_series rows):
    the first sample with a finite ssthresh.  Time is relative to the first sample.
    Returns {"t_exit", "t_exit_abs", "cwnd_exit", "cwnd_peak"} (NaN if it never exited)."""
    cw = cw.sort_values("t")
    out = {"t_exit": math.nan, "t_exit_abs": math.nan, "cwnd_exit": math.nan,
           "cwnd_peak": math.nan}
    if not len(cw):
        return out
    fin = cw[cw["ssthresh"].notna()]
    if not len(fin):
        return out
    row = fin.iloc[0]
    t0 = float(cw["t"].iloc[0])
    before = cw[cw["t"] <= row["t"]]
    out.update(t_exit=float(row["t"]) - t0, t_exit_abs=float(row["t"]),
               cwnd_exit=float(row["cwnd"]), cwnd_peak=float(before["cwnd"].max()))
    return out


# ---------------------------------------------------------------- per flow

def flow_metrics(run: RunData) -> pd.DataFrame:
    """One row per flow; see the module docstring for the columns."""
    out = run.derived("flow_metrics", lambda: _shared_flow_metrics(run)).copy()
    out["trusted"] = run.trusted
    return out


# flow_metrics of run folders as their files are now, shared by every RunData of the folder: a lab
# notebook's checks each load the runs afresh, and working the metrics out again took the
# software-emulated lab VM 0.6 s a run (pandas, not reading the files).  A folder's entry is
# dropped when any of its files changes (size or time).  The shared frames are worked out from
# the files alone, never from tables a notebook was handed and may have changed in place.
MEMO_RUNS = 256
_memo: OrderedDict = OrderedDict()        # resolved path -> (files' stamp, frame)


def _files_stamp(path) -> tuple:
    try:
        with os.scandir(path) as it:
            stats = [(e.name, e.stat()) for e in it if e.is_file()]
    except OSError:
        return ()
    return tuple(sorted((name, st.st_size, st.st_mtime_ns) for name, st in stats))


def _shared_flow_metrics(run: RunData) -> pd.DataFrame:
    if run.own_tables:                          # tables attached by hand: this run's own answer
        return _flow_metrics(run)
    key = str(Path(run.path).resolve())
    stamp = _files_stamp(run.path)
    hit = _memo.get(key)
    if hit is not None and stamp and hit[0] == stamp:
        _memo.move_to_end(key)
        return hit[1]
    # tables this RunData has handed out may have been changed: work from the files
    fm = _flow_metrics(run if not run.tables_loaded else RunData(run.path))
    if stamp:
        _memo[key] = (stamp, fm)
        while len(_memo) > MEMO_RUNS:
            _memo.popitem(last=False)
    return fm


def _flow_metrics(run: RunData) -> pd.DataFrame:
    fl = flow_info(run)
    flows = list(fl.index) if len(fl) else sorted(run.table("iperf").get("flow", pd.Series()).dropna().unique())
    rtt = rtt_samples(run)
    tput = throughput_series(run)
    cw = cwnd_series(run)
    ss = run.table("ss")
    rows = []
    for f in flows:
        info = fl.loc[f] if len(fl) and f in fl.index else pd.Series(dtype=object)
        r = {"flow": f, "cca": info.get("cca"), "direction": info.get("direction", "down"),
             "run": run.label, "experiment": run.experiment, "repetition": run.repetition,
             "trusted": run.trusted}
        # goodput
        g = info.get("throughput_bps", math.nan)
        tp = tput[tput["flow"] == f]
        if not (isinstance(g, float) and math.isfinite(g)) and len(tp):
            g = tp["bytes"].sum() * 8 / max(1e-9, tp["t_end"].max() - tp["t_start"].min())
        r["goodput_bps"] = float(g) if g is not None else math.nan
        direction = r["direction"] if isinstance(r["direction"], str) else "down"
        r["utilisation"] = r["goodput_bps"] / run.rate(direction) if run.rate(direction) else math.nan
        # RTT and queueing delay
        rs = rtt[rtt["flow"] == f]
        vals = rs["rtt_ms"].to_numpy(dtype=float)
        base = np.nanmin(np.concatenate([vals, rs["min_rtt_ms"].to_numpy(dtype=float)])) if len(rs) else math.nan
        r["min_rtt_ms"] = float(base)
        for q in (50, 95, 99):
            r[f"rtt_p{q}_ms"] = stats.percentile(vals, q)
            r[f"qdelay_p{q}_ms"] = stats.percentile(vals - base, q) if len(vals) else math.nan
        r["rtt_mean_ms"] = float(np.mean(vals)) if len(vals) else math.nan
        r["rtt_source"] = rs["source"].iloc[0] if len(rs) else None
        # retransmissions
        sf = ss[ss["flow"] == f] if len(ss) else ss
        segs = retr = math.nan
        if len(sf):
            # counters are cumulative per connection: each port's largest value, summed
            segs = float(_num(sf, "data_segs_out").groupby(sf["local_port"]).max().sum(min_count=1))
            retr = float(_num(sf, "retrans_total").groupby(sf["local_port"]).max().sum(min_count=1))
        iperf_retr = info.get("retransmits", math.nan)
        if iperf_retr is not None and math.isfinite(float(iperf_retr)):
            retr = float(iperf_retr)
        r["retransmits"] = retr
        r["data_segs_out"] = segs
        r["retrans_rate"] = retr / segs if segs and math.isfinite(segs) and segs > 0 else math.nan
        # slow start (the flow's first connection by first sample)
        cf = cw[cw["flow"] == f]
        ex = {"t_exit": math.nan, "cwnd_exit": math.nan, "cwnd_peak": math.nan}
        if len(cf):
            first_port = cf.sort_values("t")["port"].iloc[0]
            ex = slow_start_exit(cf[cf["port"] == first_port])
        mss = mss_of(run, f)
        bdp = run.bdp_bytes(direction)
        r["ss_exit_s"] = ex["t_exit"]
        r["ss_exit_cwnd"] = ex["cwnd_exit"]
        r["ss_peak_cwnd"] = ex["cwnd_peak"]
        r["bdp_packets"] = bdp / mss if bdp else math.nan
        r["ss_overshoot"] = ex["cwnd_peak"] * mss / bdp - 1 if bdp else math.nan
        # completion time of size-limited flows
        r["bytes_requested"] = info.get("bytes_requested", math.nan)
        t_start, t_end = info.get("t_start", math.nan), info.get("t_end", math.nan)
        r["fct_s"] = (t_end - t_start) if (r["bytes_requested"] is not None
                                           and math.isfinite(float(r["bytes_requested"] or math.nan))) else math.nan
        r["t_start"], r["t_end"] = t_start, t_end
        rows.append(r)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- per run

def overlap_window(fm: pd.DataFrame, tput: pd.DataFrame) -> tuple[float, float]:
    """The interval during which every flow was sending (from iperf3 intervals)."""
    spans = tput.groupby("flow").agg(a=("t_start", "min"), b=("t_end", "max"))
    if not len(spans):
        return (math.nan, math.nan)
    return float(spans["a"].max()), float(spans["b"].min())


def shares(run: RunData, window: tuple[float, float] | None = None) -> pd.DataFrame:
    """Throughput of each flow while all compete: columns flow, cca, bps, share."""
    tput = throughput_series(run)
    fl = flow_info(run)
    if not len(tput):
        return pd.DataFrame(columns=["flow", "cca", "bps", "share"])
    a, b = window or overlap_window(None, tput)
    mid = (tput["t_start"] + tput["t_end"]) / 2
    inside = tput[(mid >= a) & (mid <= b)] if (math.isfinite(a) and b > a) else tput
    if not len(inside):
        inside = tput
    per = inside.groupby("flow").apply(
        lambda g: g["bytes"].sum() * 8 / max(1e-9, (g["t_end"] - g["t_start"]).sum())).rename("bps")
    per = per.reset_index()
    per["cca"] = per["flow"].map(fl["cca"] if len(fl) else {})
    total = per["bps"].sum()
    per["share"] = per["bps"] / total if total else math.nan
    return per


def qdisc_root(run: RunData, direction: str) -> pd.DataFrame:
    """Samples of the root qdisc of the bottleneck in one direction (first device if several),
    with numeric columns; a copy of what is worked out once per run and direction."""
    return run.derived(("qdisc_root", direction), lambda: _qdisc_root(run, direction)).copy()


def _qdisc_root(run: RunData, direction: str) -> pd.DataFrame:
    q = run.table("qdisc")
    if not len(q):
        return q
    q = q[(q["direction"] == direction) & (q["parent"].astype(str) == "root")]
    if not len(q):
        return q
    dev = q["dev"].iloc[0]
    q = q[q["dev"] == dev].copy()
    for c in ("t", "bytes", "packets", "drops", "backlog_bytes", "backlog_packets"):
        q[c] = _num(q, c)
    return q.sort_values("t")


def run_metrics(run: RunData) -> dict:
    """One dict per run: utilisation, drop rate, fairness, shares, RTT, slow start, verdict."""
    fm = flow_metrics(run)
    out = {"run": run.label, "experiment": run.experiment, "repetition": run.repetition,
           "trusted": run.trusted, "flows": len(fm)}
    tput = throughput_series(run)
    for direction in run.data_directions():
        ids = fm[fm["direction"] == direction]["flow"]
        tp = tput[tput["flow"].isin(ids)]
        rate = run.rate(direction)
        if len(tp):
            a, b = tp["t_start"].min(), tp["t_end"].max()
            out[f"goodput_bps_{direction}"] = tp["bytes"].sum() * 8 / max(1e-9, b - a)
            out[f"utilisation_{direction}"] = out[f"goodput_bps_{direction}"] / run.expected_rate(direction, a, b)
        q = qdisc_root(run, direction)
        if len(q) > 1 and len(tp):
            a, b = tp["t_start"].min(), tp["t_end"].max()
            w = q[(q["t"] >= a) & (q["t"] <= b)]
            if len(w) > 1:
                dt = w["t"].iloc[-1] - w["t"].iloc[0]
                out[f"link_utilisation_{direction}"] = (
                    (w["bytes"].iloc[-1] - w["bytes"].iloc[0]) * 8 / dt / run.expected_rate(direction, a, b)
                    if dt > 0 else math.nan)
            dp = q["packets"].iloc[-1] - q["packets"].iloc[0]
            dd = q["drops"].iloc[-1] - q["drops"].iloc[0]
            out[f"drop_rate_{direction}"] = dd / (dp + dd) if (dp + dd) > 0 else 0.0
        elif not len(tp):
            out[f"utilisation_{direction}"] = math.nan
        out[f"rate_bps_{direction}"] = rate
    sh = shares(run)
    out["jain"] = stats.jain(sh["bps"]) if len(sh) >= 2 else math.nan
    for cca, s in sh.groupby("cca")["share"].sum().items():
        out[f"share_{cca}"] = float(s)
    rtt = rtt_samples(run)
    for q in (50, 95, 99):
        out[f"rtt_p{q}_ms"] = stats.percentile(rtt["rtt_ms"], q)
    out["qdelay_p95_ms"] = float(fm["qdelay_p95_ms"].max()) if len(fm) else math.nan
    out["retransmits"] = float(fm["retransmits"].sum(min_count=1)) if len(fm) else math.nan
    return out


# ---------------------------------------------------------------- many runs

def flow_table(runs) -> pd.DataFrame:
    """flow_metrics of many runs stacked."""
    frames = [flow_metrics(r) for r in as_runs(runs)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run_table(runs) -> pd.DataFrame:
    return pd.DataFrame([run_metrics(r) for r in as_runs(runs)])


def summarise(df: pd.DataFrame, by, values, confidence: float = 0.95) -> pd.DataFrame:
    """Mean, std and t-interval of each value column per group (one row per group and metric).
    Each row of `df` is one observation (e.g. one repetition's value)."""
    by = [by] if isinstance(by, str) else list(by)
    rows = []
    if not len(df):
        return pd.DataFrame(columns=by + ["metric", "n", "mean", "std", "ci_low", "ci_high",
                                          "half_width"])
    for key, g in df.groupby(by, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        for v in values:
            if v not in g:
                continue
            ci = stats.mean_ci(pd.to_numeric(g[v], errors="coerce"), confidence)
            rows.append({**dict(zip(by, key)), "metric": v, **ci})
    return pd.DataFrame(rows)


def per_cca(runs) -> pd.DataFrame:
    """One row per run and algorithm (flows of the same algorithm in a run averaged, their
    goodput summed): the observations across which `summarise` builds intervals."""
    ft = flow_table(runs)
    if not len(ft):
        return ft
    agg = {"goodput_bps": "sum", "utilisation": "sum", "rtt_p50_ms": "mean", "rtt_p95_ms": "mean",
           "rtt_p99_ms": "mean", "qdelay_p95_ms": "mean", "retransmits": "sum",
           "retrans_rate": "mean", "ss_exit_s": "mean", "ss_overshoot": "mean", "fct_s": "mean"}
    g = ft.groupby(["experiment", "run", "cca"], as_index=False, dropna=False).agg(
        {k: v for k, v in agg.items() if k in ft})
    trusted = ft.groupby("run")["trusted"].first()
    g["trusted"] = g["run"].map(trusted)
    return g


def download_curves(runs, sizes) -> pd.DataFrame:
    """Download time against size for every flow of every run (SEARCH paper, Fig. 4a/9a):
    columns run, experiment, flow, cca, size, time (s since the flow's first ACK)."""
    rows = []
    for run in as_runs(runs):
        fl = flow_info(run)
        flows = list(fl.index) if len(fl) else []
        for f in flows:
            acked = acked_bytes_series(run, f)
            times = download_time(acked, sizes)
            for s, t in zip(sizes, times):
                rows.append({"run": run.label, "experiment": run.experiment, "flow": f,
                             "cca": fl.loc[f, "cca"], "size": float(s), "time": t,
                             "trusted": run.trusted})
    return pd.DataFrame(rows)

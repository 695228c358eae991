"""Figures of cclab runs.  Each function returns a matplotlib Figure (shown inline in a
notebook) and, given `path`, saves it (the suffix picks the format: .png, .svg, .pdf; a path
without suffix writes both .png and .svg).

Every figure carries its provenance in a footer (run, kernel, kit commit, link, qdisc,
algorithms) and marks untrustworthy runs: a red frame, a red banner with the reasons, and
their series drawn dashed with a "(untrustworthy)" label.  Runs never checked say so in grey.

    timeseries(runs)               cwnd, RTT and throughput per flow, algorithms overlaid
    throughput_delay(runs)         Pantheon-style: goodput against p95 RTT, spread over repetitions
    time_sequence(capture, runs)   Stevens graph from a tshark table (cclab.analysis.tshark)
    cdf(runs, "rtt")               CDFs of RTT, queueing delay, throughput, per algorithm
    bars(runs, metrics)            algorithms compared, mean with t confidence interval
    download_times(runs)           time to download a size (SEARCH paper's curves), mean +- CI
    fct_vs_size(runs)              completion time of size-limited flows against their size
    norm_diff(runs or frame)       SEARCH's norm_diff against THRESH, exits marked
    spline_modes(runs or frame)    Spline's mode timeline per flow
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

if matplotlib.get_backend().lower() not in ("module://matplotlib_inline.backend_inline",
                                            "module://ipykernel.pylab.backend_inline", "nbagg",
                                            "widget", "ipympl", "qtagg", "tkagg", "macosx"):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from . import events, metrics, stats, tshark  # noqa: E402
from .data import RunData, as_runs  # noqa: E402
from .fidelity import summary_line  # noqa: E402

PALETTE = {"cubic": "#1f77b4", "bbr": "#d62728", "reno": "#2ca02c", "vegas": "#9467bd",
           "search": "#17becf", "spline": "#ff7f0e", "htcp": "#8c564b", "dctcp": "#e377c2",
           "bic": "#7f7f7f", "westwood": "#bcbd22"}
_OTHER = ["#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d"]


def color(cca) -> str:
    cca = str(cca)
    if cca in PALETTE:
        return PALETTE[cca]
    return _OTHER[sum(map(ord, cca)) % len(_OTHER)]


# ---------------------------------------------------------------- provenance and verdict marks

def provenance_lines(runs: list[RunData], limit: int = 3) -> list[str]:
    lines = [r.provenance_line() for r in runs[:limit]]
    if len(runs) > limit:
        kernels = sorted({str(r.manifest.get("kernel")) for r in runs})
        kits = sorted({r.provenance()["kit"] for r in runs})
        lines.append(f"... and {len(runs) - limit} more run(s); kernels {', '.join(kernels)}; "
                     f"kit {', '.join(kits)}")
    return lines


def finish(fig, runs, path=None, extra: str | None = None):
    """Add the provenance footer and the untrustworthy marks; save if `path` is given."""
    runs = as_runs(runs) if runs is not None else []
    foot = provenance_lines(runs) if runs else ["no run provenance (data given as a table)"]
    if extra:
        foot.append(extra)
    bad = [r for r in runs if r.trusted is False]
    unchecked = [r for r in runs if r.trusted is None]
    if unchecked:
        foot.append(f"fidelity not checked for {len(unchecked)} run(s): "
                    f"python -m cclab.analysis verdict RUN_DIR")
    w, h = fig.get_size_inches()
    width_chars = int(w * 19)            # 6-pt monospace
    foot = [l2 for l in foot for l2 in textwrap.wrap(l, width_chars, subsequent_indent="    ")[:2]]
    line_h = 0.11 / h
    bottom = line_h * (len(foot) + 0.8)
    top = 1.0
    if bad:
        banner = "UNTRUSTWORTHY: " + " | ".join(
            f"{r.label}: {summary_line(r.fidelity).removeprefix('UNTRUSTWORTHY: ')}" for r in bad[:3])
        if len(bad) > 3:
            banner += f" | and {len(bad) - 3} more"
        blines = textwrap.wrap(banner, int(w * 14))[:3]
        if len(textwrap.wrap(banner, int(w * 14))) > 3:
            blines[-1] = blines[-1][:-4] + " ..."
        top = 1.0 - (0.16 * len(blines) + 0.12) / h
        fig.text(0.5, 1.0 - 0.06 / h, "\n".join(blines), ha="center", va="top", fontsize=8,
                 color="white", weight="bold", linespacing=1.1,
                 bbox=dict(facecolor="#c00000", edgecolor="none", pad=2))
        fig.patches.append(Rectangle((0.002, 0.002), 0.996, 0.996, transform=fig.transFigure,
                                     fill=False, edgecolor="#c00000", linewidth=4, zorder=100))
        fig.text(0.5, 0.5, "UNTRUSTWORTHY", ha="center", va="center", fontsize=48,
                 color="#c00000", alpha=0.12, rotation=25, weight="bold", zorder=0)
    for i, l in enumerate(reversed(foot)):
        fig.text(0.005, line_h * (i + 0.4), l, fontsize=6, color="#555555", ha="left",
                 va="bottom", family="monospace")
    try:
        fig.tight_layout(rect=(0, bottom, 1, top))
    except Exception:
        pass
    if path is not None:
        save(fig, path)
    return fig


def save(fig, path) -> list[Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    paths = [path] if path.suffix else [path.with_suffix(".png"), path.with_suffix(".svg")]
    for p in paths:
        fig.savefig(p, dpi=120)
    return paths


def _style(run: RunData) -> dict:
    return {"linestyle": "--", "alpha": 0.6} if run.trusted is False else {}


def _tag(run: RunData) -> str:
    return " (untrustworthy)" if run.trusted is False else ""


def _flow_cca(run: RunData) -> dict:
    fl = run.table("flows")
    return dict(zip(fl["flow"], fl["cca"])) if len(fl) else {}


def _empty(ax, msg="no data"):
    ax.text(0.5, 0.5, msg, ha="center", va="center", transform=ax.transAxes, color="#888888")


# ---------------------------------------------------------------- time series

def timeseries(runs, what=("cwnd", "rtt", "throughput"), flows=None, path=None, width=10):
    """cwnd (packets), RTT (ms) and goodput (Mbit/s) against time, one line per flow, coloured
    by algorithm; several runs overlay (e.g. one run per algorithm)."""
    runs = as_runs(runs)
    fig, axes = plt.subplots(len(what), 1, figsize=(width, 2.3 * len(what) + 0.8), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    multi = len(runs) > 1
    for run in runs:
        cca_of = _flow_cca(run)
        data = {"cwnd": metrics.cwnd_series(run), "rtt": metrics.rtt_samples(run),
                "throughput": metrics.throughput_series(run)}
        for ax, w in zip(axes, what):
            df = data[w]
            if flows is not None:
                df = df[df["flow"].isin(flows)]
            for f, g in df.groupby("flow"):
                cca = cca_of.get(f, "?")
                label = f"{cca} flow {f}" + (f" [{run.name}]" if multi else "") + _tag(run)
                if w == "cwnd":
                    for k, (port, gp) in enumerate(g.groupby("port")):
                        ax.plot(gp["t"], gp["cwnd"], color=color(cca), lw=0.9,
                                label=label if k == 0 else None, **_style(run))
                elif w == "rtt":
                    ax.plot(g["t"], g["rtt_ms"], color=color(cca), lw=0.9, label=label, **_style(run))
                else:
                    ax.step(g["t"], g["bps"] / 1e6, where="post", color=color(cca), lw=0.9,
                            label=label, **_style(run))
    units = {"cwnd": "cwnd (packets)", "rtt": "RTT (ms)", "throughput": "goodput (Mbit/s)"}
    for ax, w in zip(axes, what):
        ax.set_ylabel(units[w])
        ax.grid(alpha=0.3)
        if not ax.lines:
            _empty(ax)
    if "throughput" in what and runs:
        rate = runs[0].rate("down")
        ax = axes[list(what).index("throughput")]
        if math.isfinite(rate):
            ax.axhline(rate / 1e6, color="k", lw=0.8, ls=":", label="link rate")
    if "cwnd" in what and runs:
        ax = axes[list(what).index("cwnd")]
        bdp = runs[0].bdp_bytes("down") / metrics.DEFAULT_MSS
        if bdp and math.isfinite(bdp):
            ax.axhline(bdp, color="k", lw=0.8, ls=":", label="BDP")
    axes[0].legend(fontsize=7, ncol=3, loc="upper right")
    axes[-1].set_xlabel("time since run start (s)")
    return finish(fig, runs, path)


# ---------------------------------------------------------------- Pantheon-style

def throughput_delay(runs, delay="rtt_p95_ms", path=None):
    """Goodput against p95 delay, one marker per run and algorithm, the mean per algorithm
    large, with a 1-sigma ellipse when there are repetitions.  Delay axis inverted and log
    (better is up and to the right), as in Pantheon."""
    runs = as_runs(runs)
    pc = metrics.per_cca(runs)
    fig, ax = plt.subplots(figsize=(7, 5.2))
    if not len(pc):
        _empty(ax)
        return finish(fig, runs, path)
    pc = pc.copy()
    pc["mbps"] = pc["goodput_bps"] / 1e6
    for cca, g in pc.groupby("cca"):
        c = color(cca)
        good, bad = g[g["trusted"] != False], g[g["trusted"] == False]  # noqa: E712
        ax.scatter(good[delay], good["mbps"], s=18, color=c, alpha=0.6)
        if len(bad):
            labelled = "untrustworthy run" in ax.get_legend_handles_labels()[1]
            ax.scatter(bad[delay], bad["mbps"], s=40, facecolors="none", edgecolors="#c00000",
                       marker="o", linewidths=1.2, label=None if labelled else "untrustworthy run")
        mx, my = g[delay].mean(), g["mbps"].mean()
        ax.scatter([mx], [my], s=90, color=c, edgecolors="k", zorder=5, label=f"{cca} (n={len(g)})")
        ax.annotate(cca, (mx, my), textcoords="offset points", xytext=(6, 6), fontsize=9, color=c)
        if len(g) >= 2 and g[delay].std() > 0 and g["mbps"].std() > 0:
            cov = np.cov(np.log10(g[delay]), g["mbps"])
            vals, vecs = np.linalg.eigh(cov)
            # ellipse in (log10 delay, Mbit/s): draw on a parametric curve in data space
            th = np.linspace(0, 2 * np.pi, 100)
            pts = vecs @ (np.sqrt(np.maximum(vals, 0))[:, None] * np.vstack([np.cos(th), np.sin(th)]))
            ax.plot(10 ** (np.log10(mx) + pts[0]), my + pts[1], color=c, lw=1, alpha=0.8)
    lo, hi = pc[delay].min(), pc[delay].max()
    logx = lo > 0 and hi / lo > 3
    if logx:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.invert_xaxis()
    ax.set_xlabel(f"{delay.replace('_ms', '').replace('_', ' ')} (ms{', log' if logx else ''}, "
                  f"better to the right)")
    ax.set_ylabel("goodput (Mbit/s)")
    rate = runs[0].rate("down") if runs else math.nan
    if math.isfinite(rate):
        ax.axhline(rate / 1e6, color="k", lw=0.8, ls=":")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("throughput and delay (mean per algorithm, 1-sigma ellipse over repetitions)", fontsize=9)
    return finish(fig, runs, path)


# ---------------------------------------------------------------- Stevens graph

def time_sequence(capture: pd.DataFrame, runs=None, stream=None, path=None):
    """Sequence numbers of data segments and the ACK line against time, retransmissions marked,
    from a tshark table (tshark.parse / tshark.read)."""
    fig, ax = plt.subplots(figsize=(9, 5))
    if capture is None or not len(capture):
        _empty(ax, "empty capture")
        return finish(fig, runs, path)
    data, acks = tshark.sender_side(capture, stream)
    ax.vlines(data["time"], data["seq"], data["seq"] + data["len"], color="#1f77b4", lw=1.2,
              label="data segments (seq .. seq+len)")
    acks = acks[acks["ack"].notna()].sort_values("time")
    ax.step(acks["time"], acks["ack"], where="post", color="#2ca02c", lw=0.9, label="ACK")
    rt = data[data["retrans"]]
    if len(rt):
        ax.scatter(rt["time"], rt["seq"], marker="x", color="#d62728", s=30, zorder=5,
                   label=f"retransmission ({len(rt)})")
    ax.set_xlabel("time (s, relative to the capture's first packet)")
    ax.set_ylabel("relative sequence number (bytes)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("time-sequence graph (Stevens)", fontsize=9)
    return finish(fig, runs, path)


# ---------------------------------------------------------------- distributions

def _cdf_values(run: RunData, what: str) -> dict:
    cca_of = _flow_cca(run)
    out = {}
    if what in ("rtt", "qdelay"):
        r = metrics.rtt_samples(run)
        for f, g in r.groupby("flow"):
            v = g["rtt_ms"].to_numpy(dtype=float)
            if what == "qdelay":
                base = np.nanmin(np.concatenate([v, g["min_rtt_ms"].to_numpy(dtype=float)]))
                v = v - base
            out.setdefault(cca_of.get(f, "?"), []).append(v)
    elif what == "throughput":
        t = metrics.throughput_series(run)
        for f, g in t.groupby("flow"):
            out.setdefault(cca_of.get(f, "?"), []).append(g["bps"].to_numpy() / 1e6)
    else:
        raise ValueError("what: rtt, qdelay or throughput (or pass values=)")
    return {k: np.concatenate(v) for k, v in out.items()}


def cdf(runs=None, what="rtt", values: dict | None = None, path=None, xlabel=None):
    """Empirical CDFs per algorithm (pooled over runs) of RTT, queueing delay or per-interval
    goodput; or of any {label: values} given as `values`."""
    runs = as_runs(runs) if runs is not None else []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict = {}
    if values is not None:
        groups = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    else:
        for run in runs:
            for k, v in _cdf_values(run, what).items():
                key = k + _tag(run)
                groups[key] = np.concatenate([groups.get(key, np.array([])), v])
    for k, v in groups.items():
        x, y = stats.ecdf(v)
        if len(x):
            ax.step(x, y, where="post", color=color(k.split(" ")[0]), lw=1.2,
                    ls="--" if "untrustworthy" in k else "-", label=f"{k} (n={len(x)})")
    if not groups:
        _empty(ax)
    ax.set_xlabel(xlabel or {"rtt": "RTT (ms)", "qdelay": "queueing delay: RTT - min RTT (ms)",
                             "throughput": "goodput per interval (Mbit/s)"}.get(what, what))
    ax.set_ylabel("CDF")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig, runs, path)


def bars(runs, metrics_=("goodput_bps", "rtt_p95_ms", "retransmits", "ss_exit_s"), by="cca",
         confidence=0.95, path=None):
    """One panel per metric: mean per algorithm over repetitions (one value per run), error bars
    the t confidence interval, dots the runs (hollow red: untrustworthy)."""
    runs = as_runs(runs)
    pc = metrics.per_cca(runs)
    ms = [m for m in metrics_ if m in pc] if len(pc) else list(metrics_)
    fig, axes = plt.subplots(1, max(1, len(ms)), figsize=(3.2 * max(1, len(ms)) + 0.5, 4), squeeze=False)
    axes = axes[0]
    if not len(pc):
        _empty(axes[0])
        return finish(fig, runs, path)
    summ = metrics.summarise(pc, by, ms, confidence)
    scale = {"goodput_bps": (1e6, "goodput (Mbit/s)")}
    for ax, m in zip(axes, ms):
        s = summ[summ["metric"] == m].reset_index(drop=True)
        k, label = scale.get(m, (1, m))
        x = np.arange(len(s))
        err = (s["half_width"] / k).fillna(0).to_numpy()
        ax.bar(x, s["mean"] / k, yerr=err, capsize=4, color=[color(c) for c in s[by]], alpha=0.8)
        for i, c in enumerate(s[by]):
            g = pc[pc[by] == c]
            jit = (np.arange(len(g)) - (len(g) - 1) / 2) * 0.06
            ok = (g["trusted"] != False).to_numpy()  # noqa: E712
            ax.scatter(i + jit[ok], g[m][ok] / k, s=10, color="k", zorder=3)
            if (~ok).any():
                ax.scatter(i + jit[~ok], g[m][~ok] / k, s=28, facecolors="none",
                           edgecolors="#c00000", zorder=3)
        ax.set_xticks(x)
        ax.set_xticklabels(s[by], rotation=20)
        ax.set_title(f"{label}\n(mean, {confidence:.0%} CI, n = runs)", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    return finish(fig, runs, path)


# ---------------------------------------------------------------- download and completion time

def download_times(runs, sizes=None, confidence=0.95, path=None, show_exit=True):
    """Time to download a given number of bytes (from the flow's first ACK) against the size,
    mean per algorithm with a shaded t confidence interval, as in the SEARCH paper; dashed
    horizontal lines: mean slow-start exit time per algorithm."""
    runs = as_runs(runs)
    if sizes is None:
        top = 0.0
        for run in runs:
            fl = run.table("flows")
            for f in (fl["flow"] if len(fl) else []):
                a = metrics.acked_bytes_series(run, f)
                if len(a):
                    top = max(top, float(a["acked"].max()))
        sizes = np.linspace(top / 40, top, 40) if top > 0 else np.array([])
    dc = metrics.download_curves(runs, sizes) if len(sizes) else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    if not len(dc) or dc["time"].isna().all():
        _empty(ax)
        return finish(fig, runs, path)
    for cca, g in dc.groupby("cca"):
        s = metrics.summarise(g, "size", ["time"], confidence)
        x = s["size"] / 1e6
        ax.plot(x, s["mean"], color=color(cca), label=f"{cca} (n={int(s['n'].max())} flows)")
        ax.fill_between(x, s["ci_low"], s["ci_high"], color=color(cca), alpha=0.2)
    if show_exit:
        fm = metrics.flow_table(runs)
        if len(fm):
            for cca, g in fm.groupby("cca"):
                t = g["ss_exit_s"].mean()
                if math.isfinite(t):
                    ax.axhline(t, color=color(cca), ls="--", lw=0.8)
    ax.set_xlabel("bytes downloaded (MB)")
    ax.set_ylabel("time (s since the flow's first ACK)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"download time (mean, {confidence:.0%} CI); dashed: mean slow-start exit", fontsize=9)
    return finish(fig, runs, path)


def fct_vs_size(runs, confidence=0.95, path=None):
    """Completion time of size-limited flows against their size, mean per algorithm +- CI."""
    runs = as_runs(runs)
    fm = metrics.flow_table(runs)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    fm = fm[fm["fct_s"].notna()] if len(fm) else fm
    if not len(fm):
        _empty(ax, "no size-limited flows")
        return finish(fig, runs, path)
    for cca, g in fm.groupby("cca"):
        s = metrics.summarise(g, "bytes_requested", ["fct_s"], confidence).sort_values("bytes_requested")
        ax.errorbar(s["bytes_requested"] / 1e6, s["mean"], yerr=s["half_width"].fillna(0),
                    marker="o", capsize=3, color=color(cca), label=cca)
    ax.set_xscale("log")
    ax.set_xlabel("transfer size (MB)")
    ax.set_ylabel("flow completion time (s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return finish(fig, runs, path)


# ---------------------------------------------------------------- the modules

def norm_diff(data, exits: pd.DataFrame | None = None, thresh: float = events.SEARCH_THRESH,
              runs=None, path=None):
    """SEARCH's normalised delivery difference over time against THRESH.  `data` is a run (or
    runs) -- norm_diff from ss samples, exits from search.csv -- or a frame with columns t,
    flow, norm_diff (fraction); `exits` a frame with t, flow[, norm_diff] of exits."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    if isinstance(data, pd.DataFrame):
        frames = [(data, exits if exits is not None else pd.DataFrame(), "")]
        runs = as_runs(runs) if runs is not None else []
    else:
        runs = as_runs(data)
        frames = [(events.search_norm_diff(r), events.search_exits(r),
                   (f" [{r.name}]" if len(runs) > 1 else "") + _tag(r)) for r in runs]
    n = 0
    cmap = plt.get_cmap("tab10")
    for df, ex, tag in frames:
        for f, g in df.groupby("flow"):
            c = cmap(n % 10)
            n += 1
            ax.plot(g["t"], g["norm_diff"], marker=".", ms=3, lw=0.9, color=c, label=f"flow {f}{tag}")
            if ex is not None and len(ex) and "flow" in ex:
                e = ex[ex["flow"] == f]
                for _, row in e.iterrows():
                    ax.axvline(row["t"], color=c, ls="--", lw=0.8)
                    y = row.get("norm_diff", np.nan)
                    if y is not None and math.isfinite(float(y)):
                        ax.scatter([row["t"]], [y], marker="*", s=120, color=c, edgecolors="k", zorder=5)
                    ax.annotate(f"exit ({row.get('reason', 'search')})", (row["t"], thresh),
                                textcoords="offset points", xytext=(3, 8), fontsize=7, color=c)
    ax.axhline(thresh, color="k", lw=1, ls=":", label=f"THRESH = {thresh:g}")
    if n == 0:
        _empty(ax, "no SEARCH samples")
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("norm_diff = (2 prev - curr) / (2 prev)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return finish(fig, runs, path)


def spline_modes(data, runs=None, path=None):
    """Spline's mode per flow as a timeline (one row per flow, a coloured bar per mode).
    `data`: a run (or runs), or a frame with t, flow, mode (name or 1..4)."""
    if isinstance(data, pd.DataFrame):
        frames = [(data, "", None)]
        runs = as_runs(runs) if runs is not None else []
    else:
        runs = as_runs(data)
        frames = [(events.spline_modes(r), (f" [{r.name}]" if len(runs) > 1 else "") + _tag(r), r)
                  for r in runs]
    names = list(events.SPLINE_MODES.values())
    mcol = dict(zip(names, ["#ff7f0e", "#2ca02c", "#9467bd", "#d62728"]))
    rows = []
    for df, tag, run in frames:
        for f, g in df.groupby("flow"):
            g = g.sort_values("t")
            mode = g["mode"].map(lambda m: events.SPLINE_MODES.get(int(m), str(m))
                                 if str(m).isdigit() else str(m))
            end = float(g["t"].max())
            if run is not None:
                fl = run.table("flows")
                te = pd.to_numeric(fl.loc[fl["flow"] == f, "t_end"], errors="coerce")
                if len(te) and te.notna().any():
                    end = max(end, float(te.max()))
            rows.append((f"flow {f}{tag}", g["t"].to_numpy(dtype=float), list(mode), end))
    fig, ax = plt.subplots(figsize=(9, 0.6 * max(1, len(rows)) + 1.8))
    for i, (label, t, mode, end) in enumerate(rows):
        # compress runs of the same mode into segments
        start = 0
        for k in range(1, len(t) + 1):
            if k == len(t) or mode[k] != mode[start]:
                t1 = t[k] if k < len(t) else end
                ax.broken_barh([(t[start], max(t1 - t[start], 1e-3))], (i - 0.4, 0.8),
                               color=mcol.get(mode[start], "#888888"))
                start = k
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    if not rows:
        _empty(ax, "no Spline samples")
    handles = [Rectangle((0, 0), 1, 1, color=mcol[n]) for n in names]
    ax.legend(handles, names, fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, 1.18))
    ax.set_xlabel("time since run start (s)")
    ax.grid(alpha=0.3, axis="x")
    return finish(fig, runs, path)

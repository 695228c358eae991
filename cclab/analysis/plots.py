"""Figures of cclab runs.  Each function returns a matplotlib Figure (shown inline in a
notebook) and, given `path`, saves it (the suffix picks the format: .png, .svg, .pdf; a path
without suffix writes both .png and .svg).

Every figure carries its provenance in a footer (run, kernel, kit commit, link, qdisc,
algorithms) and marks untrustworthy runs: a red frame, a red banner with the reasons, and
their series drawn dashed with a "(untrustworthy)" label.  Runs never checked say so in grey.

    timeseries(runs)               binned delivery rate, cwnd and RTT per flow, link rate drawn
    goodput_panel(run)             the rate panel's series (data through the link) as drawn
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


# ---------------------------------------------------------------- titles

def window_text(w: float) -> str:
    return f"{w * 1e3:.0f} ms" if w < 1 else f"{w:g} s"


def link_text(run: RunData) -> str:
    """The profile and its link parameters, e.g. "profile wired: down 50 Mbit/s 20 ms buf 1bdp
    htb, up 50 Mbit/s 20 ms buf 1bdp htb, base RTT 40 ms"."""
    p = run.provenance()
    parts = [f"profile {p['profile']}: down {p['down']}"]
    parts.append(f"up {p['up']}")
    if run.base_rtt() > 0:
        parts.append(f"base RTT {run.base_rtt() * 1e3:g} ms")
    if len(run.table("changes")):
        parts.append("link changes during the run")
    return ", ".join(parts)


def run_title(runs: list[RunData], what: str = "") -> str:
    """A figure title naming the experiment(s) and each distinct profile with its link."""
    exps = list(dict.fromkeys(r.experiment for r in runs))
    links = list(dict.fromkeys(link_text(r) for r in runs))
    head = ", ".join(exps[:3]) + (f" and {len(exps) - 3} more" if len(exps) > 3 else "")
    if what:
        head = f"{head}: {what}" if head else what
    body = links[:2] + ([f"and {len(links) - 2} more profiles"] if len(links) > 2 else [])
    return "\n".join([head] + body)


def _title_text(runs, what: str, width_in: float) -> str:
    """What a figure shows, the experiment, the profile and its link, wrapped to `width_in`."""
    text = run_title(runs, what) if runs else what
    return "\n".join(textwrap.fill(line, int(width_in * 13), subsequent_indent="    ")
                     for line in text.split("\n"))


def _title(ax, runs, what: str, width_in: float | None = None):
    """Title an axes with what it shows, the experiment, the profile and its link, wrapped
    to the figure's width."""
    if width_in is None:
        width_in = ax.figure.get_size_inches()[0]
    ax.set_title(_title_text(runs, what, width_in), fontsize=8 if width_in < 8 else 9, loc="left")


# ---------------------------------------------------------------- time series

def _steps_to(ax, steps: pd.DataFrame, t0: float, t1: float, **kw):
    """Draw a step function (rows t, value from t on) between t0 and t1."""
    t = steps["t"].to_numpy(dtype=float)
    v = steps.iloc[:, 1].to_numpy(dtype=float)
    keep = np.r_[t[1:] > t0, True] & (t < t1)
    t, v = np.clip(t[keep], t0, t1), v[keep]
    if not len(t):
        return
    ax.step(np.r_[t, t1], np.r_[v, v[-1]], where="post", **kw)


def _on_grid(bins: pd.DataFrame, w: float) -> pd.DataFrame:
    """Bins (indexed by t_start) on one regular grid of width w from the first to the last:
    a bin that is not there is a row of NaN, drawn as a gap."""
    grid = np.round(np.arange(bins.index.min(), bins.index.max() + w / 2, w), 9)
    out = bins.reindex(grid, method="nearest", tolerance=w / 4)
    out.index.name = "t_start"
    out = out.reset_index()
    out.insert(1, "t_end", out["t_start"] + w)
    return out


# What the goodput panel draws, by metrics.throughput_binned's source, and the footer line
# that says what "delivered" is.
_SERIES = {"ss delivered": "delivered"}
DELIVERED_NOTE = ("delivered: each flow's TCP data through the link (ss delivered x MSS: the "
                  "segments that arrived, each once, SACKed ones included); the application's "
                  "goodput (iperf3's receiver) is in flows.csv and the run's metrics")


def goodput_panel(run: RunData, window=metrics.THROUGHPUT_WINDOW, flows=None,
                  counter: str = "delivered") -> dict:
    """The goodput panel of `timeseries` for one run, as drawn (timeseries draws from this):

      counter    what is binned: "delivered", each flow's data through the link (ss's delivered
                 counter, metrics.COUNTERS) where ss sampled every flow, else "goodput", what the
                 receiving application read.  After a loss the application reads at once what
                 the receiver held behind the hole, so its bins can exceed the link rate where
                 the link delivered no faster
      source     the counter's source (metrics.throughput_binned's `source`)
      window     the width of the bins in s (metrics.window_seconds of `window`)
      ylabel     the panel's axis label, which names the counter and the width
      flows      {flow: frame t_start, t_end, bps, cover}: the flow's rate per bin
                 (metrics.throughput_binned) on one grid from its first bin to its last; a bin
                 left out is a row of NaN (a gap in the line).  `cover`: the seconds of the bin
                 the flow's samples cover, less than the window for a partly covered first or
                 last bin, whose rate is the average over that part alone
      total      frame t_start, t_end, bps, n: all flows' rates summed per bin (n flows),
                 drawn as "all flows" when at least two flows share a bin; else None
      link_rate  {label: frame t, rate_bps}: each line of configured rate drawn, one per data
                 direction (metrics.link_rate_steps: the profile's rate from -inf, then each
                 change); empty when the run's rate is unknown
    """
    w = metrics.window_seconds(run, window, counter)
    b = metrics.throughput_binned(run, w, counter=counter)
    source = str(b["source"].iloc[0]) if len(b) else ""
    name = _SERIES.get(source, "goodput")
    if flows is not None:
        b = b[b["flow"].isin(flows)]
    series = {f: _on_grid(g.set_index("t_start")[["bps", "cover"]], w)
              for f, g in b.groupby("flow")}
    total = None
    if len(b) and b.groupby("t_start")["flow"].nunique().max() > 1:
        tot = b.groupby("t_start").agg(bps=("bps", "sum"), n=("flow", "nunique"))
        total = _on_grid(tot, w)
    link = {}
    directions = run.data_directions()
    for d in directions:
        steps = metrics.link_rate_steps(run, d)
        if steps["rate_bps"].notna().all():
            link["link rate" + (f" ({d})" if len(directions) > 1 else "")] = steps
    return {"counter": name, "source": source, "window": w,
            "ylabel": f"{name} (Mbit/s)\nper {window_text(w)} bin",
            "flows": series, "total": total, "link_rate": link}


def _stairs(ax, bins: pd.DataFrame, **kw):
    ax.stairs(bins["bps"].to_numpy() / 1e6, np.r_[bins["t_start"].to_numpy(),
                                                  bins["t_end"].to_numpy()[-1]],
              baseline=None, **kw)


def timeseries(runs, what=("throughput", "cwnd", "rtt"), flows=None, path=None, width=10,
               window=metrics.THROUGHPUT_WINDOW, ping=None, title=None):
    """Data through the link (Mbit/s, averaged over bins of `window` s, or "rtt" for one base
    RTT; goodput where ss did not sample every flow: goodput_panel), cwnd (packets) and RTT
    (ms) against time, one line per flow, coloured by algorithm; several runs overlay (e.g. one
    run per algorithm, all drawing the same counter).  The configured link rate (following
    rate changes) is drawn on the rate panel, the BDP on the cwnd panel; with one run (or
    ping=True) the ping samples on the RTT panel.  RTT samples before a socket's first RTT
    measurement are left out (metrics.rtt_samples).  The title names the experiment, the
    profile and its link."""
    runs = as_runs(runs)
    what = tuple(what)
    fig, axes = plt.subplots(len(what), 1, figsize=(width, 2.3 * len(what) + 1.2), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    ax_of = dict(zip(what, axes))
    multi = len(runs) > 1
    ping = (len(runs) == 1) if ping is None else ping
    t_lo, t_hi = math.inf, -math.inf
    labelled = set()
    panels = [goodput_panel(run, window, flows) for run in runs] if "throughput" in what else []
    if len({p["counter"] for p in panels}) > 1:
        # runs overlaid in one panel draw one counter: goodput, which every run has
        panels = [goodput_panel(run, window, flows, counter="goodput") for run in runs]
    for i, run in enumerate(runs):
        cca_of = _flow_cca(run)
        data = {"cwnd": metrics.cwnd_series(run) if "cwnd" in what else None,
                "rtt": metrics.rtt_samples(run) if "rtt" in what else None}
        if "throughput" in what:
            data["throughput"] = panels[i]["flows"]
        for k, wh in enumerate(what):
            ax, df = axes[k], data[wh]
            if wh == "throughput":
                for g in df.values():
                    t_lo = min(t_lo, float(g["t_start"].iloc[0]))
                    t_hi = max(t_hi, float(g["t_end"].iloc[-1]))
                if not multi and panels[i]["total"] is not None:
                    # flows that share the link: their sum against the link rate
                    _stairs(ax, panels[i]["total"], color="#999999", lw=0.9, label="all flows")
                groups = df.items()
            else:
                if flows is not None:
                    df = df[df["flow"].isin(flows)]
                if len(df):
                    t_lo, t_hi = min(t_lo, float(df["t"].min())), max(t_hi, float(df["t"].max()))
                groups = df.groupby("flow")
            for f, g in groups:
                cca = cca_of.get(f, "?")
                label = f"{cca} flow {f}" + (f" [{run.name}]" if multi else "") + _tag(run)
                # each flow is named once, in the first panel that draws it
                lab = None if (run.label, f) in labelled else label
                labelled.add((run.label, f))
                kw = dict(color=color(cca), lw=0.9, **_style(run))
                if wh == "throughput":
                    _stairs(ax, g, label=lab, **dict(kw, lw=1.4))
                else:
                    col = "cwnd" if wh == "cwnd" else "rtt_ms"
                    for i, (_, gp) in enumerate(g.groupby("port", dropna=False)):
                        ax.plot(gp["t"], gp[col], label=lab if i == 0 else None, **kw)
    if not math.isfinite(t_lo):
        t_lo, t_hi = 0.0, 1.0
    w = metrics.window_seconds(runs[0], window) if runs else metrics.THROUGHPUT_WINDOW
    units = {"cwnd": "cwnd (packets)", "rtt": "RTT (ms)",
             "throughput": panels[0]["ylabel"] if panels
             else f"goodput (Mbit/s)\nper {window_text(w)} bin"}
    for ax, wh in zip(axes, what):
        ax.set_ylabel(units[wh])
        ax.grid(alpha=0.3)
        if not ax.lines and not ax.patches:
            _empty(ax)
    if runs and "throughput" in ax_of:
        ax = ax_of["throughput"]
        for label, steps in panels[0]["link_rate"].items():
            steps = steps.assign(rate=steps["rate_bps"] / 1e6)[["t", "rate"]]
            _steps_to(ax, steps, t_lo, t_hi, color="k", lw=0.9, ls=":", label=label)
        ax.set_ylim(bottom=0)
    if runs and "cwnd" in ax_of:
        bdp = runs[0].bdp_bytes("down") / metrics.DEFAULT_MSS
        if bdp and math.isfinite(bdp):
            ax_of["cwnd"].axhline(bdp, color="k", lw=0.8, ls=":", label=f"BDP ({bdp:.0f} packets)")
        ax_of["cwnd"].set_ylim(bottom=0)
    if runs and "rtt" in ax_of:
        ax = ax_of["rtt"]
        base = runs[0].base_rtt() * 1e3
        if ping:
            for run in runs:
                pg = run.table("ping")
                if len(pg):
                    t = pd.to_numeric(pg["t"], errors="coerce")
                    v = pd.to_numeric(pg["rtt_ms"], errors="coerce")
                    ok = (t >= t_lo) & (t <= t_hi)
                    ax.plot(t[ok], v[ok], ".", ms=3, color="k", label="ping" if not multi else None)
        if base > 0:
            steps = metrics.base_rtt_steps(runs[0])
            varies = steps["base_rtt_ms"].nunique() > 1
            _steps_to(ax, steps, t_lo, t_hi, color="k", lw=0.8, ls=":",
                      label="profile's base RTT" + ("" if varies else f" ({base:g} ms)"))
        ax.set_ylim(bottom=0)
    for ax in axes:
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)
    axes[-1].set_xlabel("time since run start (s)")
    axes[-1].set_xlim(t_lo - 0.02 * (t_hi - t_lo), t_hi + 0.02 * (t_hi - t_lo))
    if runs:
        if title is not None:
            axes[0].set_title(title, fontsize=9, loc="left")
        else:
            _title(axes[0], runs, "")
    delivered = bool(panels) and panels[0]["counter"] == "delivered"
    return finish(fig, runs, path, extra=DELIVERED_NOTE if delivered else None)


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
    names = []
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
        names.append(ax.annotate(cca, (mx, my), textcoords="offset points", xytext=(6, 6),
                                 fontsize=9, color=c))
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
    what = METRIC_LABELS.get(delay, delay).replace(" (ms)", "")
    ax.set_xlabel(f"{what} (ms{', log' if logx else ''}, better to the right)")
    ax.set_ylabel("goodput (Mbit/s)")
    rate = runs[0].rate("down") if runs else math.nan
    if math.isfinite(rate):
        ax.axhline(rate / 1e6, color="k", lw=0.8, ls=":", label=f"link rate ({rate / 1e6:g} Mbit/s)")
    # from 0: a gap of 1 Mbit/s between algorithms looks as large as it is
    ax.set_ylim(0, max(ax.get_ylim()[1], rate / 1e6 * 1.05 if math.isfinite(rate) else 0))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower left")
    _title(ax, runs, "goodput and delay (mean per algorithm, 1-sigma ellipse over repetitions)")
    _unclash(fig, names)
    return finish(fig, runs, path)


def _unclash(fig, texts, step=9, tries=8, marker_px=7):
    """Move text annotations up (in steps of `step` points) until none overlaps another or
    another annotation's marker (a square of marker_px around each annotated point)."""
    from matplotlib.transforms import Bbox
    try:
        renderer = fig.canvas.get_renderer()
    except Exception:
        return
    placed = []
    for t in texts:
        x, y = t.axes.transData.transform(t.xy)
        placed.append(Bbox([[x - marker_px, y - marker_px], [x + marker_px, y + marker_px]]))
    for t in sorted(texts, key=lambda t: t.xy[1]):
        for _ in range(tries):
            box = t.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed):
                break
            x, y = t.get_position()
            t.set_position((x, y + step))
        placed.append(t.get_window_extent(renderer))


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
    _title(ax, as_runs(runs) if runs is not None else [], "time-sequence graph (Stevens)")
    return finish(fig, runs, path)


# ---------------------------------------------------------------- distributions

def _cdf_values(run: RunData, what: str, window=metrics.THROUGHPUT_WINDOW) -> dict:
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
        t = metrics.throughput_binned(run, window)
        for f, g in t.groupby("flow"):
            out.setdefault(cca_of.get(f, "?"), []).append(g["bps"].to_numpy() / 1e6)
    else:
        raise ValueError("what: rtt, qdelay or throughput (or pass values=)")
    return {k: np.concatenate(v) for k, v in out.items()}


def cdf(runs=None, what="rtt", values: dict | None = None, path=None, xlabel=None,
        window=metrics.THROUGHPUT_WINDOW):
    """Empirical CDFs per algorithm (pooled over runs) of RTT, queueing delay or goodput per
    bin of `window` s; or of any {label: values} given as `values`."""
    runs = as_runs(runs) if runs is not None else []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict = {}
    if values is not None:
        groups = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    else:
        for run in runs:
            for k, v in _cdf_values(run, what, window).items():
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
                             "throughput": f"goodput per {window_text(metrics.window_seconds(runs[0], window)) if runs else ''} bin (Mbit/s)"}.get(what, what))
    ax.set_ylabel("CDF (fraction of samples at or below)")
    if values is None and runs:
        if what == "throughput":
            rate = runs[0].rate("down")
            if math.isfinite(rate):
                ax.axvline(rate / 1e6, color="k", lw=0.8, ls=":", label=f"link rate ({rate / 1e6:g} Mbit/s)")
        elif what == "rtt" and runs[0].base_rtt() > 0:
            b = runs[0].base_rtt() * 1e3
            ax.axvline(b, color="k", lw=0.8, ls=":", label=f"profile's base RTT ({b:g} ms)")
        _title(ax, runs, {"rtt": "RTT per socket sample", "qdelay": "queueing delay per socket sample",
                          "throughput": "goodput per bin"}.get(what, what))
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
    scale = {"goodput_bps": (1e6, "goodput (Mbit/s)")} | {m: (1, t) for m, t in METRIC_LABELS.items()}
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
        n = int(s["n"].max()) if len(s) else 0
        ax.set_title(f"{label}\n" + (f"(mean of {n} runs, {confidence:.0%} CI)" if n > 1
                                     else "(one run: no interval)"), fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(textwrap.fill(run_title(runs, "algorithms compared").replace("\n", "; "),
                               int(fig.get_size_inches()[0] * 13)), fontsize=9, x=0.01, ha="left")
    return finish(fig, runs, path)


METRIC_LABELS = {"rtt_p50_ms": "RTT median (ms)", "rtt_p95_ms": "RTT p95 (ms)",
                 "rtt_p99_ms": "RTT p99 (ms)", "qdelay_p95_ms": "queueing delay p95 (ms)",
                 "retransmits": "retransmitted segments", "retrans_rate": "retransmitted / sent",
                 "ss_exit_s": "slow-start exit (s after\nthe flow's first sample)",
                 "ss_overshoot": "slow-start peak / BDP - 1", "utilisation": "goodput / link rate",
                 "fct_s": "flow completion time (s)"}


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
    if runs and math.isfinite(runs[0].rate("down")):
        x = np.asarray(sizes, dtype=float)
        ax.plot(x / 1e6, x * 8 / runs[0].rate("down"), color="k", lw=0.8, ls=":",
                label="at the link rate")
        ax.legend(fontsize=8)
    _title(ax, runs, f"download time (mean, {confidence:.0%} CI); dashed: mean slow-start exit")
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
    _title(ax, runs, f"completion time of size-limited flows (mean, {confidence:.0%} CI)")
    return finish(fig, runs, path)


# ---------------------------------------------------------------- the modules

def norm_diff(data, exits: pd.DataFrame | None = None, thresh: float | None = None,
              runs=None, path=None, after_exit: float = 1.0):
    """SEARCH's normalised delivery difference over time against THRESH.  `data` is a run or
    runs -- norm_diff from ss samples, exits from search.csv, one panel per run on shared axes,
    each with its run's own THRESH (events.search_thresh) -- or a frame with columns t, flow,
    norm_diff (fraction), drawn in one panel; `exits` a frame with t, flow[, norm_diff] of
    exits.  `thresh` overrides the THRESH drawn.  A flow's samples end `after_exit` s after its
    exit: SEARCH stops measuring when slow start ends, and ss goes on showing its last value."""
    if isinstance(data, pd.DataFrame):
        runs = as_runs(runs) if runs is not None else []
        panels = [("", data, exits if exits is not None else pd.DataFrame(),
                   events.SEARCH_THRESH if thresh is None else thresh)]
    else:
        runs = as_runs(data)
        panels = [(r.label + _tag(r), events.search_norm_diff(r), events.search_exits(r),
                   events.search_thresh(r) if thresh is None else thresh) for r in runs]
    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    width = 8 if cols == 1 else 4.6 * cols
    fig, axes = plt.subplots(rows, cols, figsize=(width, 3.3 * rows + 1.2), sharey=True,
                             squeeze=False)
    for ax, (name, df, ex, th) in zip(axes.flat, panels):
        _norm_diff_panel(ax, df, ex, th, after_exit)
        if name:
            ax.set_title(name, fontsize=8, loc="left")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("time since run start (s)")
    for ax in axes[:, 0]:
        ax.set_ylabel("norm_diff = (2 prev - curr) / (2 prev)", fontsize=8 if rows > 1 else 10)
    what = "SEARCH's normalised delivery difference against THRESH"
    if len(panels) == 1:
        _title(axes[0, 0], runs, what)
    else:
        fig.suptitle(_title_text(runs, what, width), x=0.01, ha="left", fontsize=9)
    return finish(fig, runs, path)


def _norm_diff_panel(ax, df: pd.DataFrame, ex: pd.DataFrame, thresh: float, after_exit: float):
    """One panel of norm_diff: each flow's samples up to `after_exit` s past its first exit,
    the exit as a star at the value SEARCH logged, THRESH as a dotted line."""
    cmap = plt.get_cmap("tab10")
    n = 0
    for f, g in df.groupby("flow"):
        c = cmap(n % 10)
        n += 1
        e = ex[ex["flow"] == f].sort_values("t") if len(ex) and "flow" in ex else pd.DataFrame()
        if len(e):
            g = g[g["t"] <= float(e["t"].iloc[0]) + after_exit]
        ax.plot(g["t"], g["norm_diff"], marker=".", ms=3, lw=0.9, color=c, label=f"flow {f}")
        for _, row in e.iterrows():
            ax.axvline(row["t"], color=c, ls="--", lw=0.8)
            y = row.get("norm_diff", np.nan)
            if y is not None and math.isfinite(float(y)):
                ax.scatter([row["t"]], [y], marker="*", s=120, color=c, edgecolors="k", zorder=5,
                           label=f"flow {f} exit ({row.get('reason', 'search')})")
    ax.axhline(thresh, color="k", lw=1, ls=":", label=f"THRESH = {thresh:g}")
    if n == 0:
        _empty(ax, "no SEARCH samples")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


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
    ax.legend(handles, names, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)
    ax.set_xlabel("time since run start (s)")
    ax.grid(alpha=0.3, axis="x")
    if runs:
        _title(ax, runs, "Spline's mode per flow")
    return finish(fig, runs, path)

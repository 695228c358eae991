"""What a reader of a run's time-series plot (`cclab plot`, timeseries.png) sees, checked.

The rate panel draws how fast each flow got data through the link, averaged over bins
(plots.goodput_panel, the series timeseries draws), with the link rate as a dotted line: ss's
`delivered` counter where ss sampled every flow, else the receiver's goodput.  Goodput is what
the application read: after a loss it reads at once what the receiver held behind the hole,
and its bins then exceed the link rate (on the lab VM's runs up to 1.3 x, the README's example
1.17 x) where the link carried no more.  `timeseries_problems` builds the figure `cclab plot`
saves (cclab.plot.figure) and that panel's series, and reports what a reader would stumble on:

- the panel draws goodput where ss sampled every flow's delivered counter;
- the panel's label does not name what it draws (delivered or goodput), or a panel of
  delivered has no footer line saying what that is;
- the panel does not name its bin width, or names another than its bins have;
- no link rate line is drawn (or not the rate the series is compared with);
- the figure's goodput steps are not the panel's series;
- a flow's bin above PER_FLOW x the link rate over that bin.  A flow's first or last bin that
  its samples cover only in part is averaged over the covered part alone (at least half the
  window, metrics.throughput_binned) but drawn over the whole bin: one such bin per flow may
  exceed it, and is named in the summary;
- the "all flows" line (drawn when flows share the link) above TOTAL x the link rate;
- an RTT of 0 ms drawn (a socket's RTT before its first measurement is not one).

Shared by tests/host/test_plot_checks.py (recorded and synthetic runs) and
tests/vmhost/test_experiment.py (the README's example, run in the VM).
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

KIT = Path(__file__).resolve().parents[2]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from cclab import plot as quick_plot  # noqa: E402
from cclab.analysis import metrics, plots  # noqa: E402

PER_FLOW = 1.05
TOTAL = 1.10


def mean_rate(steps, t0: float, t1: float) -> float:
    """The mean of a drawn rate line (rows t, rate_bps, each holding from its t on) over
    [t0, t1], in bit/s."""
    t = steps["t"].to_numpy(dtype=float)
    r = steps["rate_bps"].to_numpy(dtype=float)
    a = np.clip(t, t0, t1)
    b = np.clip(np.r_[t[1:], math.inf], t0, t1)
    return float(((b - a) * r).sum() / (t1 - t0))


def _width(label: str) -> float | None:
    """The bin width an axis label names ("... per 500 ms bin"), in s."""
    m = re.search(r"per ([\d.]+) (ms|s) bin", label)
    if not m:
        return None
    return float(m.group(1)) / (1e3 if m.group(2) == "ms" else 1)


def _line_for(link: dict, direction: str):
    for label in (f"link rate ({direction})", "link rate"):
        if label in link:
            return label
    return None


def _sampled_delivered(run) -> set:
    """The flows with at least two samples of ss's delivered counter on one connection."""
    ss = run.table("ss")
    if not len(ss) or "delivered" not in ss:
        return set()
    ss = ss[pd.to_numeric(ss["delivered"], errors="coerce").notna()]
    n = ss.groupby(["flow", "local_port"]).size()
    return {f for (f, _), k in n.items() if k >= 2}


def timeseries_problems(run, window=None, per_flow: float = PER_FLOW,
                        total: float = TOTAL) -> tuple[list[str], str]:
    """(problems, summary) of `run`'s (a cclab.analysis RunData) time-series figure drawn with
    bins of `window` s (default: what `cclab plot` uses).  The summary names each flow's
    highest bin against the link rate, the link rate and the bin width, for a failure message."""
    window = metrics.THROUGHPUT_WINDOW if window is None else window
    problems: list[str] = []
    panel = plots.goodput_panel(run, window)
    w = panel["window"]
    link = panel["link_rate"]
    fig = quick_plot.figure(run, window)
    try:
        axes = {ax.get_ylabel(): ax for ax in fig.axes}
        gp = axes.get(panel["ylabel"])
        rtt = next((ax for label, ax in axes.items() if label.startswith("RTT")), None)
        if gp is None:
            problems.append(f"no goodput panel labelled {panel['ylabel']!r} in the figure")
            return problems, ""
        # what the panel draws: delivered where ss sampled every flow, and named so
        counter = panel["counter"]
        drawn_flows = set(panel["flows"])
        if counter != "delivered" and drawn_flows and drawn_flows <= _sampled_delivered(run):
            problems.append(f"the panel draws {counter} ({panel['source']}) although ss sampled "
                            "every flow's delivered counter: after a loss the application's "
                            "reads burst above what the link carried")
        if gp.get_ylabel().split(" ")[0] != ("delivered" if panel["source"] == "ss delivered"
                                             else "goodput"):
            problems.append(f"the panel labelled {gp.get_ylabel()!r} draws {panel['source']}")
        if counter == "delivered" and not any(t.get_text().startswith("delivered:")
                                              for t in fig.texts):
            problems.append("the panel draws delivered but no footer line says what it is")
        named = _width(gp.get_ylabel())
        if named is None or not math.isclose(named, w, rel_tol=1e-6):
            problems.append(f"the goodput panel's label {gp.get_ylabel()!r} does not name its "
                            f"{w:g} s bins")

        # the link rate lines: drawn, at the rates the bins are compared with
        drawn = {ln.get_label(): ln for ln in gp.get_lines() if ln.get_label().startswith("link rate")}
        if not link or not drawn:
            problems.append("no link rate line drawn on the goodput panel")
        for label, steps in link.items():
            ln = drawn.get(label)
            y = set() if ln is None else {round(float(v), 6) for v in ln.get_ydata()}
            if ln is None or not y <= {round(r / 1e6, 6) for r in steps["rate_bps"]}:
                problems.append(f"{label}: the line drawn ({sorted(y)} Mbit/s) is not the "
                                f"configured rate {sorted(set(steps['rate_bps'] / 1e6))} Mbit/s")

        # the figure's steps are the panel's series
        patches = {p.get_label(): p for p in gp.patches}

        def same(label, bins):
            p = patches.get(label)
            if p is None:
                return False
            vals, edges = p.get_data().values, p.get_data().edges
            want = np.r_[bins["t_start"].to_numpy(), bins["t_end"].to_numpy()[-1]]
            return (len(vals) == len(bins) and np.allclose(edges, want)
                    and np.allclose(vals, bins["bps"].to_numpy() / 1e6, equal_nan=True))

        flows = metrics.flow_info(run)
        lines = []
        for f, bins in panel["flows"].items():
            label = next((lb for lb in patches if re.search(rf"\bflow {re.escape(str(f))}\b", lb)), None)
            if not same(label, bins):
                problems.append(f"flow {f}: the figure's goodput steps ({label!r}) are not "
                                "plots.goodput_panel's series")
            cca = flows.loc[f, "cca"] if f in flows.index else "?"
            direction = str(flows.loc[f, "direction"]) if f in flows.index and "direction" in flows else "down"
            line = _line_for(link, direction)
            b = bins.dropna(subset=["bps"])
            if line is None or not len(b):
                problems.append(f"flow {f}: no link rate to compare its goodput with" if len(b)
                                else f"flow {f}: no goodput drawn")
                continue
            rate = np.array([mean_rate(link[line], a, z) for a, z in zip(b["t_start"], b["t_end"])])
            ratio = b["bps"].to_numpy() / rate
            over = np.flatnonzero(ratio > per_flow)
            ends = {0, len(b) - 1}
            partial = b["cover"].to_numpy() < w * (1 - 1e-9)
            spared = [i for i in over if i in ends and partial[i]][:1]
            for i in over:
                if i not in spared:
                    problems.append(
                        f"flow {f} ({cca}): {b['bps'].iloc[i] / 1e6:.2f} Mbit/s in the bin "
                        f"{b['t_start'].iloc[i]:g}-{b['t_end'].iloc[i]:g} s, {ratio[i]:.3f} x the "
                        f"link rate ({rate[i] / 1e6:g} Mbit/s; at most {per_flow:g} x)")
            k = int(np.argmax(ratio))
            lines.append(f"flow {f} ({cca}): max {b['bps'].iloc[k] / 1e6:.2f} Mbit/s = "
                         f"{ratio[k]:.3f} x the link rate at {b['t_start'].iloc[k]:g} s "
                         f"({len(b)} bins)"
                         + "".join(f"; partly covered end bin {b['t_start'].iloc[i]:g} s "
                                   f"({b['cover'].iloc[i]:.2f} s) at {ratio[i]:.3f} x spared"
                                   for i in spared))

        # all flows together, as the "all flows" line draws them
        tot = panel["total"]
        if tot is not None:
            if not same("all flows", tot):
                problems.append("the figure's \"all flows\" steps are not plots.goodput_panel's total")
            dirs = set(flows["direction"].astype(str)) if "direction" in flows else {"down"}
            line = _line_for(link, dirs.pop()) if len(dirs) == 1 else None
            if line is None:
                problems.append(f"\"all flows\" sums flows of directions {sorted(dirs)}: "
                                "no one link rate to compare it with")
            else:
                b = tot.dropna(subset=["bps"])
                rate = np.array([mean_rate(link[line], a, z) for a, z in zip(b["t_start"], b["t_end"])])
                ratio = b["bps"].to_numpy() / rate
                for i in np.flatnonzero(ratio > total):
                    problems.append(
                        f"all flows: {b['bps'].iloc[i] / 1e6:.2f} Mbit/s in the bin "
                        f"{b['t_start'].iloc[i]:g}-{b['t_end'].iloc[i]:g} s ({int(b['n'].iloc[i])} "
                        f"flows), {ratio[i]:.3f} x the link rate (at most {total:g} x)")
                k = int(np.argmax(ratio))
                lines.append(f"all flows: max {b['bps'].iloc[k] / 1e6:.2f} Mbit/s = "
                             f"{ratio[k]:.3f} x the link rate at {b['t_start'].iloc[k]:g} s")

        # no RTT of 0 ms drawn: the sockets' lines and the ping samples
        if rtt is None:
            problems.append("no RTT panel in the figure")
        else:
            drawn_rtt = [ln for ln in rtt.get_lines() if not ln.get_label().startswith("profile's base RTT")]
            y = np.concatenate([np.asarray(ln.get_ydata(), dtype=float) for ln in drawn_rtt]) \
                if drawn_rtt else np.array([])
            y = y[np.isfinite(y)]
            if not len(y):
                problems.append("no RTT sample drawn")
            elif (y <= 0).any():
                problems.append(f"{int((y <= 0).sum())} RTT sample(s) of 0 ms drawn")
            lines.append(f"RTT drawn: {len(y)} samples, lowest {y.min() if len(y) else math.nan:.1f} ms")

        rates = "; ".join(f"{label} {', '.join(f'{r / 1e6:g}' for r in dict.fromkeys(s['rate_bps']))} Mbit/s"
                          for label, s in link.items()) or "no link rate"
        head = (f"{run.label}: {counter} ({panel['source']}) per {plots.window_text(w)} bin "
                f"({gp.get_ylabel()!r}); "
                f"{rates}; fidelity {'not checked' if run.trusted is None else 'trusted' if run.trusted else 'UNTRUSTWORTHY'}")
        return problems, "\n".join([head] + ["  " + ln for ln in lines])
    finally:
        plots.plt.close(fig)

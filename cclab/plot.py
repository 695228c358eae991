"""A quick look at one run: goodput, cwnd and RTT over time, saved as a PNG.

The figure is cclab.analysis.plots.timeseries: its title names the profile and its link, its
footer carries the provenance (run folder, kernel, kit commit, link, qdisc, date) so a figure
pasted into a report still says where it came from.  `caption` is that provenance in one line.
"""

from __future__ import annotations

from pathlib import Path


def caption(manifest: dict) -> str:
    kit = manifest.get("kit") or {}
    commit = (kit.get("commit") or "no commit")[:10] + (" (modified)" if kit.get("dirty") else "")
    prof = manifest.get("profile", {}).get("name", "?")
    return (f"{manifest.get('experiment')} rep {manifest.get('repetition')} | profile {prof} | "
            f"seed {manifest.get('seed')} | kernel {manifest.get('kernel')} | kit {commit} | "
            f"{manifest.get('start')} | {manifest.get('status')}")


def figure(run, window=None):
    """The run's time-series figure as `plot` saves it (cclab.analysis.plots.timeseries: goodput
    per flow averaged over bins of `window` s with the link rate drawn, cwnd, RTT with the ping
    samples; titled with the profile and its link, the provenance in the footer).  `run`: a run
    folder or a cclab.analysis RunData.  Its goodput panel's series: plots.goodput_panel."""
    import matplotlib
    matplotlib.use("Agg")

    from .analysis import data, metrics, plots

    run = run if isinstance(run, data.RunData) else data.RunData(Path(run))
    return plots.timeseries(run, window=metrics.THROUGHPUT_WINDOW if window is None else window,
                            ping=True)


def plot(run_dir, out: Path | None = None, window=None) -> Path:
    """Write the run's time-series figure (`figure`) to `out`, by default RUN_DIR/timeseries.png."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    fig = figure(run_dir, window)
    out = Path(out) if out else run_dir / "timeseries.png"
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(out)
    return out

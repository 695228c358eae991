"""Plots of recorded lab runs read as they should: goodput binned over a stated window stays
near the link rate, no RTT line starts at 0 ms, titles name the profile and its link, every
figure carries its provenance.

The runs are the lab VM's quick-mode lab 1 and lab 2 runs shipped for the host tests as
tests/host/data/reference-runs.tar.xz (see test_scorecard.py), unpacked once for this module.
"""

import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cclab import plot as quick_plot
from cclab.analysis import data, metrics, plots

ARCHIVE = Path(__file__).with_name("data") / "reference-runs.tar.xz"

# Receiver reads and ss samples are bursty over 100 ms: on these runs the raw 100 ms
# intervals reach 1.8 to 2.7 times the link rate.  Over the default 0.5 s bins the goodput of
# all flows together stays within MARGIN of the rate the link had during the bin (the largest
# excess, 27 %, is lab2-p10: ten streams per flow through a tbf with a 1000-packet limit).
MARGIN = 0.30
WIRED_MARGIN = 0.10          # the htb-shaped wired and Wi-Fi runs of lab 1


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("recorded")
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(ARCHIVE) as t:
        t.extractall(root, **safe)
    found = {r.experiment: r for r in data.load_runs([root / "lab1-10", root / "lab2-4"])}
    assert {"lab1-wired", "lab1-wifi", "lab1-loss", "lab2-leo", "lab2-p1", "lab2-p10",
            "lab2-share"} <= set(found)
    return found


def _total_against_link(run, window=metrics.THROUGHPUT_WINDOW) -> pd.DataFrame:
    b = metrics.throughput_binned(run, window)
    tot = b.groupby(["t_start", "t_end"], as_index=False)["bps"].sum()
    tot["rate"] = [run.expected_rate("down", a, z) for a, z in zip(tot["t_start"], tot["t_end"])]
    return tot[tot["rate"] > 0]


@pytest.mark.parametrize("name", ["lab1-wired", "lab1-wifi", "lab1-loss", "lab2-leo", "lab2-p1",
                                  "lab2-p10", "lab2-share"])
def test_binned_goodput_stays_near_the_link_rate(runs, name):
    run = runs[name]
    raw = metrics.throughput_series(run)
    assert raw["bps"].max() > 1.5 * run.rate("down")       # what the raw samples did
    tot = _total_against_link(run)
    assert len(tot) >= 5
    margin = WIRED_MARGIN if name in ("lab1-wired", "lab1-wifi", "lab1-loss") else MARGIN
    worst = (tot["bps"] / tot["rate"]).max()
    assert worst <= 1 + margin, f"{name}: {worst:.2f} x the link rate"


def test_bins_keep_every_byte_and_share_one_grid(runs):
    run = runs["lab1-wired"]
    raw = metrics.throughput_series(run)
    b = metrics.throughput_binned(run, 0.5, min_cover=0)
    per_flow = b.groupby("flow")["bytes"].sum()
    assert per_flow.to_dict() == pytest.approx(raw.groupby("flow")["bytes"].sum().to_dict(), rel=1e-9)
    assert np.allclose(b["t_start"] / 0.5, np.round(b["t_start"] / 0.5))
    assert (b["t_end"] - b["t_start"]).round(9).eq(0.5).all()
    assert set(b["source"]) == {"iperf receiver"}
    # one base RTT (40 ms) as the window, but no less than the 0.1 s between iperf3's reports
    assert metrics.sample_spacing(run) == 0.1
    rtt = metrics.throughput_binned(run, "rtt")
    assert (rtt["t_end"] - rtt["t_start"]).round(9).eq(0.1).all()
    with pytest.raises(ValueError, match="shorter than the 0.1 s between"):
        metrics.throughput_binned(run, 0.04)
    # a bad window is refused with its value
    with pytest.raises(ValueError, match="'fortnight'"):
        metrics.throughput_binned(run, "fortnight")
    with pytest.raises(ValueError, match="not positive"):
        metrics.throughput_binned(run, 0)


def test_no_rtt_sample_of_zero(runs):
    for name, run in runs.items():
        ss = run.table("ss")
        r = metrics.rtt_samples(run)
        assert len(r) and (r["rtt_ms"] > 0).all(), name
        assert (r["min_rtt_ms"].dropna() > 0).all(), name
    # the sockets of lab1-wired do report 0 before their first measurement: those rows go
    ss = runs["lab1-wired"].table("ss")
    assert (ss["rtt_ms"] == 0).sum() == 3
    assert len(metrics.rtt_samples(runs["lab1-wired"])) == len(ss) - 3
    fm = metrics.flow_metrics(runs["lab1-wired"])
    assert (fm["min_rtt_ms"] > 39).all()                 # 40 ms path: no 0 ms minimum


def _panel(fig, ylabel_part):
    return next(ax for ax in fig.axes if ylabel_part in ax.get_ylabel())


def test_timeseries_reads_as_it_should(runs):
    run = runs["lab1-loss"]                              # 20 Mbit/s, one Cubic flow
    fig = plots.timeseries(run)
    try:
        title = fig.axes[0].get_title(loc="left")
        assert "lab1-loss" in title and "profile wired" in title and "20 Mbit/s" in title
        assert "base RTT 40 ms" in title
        foot = " ".join(t.get_text() for t in fig.texts)
        assert "lab1-loss/20261123-010906-1" in foot and "kit 954761ea26+dirty" in foot
        assert "2026-11-23T01:09:15" in foot and "kernel 6.1.0-56-amd64" in foot
        tp = _panel(fig, "per 500 ms bin")
        # the data each flow got through the link (ss's delivered), and the footer says so
        assert tp.get_ylabel().startswith("delivered (Mbit/s)")
        assert "delivered: each flow's TCP data through the link" in foot
        rate = [ln for ln in tp.get_lines() if ln.get_label() == "link rate"]
        assert rate and set(rate[0].get_ydata()) == {20.0}
        steps = [p for p in tp.patches if p.get_label() == "cubic flow 1"]
        assert len(steps) == 1
        assert tp.get_ylim()[1] < 25                    # not stretched by 60 Mbit/s spikes
        rtt = _panel(fig, "RTT")
        socket = [ln for ln in rtt.get_lines() if ln.get_marker() in ("None", None, "")
                  and ln.get_label() != "_nolegend_" and "base RTT" not in ln.get_label()]
        assert socket
        for ln in socket:
            y = np.asarray(ln.get_ydata(), dtype=float)
            assert y[0] > 35 and y.min() > 35           # first sample is a real RTT
        assert any(ln.get_label() == "ping" for ln in rtt.get_lines())
    finally:
        plots.plt.close(fig)


def test_link_rate_follows_changes_and_outages(runs):
    run = runs["lab2-leo"]
    steps = metrics.link_rate_steps(run, "down")
    assert steps["rate_bps"].iloc[0] == 80e6
    handovers = steps[steps["rate_bps"] == 0]
    assert len(handovers) == 5                           # 100 % loss for 40 ms every 4 s
    assert steps["rate_bps"].iloc[-1] == 50.105e6
    rtt = metrics.base_rtt_steps(run)
    assert rtt["base_rtt_ms"].iloc[0] == pytest.approx(30)
    assert rtt["base_rtt_ms"].iloc[-1] == pytest.approx(42.8)
    fig = plots.timeseries(run)
    try:
        ln = [x for x in _panel(fig, "Mbit/s").get_lines() if x.get_label() == "link rate"][0]
        y = set(np.round(ln.get_ydata(), 3))
        assert {0.0, 80.0, 92.372, 74.772, 89.436, 91.788} <= y
        assert "link changes during the run" in " ".join(fig.axes[0].get_title(loc="left").split())
    finally:
        plots.plt.close(fig)


def test_every_report_figure_names_the_profile(runs):
    run = runs["lab2-p1"]
    for make in (plots.throughput_delay, plots.cdf, plots.download_times,
                 lambda r: plots.cdf(r, "throughput")):
        fig = make(run)
        try:
            title = fig.axes[0].get_title(loc="left")
            assert "lab2-p1" in title and "profile starlink-seed" in title and "10 Mbit/s" in title
            assert "up not shaped" in title
        finally:
            plots.plt.close(fig)
    fig = plots.bars(run)
    try:
        assert "profile starlink-seed" in fig._suptitle.get_text()
        titles = " ".join(ax.get_title() for ax in fig.axes)
        assert "RTT p95 (ms)" in titles and "rtt_p95_ms" not in titles
        assert "one run: no interval" in titles
    finally:
        plots.plt.close(fig)


def test_goodput_cdf_is_binned(runs):
    run = runs["lab1-wired"]
    fig = plots.cdf(run, "throughput")
    try:
        ax = fig.axes[0]
        assert "per 500 ms bin" in ax.get_xlabel()
        xs = np.concatenate([ln.get_xdata() for ln in ax.get_lines() if "n=" in ln.get_label()])
        assert xs.max() <= 50 * (1 + WIRED_MARGIN)
    finally:
        plots.plt.close(fig)


def test_quick_plot_of_a_run(runs, tmp_path):
    from matplotlib.image import imread
    run = runs["lab2-p10"]
    out = quick_plot.plot(run.path, tmp_path / "ts.png")
    assert out == tmp_path / "ts.png" and out.stat().st_size > 20_000
    h, w, _ = imread(out).shape
    assert w >= 1000 and h >= 800
    assert not list(tmp_path.glob(".*tmp*"))


def test_flows_sharing_the_link_show_their_sum(runs):
    fig = plots.timeseries(runs["lab2-share"])                 # BBR and Cubic at once
    try:
        tp = _panel(fig, "Mbit/s")
        total = [p for p in tp.patches if p.get_label() == "all flows"]
        assert len(total) == 1
        y = np.concatenate([p.get_data().values for p in total])
        y = y[np.isfinite(y)]
        # what the link delivered: under its 10 Mbit/s in every bin
        assert 8 < np.median(y) <= 10 and y.max() <= 10
    finally:
        plots.plt.close(fig)
    fig = plots.timeseries(runs["lab1-wired"])                 # one flow after the other
    try:
        assert not [p for p in _panel(fig, "Mbit/s").patches if p.get_label() == "all flows"]
    finally:
        plots.plt.close(fig)


def test_the_labs_plot_titles_name_the_link(runs):
    """labkit.link: what a lab notebook's plot title says of the link an experiment ran on, from
    its runs' manifests (the link of these recorded lab 1 and lab 2 runs)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "notebooks"))
    import labkit
    lab1, lab2 = runs["lab1-wired"].path.parents[1], runs["lab2-p1"].path.parents[1]
    assert labkit.link("lab1", "lab1-wired", lab1.parent) == "wired, 50 Mbit/s, 40 ms RTT, buffer 1bdp"
    assert labkit.link("lab1", "lab1-wifi", lab1.parent) == \
        "wifi, 50 Mbit/s, 6 ms RTT, jitter 2 ms, buffer 300 packets"
    assert "2 % loss" in labkit.link("lab2", "lab2-p1", lab2.parent)
    assert labkit.link("lab1", "lab1-nothing", lab1.parent) == "lab1-nothing"
    assert labkit.color("bbr") == plots.color("bbr") != labkit.color("cubic")

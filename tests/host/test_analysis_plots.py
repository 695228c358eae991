"""Every plot writes a non-empty image from a small fixture; untrustworthy runs are marked."""

import pandas as pd
import pytest

from cclab import results
from cclab.analysis import data, events, fidelity, plots, synthetic, tshark

CCAS = ("cubic", "bbr", "search", "spline")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plots")
    dirs = [synthetic.make_run(root / "e" / f"r{i}", experiment="e", repetition=i, seed=i,
                               ccas=CCAS, duration=2.0, achieved=a)
            for i, a in enumerate((1.0, 0.98, 0.6), 1)]
    for d in dirs:
        fidelity.write_verdict(d)
    return data.load_runs(root)


CAPTURE = "\t".join(tshark.FIELDS) + "\n" + "".join(
    f"{0.01 * i:.3f}\t{100 + 0.01 * i:.3f}\t10.0.1.2\t10.1.1.2\t40000\t5201\t0\t{1 + 1448 * i}\t1\t1448\t"
    f"{'1' if i == 7 else ''}\t\t\t{1448 * 3}\n"
    f"{0.01 * i + 0.005:.3f}\t{100 + 0.01 * i + 0.005:.3f}\t10.1.1.2\t10.0.1.2\t5201\t40000\t0\t1\t"
    f"{1 + 1448 * (i + 1)}\t0\t\t\t0.02\t\n" for i in range(30))


def check(fig, tmp_path, name, svg=False):
    for suffix in (".png", ".svg") if svg else (".png",):
        p = tmp_path / f"{name}{suffix}"
        plots.save(fig, p)
        assert p.stat().st_size > 1000
    texts = " ".join(t.get_text() for t in fig.texts)
    return texts


def test_runs_have_mixed_verdicts(runs):
    assert [r.trusted for r in runs] == [True, True, False]


@pytest.mark.parametrize("name,make", [
    ("timeseries", lambda rs: plots.timeseries(rs)),
    ("throughput_delay", lambda rs: plots.throughput_delay(rs)),
    ("cdf_rtt", lambda rs: plots.cdf(rs, "rtt")),
    ("cdf_qdelay", lambda rs: plots.cdf(rs, "qdelay")),
    ("cdf_tput", lambda rs: plots.cdf(rs, "throughput")),
    ("bars", lambda rs: plots.bars(rs)),
    ("download_times", lambda rs: plots.download_times(rs)),
    ("norm_diff", lambda rs: plots.norm_diff(rs)),
    ("spline_modes", lambda rs: plots.spline_modes(rs)),
    ("time_sequence", lambda rs: plots.time_sequence(tshark.parse(CAPTURE), rs[-1])),
])
def test_plot_writes_image_with_provenance_and_marks(runs, tmp_path, name, make):
    fig = make(runs)
    texts = check(fig, tmp_path, name)
    assert "kernel 6.1.0-synthetic-amd64" in texts and "kit 0123456789" in texts
    assert "UNTRUSTWORTHY" in texts              # the third run is marked on every figure
    plots.plt.close(fig)


def test_trusted_only_has_no_mark(runs, tmp_path):
    fig = plots.timeseries(runs[:1])
    assert "UNTRUSTWORTHY" not in check(fig, tmp_path, "ok", svg=True)


def test_fct_plot(tmp_path):
    dirs = [synthetic.make_run(tmp_path / f"r{s}", ccas=("cubic", "bbr"), bytes_requested=[s, s],
                               repetition=i) for i, s in enumerate((200_000, 1_000_000), 1)]
    fig = plots.fct_vs_size(dirs)
    assert "fidelity not checked" in check(fig, tmp_path, "fct")


def test_module_plots_from_frames(tmp_path):
    nd = pd.DataFrame({"t": [0.1, 0.2, 0.3, 0.4], "flow": 1, "norm_diff": [0.0, 0.1, 0.3, 0.4]})
    ex = pd.DataFrame({"t": [0.4], "flow": [1], "norm_diff": [0.4], "reason": ["search"]})
    check(plots.norm_diff(nd, ex), tmp_path, "nd")
    modes = pd.DataFrame({"t": [0, 1, 2, 3], "flow": 1, "mode": [1, 2, 4, 2]})
    check(plots.spline_modes(modes), tmp_path, "modes")


def test_events_from_ss_and_tables(runs):
    nd = events.search_norm_diff(runs[0])
    assert len(nd) and nd["norm_diff"].max() <= 0.5
    ex = events.search_exits(runs[0])
    assert ex["norm_diff"].iloc[0] == pytest.approx(0.362)
    modes = events.spline_modes(runs[0])
    assert set(modes["mode"]) <= set(events.SPLINE_MODES.values()) and "START_PROBE" in set(modes["mode"])


def test_bbr_info_parser():
    i = events.parse_bbr_info("bbr:(bw:1.5Mbps,mrtt:20.1,pacing_gain:0.35,cwnd_gain:1)")
    assert i == {"bw_bps": 1.5e6, "mrtt_ms": 20.1, "pacing_gain": 0.35, "cwnd_gain": 1.0}
    assert events.parse_bbr_info("bbr:(bw:0bps,mrtt:20)")["pacing_gain"] == 0.0


def test_tshark_parser():
    cap = tshark.parse(CAPTURE)
    assert len(cap) == 60 and cap["retrans"].sum() == 1
    data_, acks = tshark.sender_side(cap)
    assert len(data_) == 30 and len(acks) == 30
    assert cap["ack_rtt"].notna().sum() == 30
    # without a header line, fields in the given order
    short = tshark.parse("0.5\t10\t1448\t\n", fields=["frame.time_relative", "tcp.seq", "tcp.len",
                                                      "tcp.analysis.retransmission"])
    assert short.iloc[0]["seq"] == 10 and not short.iloc[0]["retrans"]


def test_time_sequence_marks_retransmissions_and_draws_acks(runs, tmp_path):
    fig = plots.time_sequence(tshark.parse(CAPTURE), runs[:1])
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "retransmission (1)" in labels and "ACK" in labels    # one segment flagged in CAPTURE
    ack = [l for l in ax.get_lines() if l.get_label() == "ACK"][0]
    assert max(ack.get_ydata()) >= 1448 * 30                      # the ACK line reaches the end
    plots.plt.close(fig)


def test_bars_have_confidence_interval_error_bars(runs):
    fig = plots.bars(runs, metrics_=("goodput_bps",))
    ax = fig.axes[0]
    from matplotlib.container import BarContainer, ErrorbarContainer
    bars_ = [c for c in ax.containers if isinstance(c, BarContainer)]
    errs = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars_) == 1 and len(bars_[0].patches) == len(CCAS)
    segs = errs[0].lines[2][0].get_segments()                     # one vertical error bar per bar
    assert len(segs) == len(CCAS) and all(s[1][1] > s[0][1] for s in segs)
    plots.plt.close(fig)


def test_fct_plot_marks_an_untrustworthy_run(tmp_path):
    dirs = [synthetic.make_run(tmp_path / f"r{i}", ccas=("cubic",), bytes_requested=[s], repetition=i,
                               achieved=a, seed=i)
            for i, (s, a) in enumerate(((500_000, 1.0), (500_000, 1.0), (2_000_000, 0.6)), 1)]
    for d in dirs:
        fidelity.write_verdict(d)
    fig = plots.fct_vs_size(dirs)
    texts = check(fig, tmp_path, "fct_bad")
    assert "UNTRUSTWORTHY" in texts
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [0.5, 2.0]                   # mean FCT per size, in MB
    plots.plt.close(fig)


def test_norm_diff_draws_thresh_and_spline_segments(tmp_path):
    nd = pd.DataFrame({"t": [0.1, 0.2, 0.3, 0.4], "flow": 1, "norm_diff": [0.0, 0.1, 0.3, 0.4]})
    fig = plots.norm_diff(nd, thresh=0.35)
    th = [l for l in fig.axes[0].get_lines() if l.get_label().startswith("THRESH")]
    assert th and list(th[0].get_ydata()) == [0.35, 0.35]
    plots.plt.close(fig)
    modes = pd.DataFrame({"t": [0, 1, 2, 3, 4], "flow": 1, "mode": [1, 1, 2, 4, 2]})
    fig = plots.spline_modes(modes)
    bars = fig.axes[0].collections
    assert len(bars) == 4                       # 1,1 merge into one segment; then 2, 4, 2
    plots.plt.close(fig)


def test_norm_diff_gives_each_run_a_panel_with_its_own_thresh(tmp_path):
    """Runs side by side, one panel each on shared axes: each panel's THRESH is its run's
    tcp_search parameter (the module's default without one), and a flow's line ends
    after_exit s after its exit (ss repeats the last value once SEARCH stops measuring)."""
    dirs = [synthetic.make_run(tmp_path / "e" / f"r{i}", experiment="e", repetition=i, seed=i,
                               ccas=("search",), duration=2.0) for i in (1, 2)]
    results.write_beside(dirs[1], "module_params", {"tcp_search": {"thresh": "250"}})
    rs = data.load_runs(tmp_path)
    assert [events.search_thresh(r) for r in rs] == [0.35, 0.25]
    fig = plots.norm_diff(rs, after_exit=0.2)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 2 and panels[0].get_shared_y_axes().joined(panels[0], panels[1])
    for ax, r, th in zip(panels, rs, (0.35, 0.25)):
        assert ax.get_title(loc="left").startswith(r.label)
        lines = {l.get_label(): l for l in ax.get_lines()}
        assert list(lines[f"THRESH = {th:g}"].get_ydata()) == [th, th]
        ex = events.search_exits(r)
        for f, g in ex.groupby("flow"):
            drawn = lines[f"flow {f}"].get_xdata()
            assert max(drawn) <= g["t"].min() + 0.2
            assert (events.search_norm_diff(r).query("flow == @f")["t"] > g["t"].min() + 0.2).any()
    plots.plt.close(fig)


def test_throughput_delay_draws_a_spread_ellipse_per_algorithm(runs):
    fig = plots.throughput_delay(runs)
    ellipses = [l for l in fig.axes[0].get_lines() if len(l.get_xdata()) == 100]
    assert len(ellipses) == len(CCAS)            # three repetitions each: a 1-sigma ellipse
    plots.plt.close(fig)


def test_timeseries_window_panels_and_flow_filter(runs):
    """The stated window is on the rate axis; the old panel order and a flow filter still work."""
    fig = plots.timeseries(runs[:1], what=("cwnd", "rtt", "throughput"), flows=[1, 2], window="rtt")
    try:
        assert [ax.get_ylabel().split(" ")[0] for ax in fig.axes] == ["cwnd", "RTT", "delivered"]
        assert "per 50 ms bin" in fig.axes[2].get_ylabel()    # 20 ms RTT, but ss samples every 50 ms
        named = {a.get_label() or "" for ax in fig.axes for a in ax.patches + ax.lines}
        assert {"cubic flow 1", "bbr flow 2"} <= named and not any("flow 3" in n for n in named)
        per_flow = [p for p in fig.axes[2].patches if p.get_label() != "all flows"]
        assert len(per_flow) == 2                                       # one binned line per flow
        title = fig.axes[0].get_title(loc="left")
        assert "profile wired" in title and "10 Mbit/s" in title
    finally:
        plots.plt.close(fig)
    with pytest.raises(ValueError, match="window"):
        plots.timeseries(runs[:1], window=-1)


def test_footer_names_a_run_that_did_not_complete(tmp_path):
    d = synthetic.make_run(tmp_path / "r1", ccas=("cubic",))
    m = results.read_manifest(d)
    results.write_json(d / "manifest.json", dict(m, status="failed"))
    fig = plots.timeseries(d)
    try:
        foot = " ".join(t.get_text() for t in fig.texts)
        assert "status failed" in foot and "r1 (rep" in foot
    finally:
        plots.plt.close(fig)
    fig = plots.timeseries(synthetic.make_run(tmp_path / "r2", ccas=("cubic",)))
    assert "status" not in " ".join(t.get_text() for t in fig.texts)     # complete: not repeated
    plots.plt.close(fig)

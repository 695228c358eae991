"""Metrics and statistics of cclab.analysis on synthetic tables with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from cclab.analysis import data, metrics, stats, synthetic


# ---------------------------------------------------------------- statistics

def test_jain_equal_shares_is_one():
    assert stats.jain([5, 5, 5, 5]) == pytest.approx(1.0)


def test_jain_one_hog_is_one_over_n():
    assert stats.jain([10, 0, 0, 0]) == pytest.approx(0.25)


def test_jain_unequal_shares_hand_computed():
    # (1+3)^2 / (2 * (1 + 9)) = 16 / 20
    assert stats.jain([1, 3]) == pytest.approx(0.8)


def test_p95_hand_computed():
    # 1..20: rank 0.95 * 19 = 18.05 -> 19 + 0.05 * (20 - 19) = 19.05
    assert stats.percentile(list(range(1, 21)), 95) == pytest.approx(19.05)
    assert stats.percentile([3, 1, 2], 50) == pytest.approx(2.0)


@pytest.mark.parametrize("df,expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281),
                                         (30, 2.0423)])
def test_t_quantile_matches_tables(df, expected):
    assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)


def test_t_quantile_closed_forms_and_normal_limit():
    for p in (0.9, 0.95, 0.995):
        assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-6)
        exact2 = (2 * p - 1) / math.sqrt(2 * p * (1 - p))
        assert stats.t_quantile(p, 2) == pytest.approx(exact2, rel=1e-6)
    assert stats.t_quantile(0.975, 100000) == pytest.approx(1.95996, abs=1e-3)
    assert stats.t_quantile(0.025, 5) == pytest.approx(-stats.t_quantile(0.975, 5))


def test_mean_ci():
    ci = stats.mean_ci([1.0, 2.0, 3.0])
    # s = 1, t(0.975, 2) = 4.3027 -> half width 4.3027 / sqrt(3)
    assert ci["mean"] == pytest.approx(2.0)
    assert ci["half_width"] == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert ci["ci_low"] == pytest.approx(2.0 - ci["half_width"])
    one = stats.mean_ci([4.0])
    assert one["mean"] == 4.0 and math.isnan(one["half_width"])
    assert stats.mean_ci([])["n"] == 0


def test_order_of_two_intervals():
    assert stats.order((3.0, 4.0), (1.0, 2.5)) == "higher"
    assert stats.order((1.0, 2.5), (3.0, 4.0)) == "lower"
    assert stats.order((1.0, 3.0), (3.0, 4.0)) == "inconclusive"        # they meet
    assert stats.order((5.0, math.nan), (1.0, 2.0)) == "inconclusive"
    assert stats.order((5.0, 6.0), (-math.inf, 2.0)) == "inconclusive"


# ---------------------------------------------------------------- per run

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = synthetic.make_run(tmp_path_factory.mktemp("m") / "r1", ccas=("cubic", "bbr"),
                           shares=(0.75, 0.25), ss_exit=(0.06, 0.08), rate=10e6, delay=0.01)
    return data.RunData(d)


def test_flow_metrics_are_shared_by_every_load_of_a_folder_until_a_file_changes(tmp_path, monkeypatch):
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic", "bbr"), shares=(0.6, 0.4))
    worked = []
    real = metrics._flow_metrics
    monkeypatch.setattr(metrics, "_flow_metrics", lambda r: worked.append(r) or real(r))
    first = metrics.flow_metrics(data.RunData(d))
    again = metrics.flow_metrics(data.RunData(d))
    assert len(worked) == 1
    pd.testing.assert_frame_equal(first, again)
    # a table changed in place after it was handed out does not reach the shared answer
    metrics._memo.clear()
    r = data.RunData(d)
    r.table("flows")["throughput_bps"] = 1.0
    pd.testing.assert_frame_equal(metrics.flow_metrics(r), first)
    assert len(worked) == 2 and worked[-1] is not r
    # one of the folder's files changes: worked out again, from the files
    flows = pd.read_csv(d / "flows.csv")
    flows["throughput_bps"] = flows["throughput_bps"] / 2
    flows.to_csv(d / "flows.csv", index=False)
    halved = metrics.flow_metrics(data.RunData(d))
    assert len(worked) == 3
    assert np.allclose(halved["goodput_bps"], first["goodput_bps"] / 2)
    # a table attached by hand gives that run its own answer, and leaves the shared one alone
    r = data.RunData(d)
    r.set_table("flows", flows.assign(throughput_bps=1e6))
    assert np.allclose(metrics.flow_metrics(r)["goodput_bps"], 1e6)
    assert len(worked) == 4
    pd.testing.assert_frame_equal(metrics.flow_metrics(data.RunData(d)), halved)
    assert len(worked) == 4


def test_known_slow_start_exit(run):
    fm = metrics.flow_metrics(run).set_index("flow")
    # cwnd doubles every 20 ms RTT from 10 packets; exit 60 ms after the first ACK
    assert fm.loc[1, "ss_exit_s"] == pytest.approx(0.06, abs=0.0051)
    assert fm.loc[2, "ss_exit_s"] == pytest.approx(0.08, abs=0.0051)
    # peak before the exit: 10 * 2^(0.06/0.02) = 80 packets (within one 5 ms probe step)
    assert fm.loc[1, "ss_peak_cwnd"] == pytest.approx(80, rel=0.2)
    # BDP = 10 Mbit/s * 20 ms = 25000 bytes; overshoot = peak bytes / BDP - 1
    bdp = 10e6 * 0.02 / 8
    assert fm.loc[1, "ss_overshoot"] == pytest.approx(fm.loc[1, "ss_peak_cwnd"] * 1448 / bdp - 1)


def test_shares_and_fairness(run):
    rm = metrics.run_metrics(run)
    assert rm["share_cubic"] == pytest.approx(0.75, abs=0.01)
    assert rm["share_bbr"] == pytest.approx(0.25, abs=0.01)
    assert rm["jain"] == pytest.approx(stats.jain([3, 1]), abs=0.01)
    # all the link's departures are at the rate: link utilisation 1, goodput 1448/1514 of it
    assert rm["link_utilisation_down"] == pytest.approx(1.0, abs=0.01)
    assert rm["utilisation_down"] == pytest.approx(1448 / 1514, abs=0.01)


def test_goodput_rtt_and_retransmissions(run):
    fm = metrics.flow_metrics(run).set_index("flow")
    assert fm.loc[1, "goodput_bps"] == pytest.approx(0.75 * 10e6 * 1448 / 1514, rel=0.01)
    assert fm.loc[1, "min_rtt_ms"] == pytest.approx(20.0)
    assert fm.loc[1, "rtt_p50_ms"] > 20.0
    assert fm.loc[1, "qdelay_p95_ms"] == pytest.approx(fm.loc[1, "rtt_p95_ms"] - 20.0)
    assert fm.loc[1, "retransmits"] == 12
    assert 0 < fm.loc[1, "retrans_rate"] < 0.05


def test_rtt_percentiles_hand_computed(tmp_path):
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",))
    ss = pd.read_csv(d / "ss.csv")
    ss["rtt_ms"] = np.arange(1, len(ss) + 1, dtype=float)  # 1..n
    ss.to_csv(d / "ss.csv", index=False)
    n = len(ss)
    fm = metrics.flow_metrics(data.RunData(d)).iloc[0]
    assert fm["rtt_p95_ms"] == pytest.approx(1 + 0.95 * (n - 1))
    assert fm["rtt_p50_ms"] == pytest.approx(1 + 0.5 * (n - 1))


def test_download_time_and_fct(tmp_path):
    size = 2_000_000
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",), bytes_requested=[size])
    r = data.RunData(d)
    fm = metrics.flow_metrics(r).iloc[0]
    goodput = 10e6 * 1448 / 1514
    assert fm["fct_s"] == pytest.approx(size * 8 / goodput + 0.02, rel=0.02)
    acked = metrics.acked_bytes_series(r, 1)
    t = metrics.download_time(acked, [size / 2, size * 10])
    assert t[0] == pytest.approx(size / 2 * 8 / goodput, rel=0.02)
    assert math.isnan(t[1])


def test_snd_una_wraps():
    acked = pd.DataFrame({"t": [0, 1, 2], "acked": [0, 100, 300]})
    assert list(metrics.download_time(acked, [50, 200])) == pytest.approx([0.5, 1.5])


def test_summarise_across_repetitions(tmp_path):
    dirs = [synthetic.make_run(tmp_path / f"r{i}", experiment="e", repetition=i,
                               ccas=("cubic",), achieved=a) for i, a in enumerate((0.9, 1.0, 0.95), 1)]
    pc = metrics.per_cca(dirs)
    s = metrics.summarise(pc, "cca", ["goodput_bps"]).iloc[0]
    vals = pc["goodput_bps"].to_numpy()
    assert s["n"] == 3
    assert s["mean"] == pytest.approx(vals.mean())
    assert s["half_width"] == pytest.approx(4.302653 * vals.std(ddof=1) / math.sqrt(3), rel=1e-4)


def test_missing_tables_give_nan(tmp_path):
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",))
    for t in ("ss", "probe", "qdisc"):
        (d / f"{t}.csv").unlink()
    fm = metrics.flow_metrics(data.RunData(d)).iloc[0]
    assert math.isnan(fm["ss_exit_s"])
    assert fm["rtt_source"] == "iperf"
    assert fm["goodput_bps"] > 0

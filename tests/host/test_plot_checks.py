"""plot_checks.timeseries_problems, the check tests/vmhost/test_experiment.py makes of the
README example's plot, on runs with known answers: recorded lab runs and synthetic ones pass;
the receiver's goodput drawn where ss sampled delivered, goodput bursts after losses, goodput
drawn per 100 ms (the raw samples), a burst inside a run, a panel that does not say what it
draws, a 0 ms RTT drawn or a missing link rate are caught.

The recorded runs are the lab VM's lab 2 runs of tests/host/data/reference-runs.tar.xz, the
student's lab 1 runs of student-link-run.tar.xz (made by the engine that places iperf3's
intervals at its test start) and two runs of loss-bursts.tar.xz whose goodput bins exceed the
link rate after losses (a student journey's lab 2 share and lab 1 wired runs, their tables
without raw/), unpacked once for this module.
"""

import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import plot_checks
from cclab.analysis import data, metrics, plots, synthetic

DATA = Path(__file__).with_name("data")


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("recorded")
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    for name in ("reference-runs.tar.xz", "student-link-run.tar.xz", "loss-bursts.tar.xz"):
        with tarfile.open(DATA / name) as t:
            t.extractall(root, **safe)
    return root


@pytest.fixture(scope="module")
def recorded(unpacked) -> dict:
    runs = data.load_runs([unpacked / "lab2-4", unpacked / "submission"])
    found = {r.experiment: r for r in runs if ".superseded-" not in r.name}
    assert {"lab2-share", "lab1-wired", "lab1-loss"} <= set(found)
    return found


@pytest.fixture
def bursts(unpacked) -> dict:
    """The loss-bursts runs, loaded anew for each test (tests change their tables)."""
    found = {r.experiment: r for r in data.load_runs([unpacked / "loss-bursts"])}
    assert set(found) == {"lab2-share", "lab1-wired"}
    return found


def _run(tmp_path, **kw):
    return data.RunData(synthetic.make_run(tmp_path / "r", **kw))


def _drop_delivered(run: data.RunData) -> data.RunData:
    """`run` made one whose sockets ss did not sample for `delivered`: the panel draws the
    receiver's goodput."""
    run.set_table("ss", run.table("ss").drop(columns="delivered", errors="ignore"))
    return run


def _goodput_only(run: data.RunData) -> data.RunData:
    """The run loaded anew, without ss's delivered (`run` stays as it is)."""
    return _drop_delivered(data.RunData(run.path))


@pytest.mark.parametrize("name", ["lab2-share", "lab1-wired", "lab1-loss"])
def test_recorded_runs_read_as_they_should(recorded, name):
    """lab2-share is the nearest to the example: BBR, then Cubic 1 s later, on one link (10
    Mbit/s tbf); lab1-wired and lab1-loss the example's wired profile (htb), one flow at a time."""
    run = recorded[name]
    problems, summary = plot_checks.timeseries_problems(run)
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert "delivered (ss delivered) per 500 ms bin" in summary and "link rate" in summary
    if name == "lab2-share":
        assert "all flows: max 9.63 Mbit/s = 0.963 x" in summary
        assert "flow 1 (bbr): max 9.12 Mbit/s = 0.912 x the link rate at 1 s" in summary
        # its goodput, drawn, also stays under the bounds
        problems, summary = plot_checks.timeseries_problems(_goodput_only(run))
        assert not problems and "goodput (iperf receiver) per 500 ms bin" in summary, summary
        assert "all flows: max 10.58 Mbit/s = 1.058 x" in summary
        assert "flow 1 (bbr): max 9.76 Mbit/s = 0.976 x the link rate at 0.5 s" in summary


# The loss-bursts runs' goodput bins over the bounds, each the bin after losses in which the
# application read what the receiver had held behind a hole; the link's delivery in the same
# bins (ss delivered) stays under the link rate.
GOODPUT_BURSTS = {
    "lab2-share": ["flow 1 (bbr): 10.63 Mbit/s in the bin 3-3.5 s, 1.063 x the link rate "
                   "(10 Mbit/s; at most 1.05 x)",
                   "all flows: 11.29 Mbit/s in the bin 3-3.5 s (2 flows), 1.129 x the link rate "
                   "(at most 1.1 x)"],
    "lab1-wired": ["flow 4 (bbr): 44.06 Mbit/s in the bin 43-43.5 s, 1.101 x the link rate "
                   "(40 Mbit/s; at most 1.05 x)"],
}
DELIVERED_MAX = {
    "lab2-share": ["flow 1 (bbr): max 9.42 Mbit/s = 0.942 x the link rate at 1 s",
                   "all flows: max 9.61 Mbit/s = 0.961 x the link rate at 3.5 s"],
    "lab1-wired": ["flow 4 (bbr): max 38.47 Mbit/s = 0.962 x the link rate at 43 s"],
}


@pytest.mark.parametrize("name", sorted(GOODPUT_BURSTS))
def test_goodput_bursts_after_losses_are_not_drawn(bursts, name):
    """BBR's start (lab1-wired, the example's wired profile) and a lossy shared link (lab2-share)
    lose packets; the bin after, the receiver's goodput exceeds the link rate while what the
    link delivered does not.  The plot draws the delivery; drawn, the goodput is caught."""
    run = bursts[name]
    problems, summary = plot_checks.timeseries_problems(run)
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert "delivered (ss delivered) per 500 ms bin" in summary
    for line in DELIVERED_MAX[name]:
        assert line in summary
    problems, summary = plot_checks.timeseries_problems(_goodput_only(run))
    assert problems == GOODPUT_BURSTS[name], summary


def test_delivered_is_what_the_bottleneck_sent(bursts):
    """lab2-share's flows' delivered bytes summed per 500 ms bin are the payload the bottleneck
    (tbf) sent in that bin within 2 % while it was busy, where their goodput reaches 1.18 x it."""
    run = bursts["lab2-share"]
    b = metrics.throughput_binned(run, counter="delivered")
    assert set(b["source"]) == {"ss delivered"}
    full = b.groupby("t_start")["cover"].min() > 0.499          # bins every flow covers whole
    delivered = b.groupby("t_start")["bytes"].sum()[full]
    q = run.table("qdisc")
    q = q[(q["kind"] == "tbf") & (q["direction"] == "down")].sort_values("t")
    payload = q["bytes"].to_numpy(float) - 66 * q["packets"].to_numpy(float)   # 14 + 20 + 32 B
    k = delivered.index.to_numpy()
    sent = pd.Series(np.interp(k + 0.5, q["t"], payload) - np.interp(k, q["t"], payload), index=k)
    busy = sent > 0.9 * 10e6 / 8 * 0.5
    ratio = delivered[busy] / sent[busy]
    assert busy.sum() >= 15 and ratio.between(0.98, 1.02).all(), ratio
    goodput = metrics.throughput_binned(run).groupby("t_start")["bytes"].sum()
    assert (goodput[ratio.index] / sent[ratio.index]).max() > 1.15


def test_goodput_drawn_where_delivered_was_sampled_is_caught(bursts, monkeypatch):
    """A panel that draws the application's goodput though ss sampled every flow's delivered
    counter is caught, with the bursts it draws."""
    real = plots.goodput_panel

    def goodput_panel(run, window, flows=None, counter="goodput"):
        return real(run, window, flows, "goodput")
    monkeypatch.setattr(plots, "goodput_panel", goodput_panel)
    problems, summary = plot_checks.timeseries_problems(bursts["lab2-share"])
    assert problems == ["the panel draws goodput (iperf receiver) although ss sampled every "
                        "flow's delivered counter: after a loss the application's reads burst "
                        "above what the link carried"] + GOODPUT_BURSTS["lab2-share"], summary


def test_a_panel_that_does_not_say_what_it_draws_is_caught(bursts, monkeypatch):
    run = bursts["lab2-share"]
    monkeypatch.setattr(plots, "DELIVERED_NOTE", "")
    assert plot_checks.timeseries_problems(run)[0] == [
        "the panel draws delivered but no footer line says what it is"]
    monkeypatch.undo()
    monkeypatch.setattr(plots, "_SERIES", {})
    problems = plot_checks.timeseries_problems(run)[0]
    assert "the panel labelled 'goodput (Mbit/s)\\nper 500 ms bin' draws ss delivered" in problems


@pytest.mark.parametrize("counter", ["delivered", "goodput"])
def test_raw_samples_swing_above_the_rate(recorded, counter):
    """The same run drawn per 100 ms, iperf3's own interval and ss's: the receiver's reads are
    bursty at that scale and its goodput steps swing far above the link rate; what the link
    delivered does not."""
    run = recorded["lab2-share"]
    run = _goodput_only(run) if counter == "goodput" else run
    problems, summary = plot_checks.timeseries_problems(run, window=0.1)
    assert f"{counter} ({'ss delivered' if counter == 'delivered' else 'iperf receiver'}) " \
           "per 100 ms bin" in summary
    if counter == "delivered":
        assert not problems, summary + "\n" + "\n".join(problems)
        return
    over = [p for p in problems if "flow 1 (bbr)" in p and "x the link rate (10 Mbit/s; at most 1.05 x)" in p]
    assert len(over) >= 3, problems
    assert any(p.startswith("all flows:") and "at most 1.1 x" in p for p in problems), problems


def test_synthetic_flows_sharing_the_link(tmp_path):
    run = _run(tmp_path, ccas=("cubic", "bbr"), rate=20e6, delay=0.02, duration=4.0)
    problems, summary = plot_checks.timeseries_problems(run)
    assert not problems, summary + "\n" + "\n".join(problems)
    # full packets through the shaper: 1448 of every 1514 bytes it counts
    assert "link rate 20 Mbit/s" in summary and "all flows: max 19.14 Mbit/s = 0.957 x" in summary


def _burst(run: data.RunData, t: float, factor: float, shift: float = 0.0,
           counter: str = "goodput"):
    """The flow's counter that the panel draws `shift` s later, with `factor` times the bytes it
    counts in the 0.1 s from `t` (before the shift): the receiver's interval starting at `t`
    (goodput: the ss table then has no delivered, as a run without it), or ss's delivered
    counter raised after `t` by the extra (delivered)."""
    if counter == "goodput":
        _drop_delivered(run)
        ip = run.table("iperf").copy()
        hit = (ip["side"] == "receiver") & ((ip["t_start"] - t).abs() < 1e-6)
        assert hit.sum() == 1
        ip.loc[hit, "bytes"] = (ip.loc[hit, "bytes"] * factor).astype(int)
        ip[["t_start", "t_end"]] += shift
        run.set_table("iperf", ip)
    else:
        ss = run.table("ss").copy()
        got = np.diff(np.interp([t, t + 0.1], ss["t"], ss["delivered"]))[0]
        ss.loc[ss["t"] > t, "delivered"] += int(round((factor - 1) * got))
        ss["t"] += shift
        run.set_table("ss", ss)


@pytest.mark.parametrize("counter, drawn", [("delivered", "11.49 Mbit/s in the bin 1-1.5 s, 1.149 x"),
                                             ("goodput", "11.48 Mbit/s in the bin 1-1.5 s, 1.148 x")])
def test_a_burst_inside_the_run_is_caught(tmp_path, counter, drawn):
    run = _run(tmp_path, ccas=("cubic",), duration=3.2)
    _burst(run, 1.2, 2.0, counter=counter)    # the bin 1-1.5 s: 0.6 s of bytes in 0.5 s
    problems, summary = plot_checks.timeseries_problems(run)
    assert summary.split(": ")[1].startswith(counter)
    assert problems == [f"flow 1 (cubic): {drawn} the link rate (10 Mbit/s; at most 1.05 x)"], summary


def test_one_partly_covered_end_bin_is_spared(tmp_path):
    """Shifted by 0.2 s, the flow covers 0.3 s of its first bin and 0.4 s of its last: a burst
    in the first is averaged over 0.3 s but drawn over 0.5 s, and spared (and named); a second
    one, in the last, is not.  (Drawn from the receiver's intervals, whose edges fall on the
    tenths of a second; ss samples the synthetic flow from 0.02 s on.)"""
    run = _run(tmp_path, ccas=("cubic",), duration=3.2)
    _burst(run, 0.0, 2.0, shift=0.2)
    b = metrics.throughput_binned(run)
    assert b["cover"].round(6).tolist()[0] == 0.3 and b["cover"].round(6).tolist()[-1] == 0.4
    problems, summary = plot_checks.timeseries_problems(run)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert "partly covered end bin 0 s (0.30 s) at 1.275 x spared" in summary     # 4/3 x 0.956

    run = _run(tmp_path, ccas=("cubic",), duration=3.2)
    _burst(run, 0.0, 2.0)
    _burst(run, 3.1, 3.0, shift=0.2)
    problems, summary = plot_checks.timeseries_problems(run)
    assert len(problems) == 1 and problems[0].startswith("flow 1 (cubic):") \
        and "in the bin 3-3.5 s" in problems[0], summary


def test_a_zero_rtt_drawn_is_caught(tmp_path, monkeypatch):
    """The plot leaves out a socket's RTT of 0 before its first measurement
    (metrics.rtt_samples); drawn, it would be caught."""
    run = _run(tmp_path, ccas=("cubic", "bbr"))
    assert not plot_checks.timeseries_problems(run)[0]
    real = metrics.rtt_samples

    def with_zeros(r):
        d = real(r).copy()
        d.loc[d.index[:2], "rtt_ms"] = 0.0
        return d
    monkeypatch.setattr(metrics, "rtt_samples", with_zeros)
    assert plot_checks.timeseries_problems(run)[0] == ["2 RTT sample(s) of 0 ms drawn"]


def test_no_link_rate_line_is_caught(tmp_path):
    run = _run(tmp_path, ccas=("cubic",))
    run.manifest["profile"]["down"]["rate"] = None
    problems, summary = plot_checks.timeseries_problems(run)
    assert problems == ["no link rate line drawn on the goodput panel",
                        "flow 1: no link rate to compare its goodput with"], summary
    assert "no link rate" in summary

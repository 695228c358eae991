"""plot_checks.timeseries_problems, the check tests/vmhost/test_experiment.py makes of the
README example's plot, on runs with known answers: recorded lab runs and synthetic ones pass;
goodput drawn per 100 ms (the raw samples), a burst inside a run, a 0 ms RTT drawn or a missing
link rate are caught.

The recorded runs are the lab VM's lab 2 runs of tests/host/data/reference-runs.tar.xz and the
student's lab 1 runs of student-link-run.tar.xz (made by the engine that places iperf3's
intervals at its test start), unpacked once for this module.
"""

import tarfile
from pathlib import Path

import pytest

import plot_checks
from cclab.analysis import data, metrics, synthetic

DATA = Path(__file__).with_name("data")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("recorded")
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    for name in ("reference-runs.tar.xz", "student-link-run.tar.xz"):
        with tarfile.open(DATA / name) as t:
            t.extractall(root, **safe)
    runs = data.load_runs([root / "lab2-4", root / "submission"])
    found = {r.experiment: r for r in runs if ".superseded-" not in r.name}
    assert {"lab2-share", "lab1-wired", "lab1-loss"} <= set(found)
    return found


def _run(tmp_path, **kw):
    return data.RunData(synthetic.make_run(tmp_path / "r", **kw))


@pytest.mark.parametrize("name", ["lab2-share", "lab1-wired", "lab1-loss"])
def test_recorded_runs_read_as_they_should(recorded, name):
    """lab2-share is the nearest to the example: BBR, then Cubic 1 s later, on one link (10
    Mbit/s tbf); lab1-wired and lab1-loss the example's wired profile (htb), one flow at a time."""
    run = recorded[name]
    problems, summary = plot_checks.timeseries_problems(run)
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert "goodput per 500 ms bin" in summary and "link rate" in summary
    if name == "lab2-share":
        assert "all flows: max 10.58 Mbit/s = 1.058 x" in summary
        assert "flow 1 (bbr): max 9.76 Mbit/s = 0.976 x the link rate at 0.5 s" in summary


def test_raw_samples_swing_above_the_rate(recorded):
    """The same run drawn per 100 ms, iperf3's own interval: receiver reads are bursty at that
    scale and the steps swing far above the link rate."""
    run = recorded["lab2-share"]
    problems, summary = plot_checks.timeseries_problems(run, window=0.1)
    assert "goodput per 100 ms bin" in summary
    over = [p for p in problems if "flow 1 (bbr)" in p and "x the link rate (10 Mbit/s; at most 1.05 x)" in p]
    assert len(over) >= 3, problems
    assert any(p.startswith("all flows:") and "at most 1.1 x" in p for p in problems), problems


def test_synthetic_flows_sharing_the_link(tmp_path):
    run = _run(tmp_path, ccas=("cubic", "bbr"), rate=20e6, delay=0.02, duration=4.0)
    problems, summary = plot_checks.timeseries_problems(run)
    assert not problems, summary + "\n" + "\n".join(problems)
    # the goodput of full packets through the shaper: 1448 of every 1514 bytes it counts
    assert "link rate 20 Mbit/s" in summary and "all flows: max 19.13 Mbit/s = 0.956 x" in summary


def _burst(run: data.RunData, t: float, factor: float, shift: float = 0.0):
    """The receiver's intervals `shift` s later, the one starting at `t` (before the shift)
    with `factor` times its bytes."""
    ip = run.table("iperf").copy()
    hit = (ip["side"] == "receiver") & ((ip["t_start"] - t).abs() < 1e-6)
    assert hit.sum() == 1
    ip.loc[hit, "bytes"] = (ip.loc[hit, "bytes"] * factor).astype(int)
    ip[["t_start", "t_end"]] += shift
    run.set_table("iperf", ip)


def test_a_burst_inside_the_run_is_caught(tmp_path):
    run = _run(tmp_path, ccas=("cubic",), duration=3.2)
    _burst(run, 1.2, 2.0)                     # the bin 1-1.5 s: 6 intervals' bytes in 5
    problems, summary = plot_checks.timeseries_problems(run)
    assert problems == ["flow 1 (cubic): 11.48 Mbit/s in the bin 1-1.5 s, 1.148 x the link rate "
                        "(10 Mbit/s; at most 1.05 x)"], summary


def test_one_partly_covered_end_bin_is_spared(tmp_path):
    """Shifted by 0.2 s, the flow covers 0.3 s of its first bin and 0.4 s of its last: a burst
    in the first is averaged over 0.3 s but drawn over 0.5 s, and spared (and named); a second
    one, in the last, is not."""
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

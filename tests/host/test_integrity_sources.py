"""grading/integrity.py's checks of a run's received bytes against what the kernel and the wire
saw: the bottleneck's qdisc byte counter, the capture's highest sequence number (tsg.csv),
tcp_probe's acknowledged sequence and its congestion windows.  Genuine runs from the lab VM pass
them; a consistent fake that passes every other check (iperf3's tables, its JSON intervals and the
sockets' bytes_acked all edited together, the record rewritten) does not."""

import shutil
import sys
import tarfile
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))
sys.path.insert(0, str(KIT / "notebooks"))

import labkit  # noqa: E402
from grading import fixtures, integrity  # noqa: E402
from test_grading_course import scale_flow  # noqa: E402
from test_student_links import genuine  # noqa: E402


def test_genuine_runs_pass(tmp_path):
    for sub in (fixtures.real_lab1_results(tmp_path / "a"), genuine(tmp_path / "b", Path(__file__))):
        for d in labkit.run_dirs("lab1", sub):
            assert integrity.cross_check(d) == [], d


def test_bytes_added_everywhere_iperf3_and_the_sockets_report_them_are_caught(tmp_path):
    # every wired flow 20 % faster: more than the bottleneck carried over the run
    sub = genuine(tmp_path / "w", Path(__file__))
    for cca in ("reno", "cubic", "vegas", "bbr"):
        scale_flow(sub, "lab1-wired", cca, 1.2, intervals=True, ss=True)
    bad = integrity.problems(sub, "lab1")
    assert any("lab1-wired" in b and "the down bottleneck carried" in b for b in bad), bad
    assert not any("acknowledged" in b or "intervals" in b for b in bad), bad
    # the captured flow: its capture's highest sequence number
    sub = genuine(tmp_path / "l", Path(__file__))
    for p in (sub / "lab1" / "lab1-loss").glob("*.superseded-*"):     # runs the record leaves out:
        shutil.rmtree(p)                                               # scale_flow edits the one left
    scale_flow(sub, "lab1-loss", "cubic", 1.25, intervals=True, ss=True)
    bad = integrity.problems(sub, "lab1")
    assert any("the capture saw" in b for b in bad), bad


def test_tcp_probe_counts_across_the_sequence_wrap():
    start = 2 ** 32 - 3000                                 # snd_una wraps during the flow
    una = [(start + k * 1448) % 2 ** 32 for k in range(0, 1001)]
    got = 1000 * 1448
    probe = pd.DataFrame({"t": range(len(una)), "flow": 1, "local_port": 40000, "snd_una": una})
    assert integrity._flow_sources(1, 5201, got, probe, None) == []
    assert integrity._flow_sources(1, 5201, got * 1.2, probe, None), "20 % more than was ACKed"
    # two streams: each socket's advance counts
    two = pd.concat([probe, probe.assign(local_port=40001)])
    assert integrity._flow_sources(1, 5201, 2 * got, two, None) == []


def probe_from_ss(d: Path) -> None:
    """probe.csv as tcp_probe would have written it, from the run's own socket samples: no kept
    genuine run has tcp_probe on (labs 1-3 turn it off), and ss.csv samples the same kernel
    variables (cwnd in segments, rtt_ms the smoothed RTT) at 20 Hz instead of per ACK; snd_una is
    bytes_acked's advance from just below the 32-bit wrap."""
    ss = pd.read_csv(d / "ss.csv", low_memory=False).dropna(subset=["flow"])
    una = (2 ** 32 - 5000 + ss["bytes_acked"]) % 2 ** 32
    pd.DataFrame({"t": ss["t"], "flow": ss["flow"].astype(int), "local_port": ss["local_port"],
                  "peer_port": ss["peer_port"], "snd_cwnd": ss["cwnd"], "ssthresh": ss["ssthresh"],
                  "srtt_us": (ss["rtt_ms"] * 1000).round(), "snd_wnd": 0,
                  "snd_nxt": una.astype("int64"), "snd_una": una.astype("int64"), "data_len": 0}
                 ).to_csv(d / "probe.csv", index=False)


def test_genuine_runs_pass_the_congestion_window_bound(tmp_path):
    # every kept genuine run, lab 2's too (a p1 Reno flow got 1.017 of what its windows allowed)
    with tarfile.open(fixtures.REAL_RUNS) as t:
        t.extractall(tmp_path / "ref", members=[m for m in t.getmembers() if m.name.startswith("lab2-4/")],
                     filter="data")
    subs = [("lab1", fixtures.real_lab1_results(tmp_path / "a")),
            ("lab1", genuine(tmp_path / "b", Path(__file__))), ("lab2", tmp_path / "ref" / "lab2-4")]
    n = 0
    for lab, sub in subs:
        for d in labkit.run_dirs(lab, sub):
            probe_from_ss(d)
            assert integrity.cross_check(d) == [], d
            n += 1
    assert n == 10


def test_bytes_added_everywhere_but_the_congestion_windows_are_caught(tmp_path):
    # CUBIC 25 % and Reno 20 % faster, with iperf3's tables, its JSON, the sockets' bytes_acked
    # and tcp_probe's snd_una all edited together: only their windows and RTTs give them away
    # (their genuine ratios 0.99 and 0.98 of what the windows allowed; a BBR flow, 0.56, is not)
    sub = genuine(tmp_path / "w", Path(__file__))
    scale_flow(sub, "lab1-wired", "cubic", 1.25, intervals=True, ss=True)
    scale_flow(sub, "lab1-wired", "reno", 1.2, intervals=True, ss=True)
    for d in labkit.run_dirs("lab1", sub):
        probe_from_ss(d)
    labkit.write_record("lab1", "quick", labkit.run_dirs("lab1", sub), sub)
    bad = integrity.problems(sub, "lab1")
    flows = pd.read_csv(next((sub / "lab1" / "lab1-wired").iterdir()) / "flows.csv")
    for cca in ("cubic", "reno"):
        n = int(flows.loc[flows["cca"] == cca, "flow"].iloc[0])
        assert any("lab1-wired" in b and f"flow {n}: its congestion windows" in b for b in bad), bad
    assert sum("congestion windows" in b for b in bad) == 2, bad
    assert not any("acknowledged" in b or "intervals" in b or "hash" in b for b in bad), bad


def test_without_tcp_probe_the_sockets_samples_bound_the_windows(tmp_path):
    # labs 1-3 as they run (tcp_probe off): the same edit is caught by ss's cwnd and rtt
    sub = genuine(tmp_path / "w", Path(__file__))
    for d in labkit.run_dirs("lab1", sub):
        assert integrity.cross_check(d) == [], d
    scale_flow(sub, "lab1-wired", "cubic", 1.25, intervals=True, ss=True)
    labkit.write_record("lab1", "quick", labkit.run_dirs("lab1", sub), sub)
    bad = integrity.problems(sub, "lab1")
    flows = pd.read_csv(next((sub / "lab1" / "lab1-wired").iterdir()) / "flows.csv")
    n = int(flows.loc[flows["cca"] == "cubic", "flow"].iloc[0])
    assert [b for b in bad if "congestion windows" in b] == [
        b for b in bad if f"flow {n}: its congestion windows (ss's cwnd over rtt)" in b] != [], bad


def test_the_window_bound_guards_its_divisions():
    # cwnd 10 x 1448 B per 10 ms over 1 s: 1.448 MB allowed
    t = [k / 10 for k in range(11)]
    probe = pd.DataFrame({"t": t, "flow": 1, "local_port": 40000, "snd_una": 0,
                          "snd_cwnd": 10, "srtt_us": 10000})
    got = 1.448e6
    assert integrity._window_allowed(probe) == pytest.approx(got)
    assert [b for b in integrity._flow_sources(1, None, got, probe, None) if "windows" in b] == []
    assert any("windows" in b for b in integrity._flow_sources(1, None, 1.15 * got, probe, None))
    # samples out of order, and two sockets: each socket's windows count, in time order
    two = pd.concat([probe, probe.assign(local_port=40001)]).sample(frac=1, random_state=1)
    assert integrity._window_allowed(two) == pytest.approx(2 * got)
    # no RTT yet (srtt 0), a blank, a single sample, no samples: no bytes allowed, no verdict
    for p in (probe.assign(srtt_us=0), probe.assign(srtt_us=None), probe.head(1), probe.head(0),
              probe.drop(columns="snd_cwnd")):
        assert not any("windows" in b for b in integrity._flow_sources(1, None, 10 * got, p, None))
    # a sample without an RTT is left out, the one before it holds until the next usable one
    gap = probe.assign(srtt_us=[10000, 0] + [10000] * 9)
    assert integrity._window_allowed(gap) == pytest.approx(got)

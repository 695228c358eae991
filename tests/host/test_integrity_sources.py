"""grading/integrity.py's checks of a run's received bytes against what the kernel and the wire
saw: the bottleneck's qdisc byte counter, the capture's highest sequence number (tsg.csv) and
tcp_probe's acknowledged sequence.  Genuine runs from the lab VM pass them; a consistent fake that
passes every other check (iperf3's tables, its JSON intervals and the sockets' bytes_acked all
edited together, the record rewritten) does not."""

import shutil
import sys
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

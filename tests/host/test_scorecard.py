"""The scorecard's lab 1 and lab 2 sections (cclab/scorecard.py): rows recomputed from saved lab
runs by labkit, verdicts that follow the measurements, refusal of edited results, "not run".

The real runs used here are two quick-mode lab runs made in the lab VM (lab1-10 of 23 Nov 2026
and lab2-4 of 22 Nov 2026, both passing labkit.verify), shipped as tests/host/data/
reference-runs.tar.xz (0.7 MB) and unpacked into a temporary folder once for this module.
"""

import re
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
for p in (KIT / "notebooks", KIT / "labs"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import labkit  # noqa: E402
from cclab import scorecard  # noqa: E402

RUNS = Path(__file__).with_name("data") / "reference-runs.tar.xz"

LAB1_CLAIMS = [
    "On the wired path BBR has the highest throughput, Vegas the lowest",
    "Vegas adds the least delay under load",
    "BBR does not fill the buffer as the loss-based Reno and Cubic do",
    "On a loss Cubic cuts its window by β = 0.2",
    "Vegas keeps a small number of packets in the router's buffer",
    "BBR goes through Startup, Drain, ProbeBW and ProbeRTT",
    "Over the wireless interface Vegas was the fastest",
    "Throughputs of 100–300 Mbit/s over a real LAN and Wi-Fi",
]
LAB2_CLAIMS = [
    "At P=1 BBR gets about three times CUBIC's throughput",
    "Loss-based CUBIC takes the random loss for congestion and stays far below the link",
    "BBR is the fastest single flow of the algorithms tested",
    "Ten parallel connections use the link better",
    "At P=10 BBR stays close to the best, Westwood slightly ahead",
    "BBR, the incumbent, takes a modestly larger share without starving CUBIC",
]


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> Path:
    """The shipped reference runs, unpacked: ref / "lab1-10" / "lab1", ref / "lab2-4" / "lab2"."""
    root = tmp_path_factory.mktemp("reference")
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(RUNS) as t:
        t.extractall(root, **safe)
    for run, lab in (("lab1-10", "lab1"), ("lab2-4", "lab2")):
        assert (root / run / lab / "record.json").is_file(), f"{RUNS} lacks {run}/{lab}"
    return root


@pytest.fixture
def lab1_run(ref) -> Path:
    return ref / "lab1-10"


@pytest.fixture
def lab2_run(ref) -> Path:
    return ref / "lab2-4"


def by_claim(rows):
    return {r["claim"]: r for r in rows}


def table_row(text: str, claim: str) -> list[str]:
    line = next(l for l in text.splitlines() if l.startswith(f"| {claim} |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_lab1_section_from_a_reference_run(lab1_run):
    rows = scorecard.fundamentals_rows({"quick": lab1_run})
    assert [r["claim"] for r in rows] == LAB1_CLAIMS
    r = by_claim(rows)
    for row in rows[:-1]:
        assert row["full"] == "not run" and row["quick"] != "not run"
        assert row["verdict"] in ("reproduced", "differs") and "(quick mode" in row["why"]
    assert rows[-1]["verdict"] == "not reproducible here"
    tput = r[LAB1_CLAIMS[0]]
    assert "bbr 45.5" in tput["quick"] and "vegas 46.3" in tput["quick"] and "(n=1 each)" in tput["quick"]
    assert tput["verdict"] == "differs"                       # all four fill the emulated link
    assert "one run each" in tput["why"] and "50 Mbit/s (htb), 20 ms one way" in tput["why"]
    assert r[LAB1_CLAIMS[1]]["verdict"] == "reproduced"       # Vegas 3.0 ms, BBR 6.9, Reno 10.8, Cubic 19.8
    assert r[LAB1_CLAIMS[2]]["verdict"] == "reproduced"
    cut = r[LAB1_CLAIMS[3]]
    assert "W_max 428 → 303" in cut["quick"] and cut["verdict"] == "differs" and "0.71 W_max" in cut["why"]
    assert r[LAB1_CLAIMS[4]]["verdict"] == "reproduced" and "11 % of the 1-BDP buffer" in r[LAB1_CLAIMS[4]]["why"]
    bbr = r[LAB1_CLAIMS[5]]
    assert "Startup, Drain, ProbeBW" in bbr["quick"] and "cannot show it" in bbr["why"]
    assert r[LAB1_CLAIMS[6]]["verdict"] == "differs" and "vegas 8.1" in r[LAB1_CLAIMS[6]]["quick"]


def test_lab1_verdicts_follow_the_measurements(monkeypatch, lab1_run):
    root = lab1_run
    monkeypatch.setattr(labkit, "vegas_queue", lambda *a, **k: 100.0)     # 60 % of the buffer
    monkeypatch.setattr(labkit, "added_delay", lambda *a, **k: labkit.pd.DataFrame(
        {"experiment": ["lab1-wired"] * 4, "cca": ["reno", "cubic", "vegas", "bbr"],
         "added_ms": [10.0, 20.0, 30.0, 5.0]}))
    r = by_claim(scorecard.fundamentals_rows({"quick": root}))
    assert r[LAB1_CLAIMS[4]]["verdict"] == "differs" and "60 % of the 1-BDP buffer" in r[LAB1_CLAIMS[4]]["why"]
    assert r[LAB1_CLAIMS[1]]["verdict"] == "differs" and "bbr < reno < cubic < vegas" in r[LAB1_CLAIMS[1]]["why"]
    assert r[LAB1_CLAIMS[2]]["verdict"] == "reproduced"


def test_lab2_section_from_a_reference_run(lab2_run):
    extra = []
    rows = scorecard.starlink_rows({"quick": lab2_run}, extra)
    assert [r["claim"] for r in rows] == LAB2_CLAIMS
    r = by_claim(rows)
    p1 = r[LAB2_CLAIMS[0]]
    assert p1["quick"] == "BBR 8.86 vs CUBIC 1.82 Mbit/s (× 4.9, n=1)" and p1["verdict"] == "reproduced"
    # what the run's profile really set, and where the study's set-up differs
    assert "tbf, burst 32 kbit, latency 400 ms" in p1["why"] and "2 % random loss" in p1["why"]
    assert "ACK direction not shaped" in p1["why"] and "veth" in p1["why"] and "3 s flows" in p1["why"]
    assert "Mathis bound 1.96 at the idle RTT 51 ms" in r[LAB2_CLAIMS[1]]["quick"]
    assert r[LAB2_CLAIMS[1]]["verdict"] == "reproduced"
    assert r[LAB2_CLAIMS[2]]["quick"].startswith("first: bbr 8.86 Mbit/s of 6 algorithms")
    assert r[LAB2_CLAIMS[3]]["verdict"] == "reproduced" and "3 of 3" in r[LAB2_CLAIMS[3]]["why"]
    share = r[LAB2_CLAIMS[5]]
    assert share["quick"] == "BBR 86.6 % of the bytes while both ran"
    assert share["verdict"] == "differs" and "CUBIC 13 %" in share["why"]
    assert len(extra) == 1 and "quick: 5 handovers" in extra[0] and "reports nothing on handovers" in extra[0]


def test_lab2_share_verdict_follows_the_measurement(monkeypatch, lab2_run):
    root = lab2_run
    monkeypatch.setattr(labkit, "share", lambda *a, **k: 60.0)
    share = by_claim(scorecard.starlink_rows({"quick": root}))[LAB2_CLAIMS[5]]
    assert share["quick"] == "BBR 60.0 % of the bytes while both ran" and share["verdict"] == "reproduced"


def test_a_run_edited_after_it_was_made_is_refused(tmp_path, lab2_run):
    src = lab2_run
    shutil.copytree(src / "lab2", tmp_path / "quick" / "lab2")
    out = tmp_path / "sc.md"
    assert scorecard.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    assert table_row(out.read_text(), LAB2_CLAIMS[0])[2] == "BBR 8.86 vs CUBIC 1.82 Mbit/s (× 4.9, n=1)"
    iperf = next((tmp_path / "quick" / "lab2" / "lab2-p1").glob("*/iperf.csv"))
    lines = iperf.read_text().splitlines(keepends=True)
    lines[1] = re.sub(r",(\d+),", lambda m: f",{int(m.group(1)) + 1000},", lines[1], count=1)
    iperf.write_text("".join(lines))
    with pytest.raises(SystemExit) as e:
        scorecard.main(["--results", str(tmp_path), "--out", str(tmp_path / "sc2.md")])
    msg = str(e.value)
    assert msg.startswith("lab2 quick results") and "\n" not in msg
    assert "iperf.csv: changed after the run" in msg
    assert not (tmp_path / "sc2.md").exists()


def test_an_edited_synthetic_run_is_refused_naming_the_lab(tmp_path):
    # no reference run needed: a synthetic lab 1 run with its record, then an edit
    from cclab.analysis import synthetic
    d = synthetic.make_run(tmp_path / "quick" / "lab1" / "lab1-wired" / "r-1", experiment="lab1-wired",
                           ccas=("reno", "cubic", "vegas", "bbr"))
    labkit.write_record("lab1", "quick", [d], root=tmp_path / "quick")
    assert not any("changed after the run" in b for b in labkit.verify("lab1", tmp_path / "quick"))
    (d / "iperf.csv").write_text((d / "iperf.csv").read_text().replace("29887", "29888", 1))
    with pytest.raises(SystemExit, match=r"^lab1 quick results .*lab1-wired/r-1/iperf.csv: changed after the run"):
        scorecard.main(["--results", str(tmp_path), "--out", str(tmp_path / "sc.md")])


def test_modes_without_results_say_not_run(tmp_path, lab1_run):
    (tmp_path / "quick").mkdir()
    (tmp_path / "quick" / "lab1").symlink_to(lab1_run / "lab1")
    out = tmp_path / "sc.md"
    assert scorecard.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Congestion-control fundamentals (lab 1)" in text and "## Starlink-like impairments (lab 2)" in text
    assert "not read by this scorecard yet" not in text
    for claim in LAB2_CLAIMS:                                     # no lab 2 results at all
        assert table_row(text, claim)[2:5] == ["not run", "not run", "not run"]
    assert "reports nothing on handovers: not run." in text
    for claim in LAB1_CLAIMS[:-1]:
        cells = table_row(text, claim)
        assert cells[3] == "not run"                              # no full-mode results
        assert cells[2] != "not run" and cells[4] in ("reproduced", "differs")
    assert re.search(r"^\| lab1 \| quick \| 2026-11-23T01:11:38Z \| 3 \(3\) \|", text, re.M)
    assert table_row(text, LAB1_CLAIMS[-1])[4] == "not reproducible here"


def test_comparisons_use_intervals_or_ties():
    assert scorecard._vs([10.0], [10.3]) == "inconclusive"        # one run each: within 5 %
    assert scorecard._vs([10.0], [12.0]) == "lower"
    assert scorecard._vs([10, 10.2, 9.8], [5, 5.1, 4.9]) == "higher"
    assert scorecard._vs([10, 12], [11, 13]) == "inconclusive"    # intervals overlap
    assert scorecard._vs([], [1.0]) == "inconclusive"


def test_a_claim_a_limited_run_cannot_test_is_judged_on_the_other_mode():
    """A full-mode run limited to BBR and CUBIC cannot say whether BBR leads a field of algorithms:
    that row judges quick mode, and the full cell says why it is empty."""
    measured = {"quick": {"p1": {"bbr": [6.0], "cubic": [2.0], "reno": [2.1]}},
                "full": {"p1": {"bbr": [6.1, 6.2], "cubic": [1.9, 2.0]}}}
    field = (lambda m: len(m["p1"]) > 2, lambda m: f"the run holds {' and '.join(sorted(m['p1']))} only")
    row = scorecard._row("c", "s", measured, lambda m: f"{len(m['p1'])} algorithms",
                         lambda m, mode: ("reproduced", f"judged on {mode}"), needs=field)
    assert row["quick"] == "3 algorithms" and row["full"] == "not run: the run holds bbr and cubic only"
    assert row["verdict"] == "reproduced" and row["why"] == "judged on quick"
    row = scorecard._row("c", "s", {"full": measured["full"]}, str, lambda m, mode: ("x", ""), needs=field)
    assert row["verdict"] == "not run" and row["quick"] == "not run" and row["full"].startswith("not run: ")

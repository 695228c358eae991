"""The scorecard's lab 1 and lab 2 sections (grading/scorecard.py): rows recomputed from saved lab
runs by labkit, verdicts that follow the measurements (reproduced, partly, inconclusive, differs),
refusal of edited results, "not run"; the thresholds table the handouts show; quick mode's
repetitions wherever a row computes an interval.

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
from grading import scorecard  # noqa: E402

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
        assert row["verdict"] in ("reproduced", "differs", "inconclusive") and "(quick mode" in row["why"]
        if row["verdict"] == "reproduced":                     # judged on quick mode alone: it says so
            assert "reproduced only at quick mode's flow length" in row["why"]
        else:
            assert "only at quick mode's flow length" not in row["why"]
    assert rows[-1]["verdict"] == "not reproducible here"
    tput = r[LAB1_CLAIMS[0]]
    assert "bbr 45.5" in tput["quick"] and "vegas 46.3" in tput["quick"] and "(n=1 each)" in tput["quick"]
    # all four fill the emulated link: the order is a tie, but the document's gap is ruled out
    assert tput["verdict"] == "differs" and "rules out the document's gap" in tput["why"]
    assert "one run each" in tput["why"] and "50 Mbit/s (htb), 20 ms one way" in tput["why"]
    delay = r[LAB1_CLAIMS[1]]                                 # Vegas 3.0 ms, BBR 6.9, Reno 10.8, Cubic 19.8
    assert delay["verdict"] == "reproduced" and "vegas 16 s flows" in delay["why"]
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


def test_lab1_delay_pools_lab1_delay_flows_with_lab1_wired(monkeypatch, lab1_run):
    """Quick mode's lab1-wired-delay adds two Vegas and two BBR flows to lab1-wired's one each: the delay
    rows compare Vegas and BBR on three flows each (95 % intervals), Reno and Cubic on one."""
    def delays(vegas, bbr):
        return lambda *a, **k: labkit.pd.DataFrame(
            {"experiment": ["lab1-wired"] * 4 + ["lab1-wired-delay"] * 4,
             "cca": ["reno", "cubic", "vegas", "bbr", "vegas", "bbr", "vegas", "bbr"],
             "added_ms": [10.0, 35.0, vegas[0], bbr[0], vegas[1], bbr[1], vegas[2], bbr[2]]})
    # close and spread, as the CI runs measured: the intervals overlap
    monkeypatch.setattr(labkit, "added_delay", delays((3.9, 2.6, 3.2), (4.2, 6.1, 2.2)))
    r = by_claim(scorecard.fundamentals_rows({"quick": lab1_run}))
    row = r[LAB1_CLAIMS[1]]
    assert "(n reno 1, cubic 1, vegas 3, bbr 3)" in row["quick"], row["quick"]
    assert "vegas 3.2 [" in row["quick"] and "bbr 4.2 [" in row["quick"]
    assert row["verdict"] == "inconclusive", row
    assert "3 flows of BBR and Vegas (95 % intervals)" in row["why"] and "apart from bbr (intervals overlap)" in row["why"]
    assert r[LAB1_CLAIMS[2]]["verdict"] == "reproduced"       # BBR's 4.2 against Reno's 10, Cubic's 35
    # apart: Vegas below BBR on the intervals, and below Reno and Cubic
    monkeypatch.setattr(labkit, "added_delay", delays((3.0, 3.1, 2.9), (6.0, 6.2, 5.9)))
    row = by_claim(scorecard.fundamentals_rows({"quick": lab1_run}))[LAB1_CLAIMS[1]]
    assert row["verdict"] == "reproduced", row
    # lab1-wired alone (a run made before lab1-wired-delay existed): one flow each, the tie rule
    monkeypatch.setattr(labkit, "added_delay", lambda *a, **k: labkit.pd.DataFrame(
        {"experiment": ["lab1-wired"] * 4, "cca": ["reno", "cubic", "vegas", "bbr"],
         "added_ms": [10.0, 35.0, 3.9, 4.2]}))
    row = by_claim(scorecard.fundamentals_rows({"quick": lab1_run}))[LAB1_CLAIMS[1]]
    assert "(n=1 each)" in row["quick"] and "one run each" in row["why"]


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
    best = r[LAB2_CLAIMS[2]]
    assert best["quick"].startswith("first: bbr 8.86 Mbit/s of 6 algorithms")
    # ahead of every algorithm it ran, but those are 6 of the study's 14
    assert best["verdict"] == "partly" and "judged on 6 of the study's 14 algorithms" in best["why"]
    assert "partly only at quick mode's flow length (3 s flows; the study's: 180 s)" in best["why"]
    p10 = r[LAB2_CLAIMS[3]]
    assert p10["verdict"] == "partly" and "3 of 3" in p10["why"] and "4 of the study's 14" in p10["why"]
    # Westwood +2.0 % from one 3 s run each: within the noise, not a lead
    lead = r[LAB2_CLAIMS[4]]
    assert lead["verdict"] == "inconclusive" and "+2.0 %" in lead["why"] and "within run-to-run noise" in lead["why"]
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
        assert cells[2] != "not run" and cells[4] in ("reproduced", "differs", "inconclusive")
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
    assert row["verdict"] == "reproduced"
    assert row["why"] == "judged on quick; reproduced only at quick mode's flow length, full mode not judged"
    row = scorecard._row("c", "s", {"full": measured["full"]}, str, lambda m, mode: ("x", ""), needs=field)
    assert row["verdict"] == "not run" and row["quick"] == "not run" and row["full"].startswith("not run: ")


# ---------------------------------------------------------------- honest verdicts

LABS = ("lab1", "lab2", "lab3", "lab4", "lab5")
# Debian's modules that the study's field of 14 stands for (the count is what matters)
FIELD = ["bbr", "bic", "cdg", "cubic", "highspeed", "htcp", "hybla", "illinois", "lp", "nv", "reno",
         "scalable", "vegas", "westwood"]


def three(m, d=0.1):
    return [m - d, m, m + d]


def added_delay(values: dict):
    rows = [(c, x) for c, xs in values.items() for x in xs]
    return lambda *a, **k: labkit.pd.DataFrame({"experiment": ["lab1-wired"] * len(rows),
                                                "cca": [c for c, _ in rows], "added_ms": [x for _, x in rows]})


def goodput(p1: dict, p10: dict | None = None):
    rows = [(e, c, x) for e, v in (("lab2-p1", p1), ("lab2-p10", p10 or {})) for c, xs in v.items() for x in xs]
    return lambda *a, **k: labkit.pd.DataFrame({"experiment": [r[0] for r in rows], "cca": [r[1] for r in rows],
                                                "mbps": [r[2] for r in rows]})


def test_judge_combines_comparisons():
    J = scorecard._judge
    assert J(["higher", "higher"], "higher") == "reproduced"
    assert J(["higher", "higher"], "higher", "judged on 6 of 14") == "partly"
    assert J(["higher", "inconclusive"], "higher") == "inconclusive"
    assert J(["higher", "inconclusive"], "higher", "judged on 6 of 14") == "inconclusive"
    assert J(["higher", "lower"], "higher") == "differs"
    assert J(["inconclusive", "lower"], "higher", "judged on 6 of 14") == "differs"
    assert J([], "higher") == "inconclusive"


def test_overlapping_intervals_make_vegas_least_delay_inconclusive(monkeypatch, lab1_run):
    # the table's full-mode figures: Vegas 3.3 [2.4, 4.1] ms, BBR 5.3 [-0.4, 11.1]: Vegas lowest,
    # its interval inside BBR's (the packed run stands in for a full-mode one)
    monkeypatch.setattr(labkit, "added_delay", added_delay(
        {"reno": [24.0, 29.0, 34.0], "cubic": [27.0, 27.5, 28.0], "vegas": [2.9, 3.3, 3.6], "bbr": [2.9, 5.3, 7.8]}))
    r = by_claim(scorecard.fundamentals_rows({"full": lab1_run}))
    row = r[LAB1_CLAIMS[1]]
    assert row["verdict"] == "inconclusive", row["why"]
    assert "Vegas' mean is the lowest" in row["why"] and "not apart from bbr (intervals overlap)" in row["why"]
    assert "3 runs each, 95 % intervals" in row["why"] and "only at quick mode" not in row["why"]
    assert r[LAB1_CLAIMS[2]]["verdict"] == "reproduced"          # BBR's interval below Reno's and Cubic's
    # every interval apart: both reproduced
    delays = {"reno": [24.0, 29.0, 34.0], "cubic": [27.0, 27.5, 28.0], "vegas": [2.9, 3.3, 3.6], "bbr": [5.0, 5.3, 5.6]}
    monkeypatch.setattr(labkit, "added_delay", added_delay(delays))
    r = by_claim(scorecard.fundamentals_rows({"full": lab1_run}))
    assert r[LAB1_CLAIMS[1]]["verdict"] == "reproduced" and r[LAB1_CLAIMS[2]]["verdict"] == "reproduced"
    # Reno's interval spanning the others': both inconclusive, neither differs
    monkeypatch.setattr(labkit, "added_delay", added_delay(dict(delays, reno=[4.0, 29.0, 54.0])))
    r = by_claim(scorecard.fundamentals_rows({"full": lab1_run}))
    assert r[LAB1_CLAIMS[1]]["verdict"] == "inconclusive" and r[LAB1_CLAIMS[2]]["verdict"] == "inconclusive"
    # Reno below Vegas, intervals apart: differs
    monkeypatch.setattr(labkit, "added_delay", added_delay(dict(delays, reno=three(1.0))))
    assert by_claim(scorecard.fundamentals_rows({"full": lab1_run}))[LAB1_CLAIMS[1]]["verdict"] == "differs"


def test_bbr_fastest_on_a_subset_is_partly(monkeypatch, lab2_run):
    six = ["bbr", "cubic", "hybla", "reno", "vegas", "westwood"]
    p1 = {c: three(9.0 if c == "bbr" else 2.0 + 0.3 * i) for i, c in enumerate(six)}
    monkeypatch.setattr(labkit, "goodput", goodput(p1))
    best = by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[2]]
    assert best["verdict"] == "partly" and "judged on 6 of the study's 14 algorithms" in best["why"]
    # the study's whole field: reproduced
    p1 = {c: three(9.0 if c == "bbr" else 2.0 + 0.2 * i) for i, c in enumerate(FIELD)}
    monkeypatch.setattr(labkit, "goodput", goodput(p1))
    best = by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[2]]
    assert best["verdict"] == "reproduced" and "of the study's" not in best["why"]
    # one interval overlapping BBR's: inconclusive, whatever the field; one above it: differs
    monkeypatch.setattr(labkit, "goodput", goodput(dict(p1, hybla=[7.0, 9.0, 11.0])))
    assert by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[2]]["verdict"] == "inconclusive"
    monkeypatch.setattr(labkit, "goodput", goodput(dict(p1, hybla=three(12.0))))
    assert by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[2]]["verdict"] == "differs"


def test_westwood_lead_needs_intervals_apart(monkeypatch, lab2_run):
    p1 = {c: three(2.0) for c in FIELD}
    p10 = {c: three(7.0) for c in FIELD}

    def lead(**p):
        monkeypatch.setattr(labkit, "goodput", goodput(p1, dict(p10, **p)))
        return by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[4]]
    row = lead(westwood=three(7.75, 0.01), bbr=three(7.64, 0.01))
    assert row["verdict"] == "reproduced" and "+1.4 %" in row["why"]
    row = lead(westwood=[7.5, 7.75, 8.0], bbr=three(7.64, 0.01))
    assert row["verdict"] == "inconclusive" and "their intervals overlap" in row["why"]
    assert lead(westwood=three(9.0, 0.01), bbr=three(7.64, 0.01))["verdict"] == "differs"   # not a slight lead
    assert lead(westwood=three(7.0, 0.01), bbr=three(7.64, 0.01))["verdict"] == "differs"   # BBR ahead
    # four of the algorithms: partly
    monkeypatch.setattr(labkit, "goodput", goodput(p1, {"bbr": three(7.64, 0.01), "westwood": three(7.75, 0.01),
                                                        "cubic": three(7.0), "reno": three(7.0)}))
    row = by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[4]]
    assert row["verdict"] == "partly" and "4 of the study's 14" in row["why"]
    # quick mode's P=10: three runs of the two, one of the others; overlapping intervals are said so
    monkeypatch.setattr(labkit, "goodput", goodput(p1, {"bbr": [8.7, 9.1, 9.4], "westwood": [8.0, 8.9, 9.8],
                                                        "cubic": [9.1], "reno": [9.2]}))
    row = by_claim(scorecard.starlink_rows({"quick": lab2_run}))[LAB2_CLAIMS[4]]
    assert row["verdict"] == "inconclusive" and "their intervals overlap" in row["why"]
    assert "one run each" not in row["why"]


def test_lab3_overlapping_intervals_are_inconclusive_not_differs(monkeypatch, tmp_path):
    import kmodlab as KM
    pd = labkit.pd

    def flows(spline0, bbr0):
        rows = [{"experiment": "lab3-loss-00", "loss": 0.0, "cca": c, "goodput_mbps": g, "retrans_rate": 0.005}
                for c, gs in (("spline", spline0), ("bbr", bbr0)) for g in gs]
        rows += [{"experiment": "lab3-loss-20", "loss": 20.0, "cca": c, "goodput_mbps": g, "retrans_rate": 0.3}
                 for c, gs in (("spline", three(0.7)), ("bbr", three(5.0))) for g in gs]
        return pd.DataFrame(rows)
    share = pd.DataFrame({"run": "r", "competitor": ["cubic"] * 4 + ["bbr"] * 4, "t": range(8),
                          "spline_mbps": [8, 9, 8, 9, 1, 1, 1, 1], "other_mbps": [11, 10, 11, 10, 18, 18, 18, 18]})
    monkeypatch.setattr(KM, "verify", lambda *a, **k: [])
    monkeypatch.setattr(KM, "lab3_share_samples", lambda root=None: share)
    monkeypatch.setattr(KM, "lab3_loss_flows", lambda root=None: flows([18.4, 18.5, 18.3], [18.7, 18.5, 18.9]))
    acks = pd.DataFrame([{"experiment": KM.ACK_LOSS_EXPERIMENT, "loss": 0.0, "cca": c, "goodput_mbps": g}
                         for c, gs in (("spline", [18.4, 18.3, 18.5]), ("bbr", [18.5, 18.2, 18.4]))
                         for g in gs])
    monkeypatch.setattr(KM, "lab3_ack_flows", lambda root=None: acks)
    r = {x["claim"]: x for x in scorecard.spline_rows({"full": tmp_path})}
    clean = r["Spline downloads faster than BBR on a clean path"]
    assert clean["verdict"] == "inconclusive" and "intervals overlap" in clean["why"] and "n=3 and 3" in clean["why"]
    seeds = r["Spline faster than BBR under 20 % loss, as the seed measured it (ACKs lost)"]
    assert seeds["verdict"] == "inconclusive" and "n=3 and 3" in seeds["why"]
    assert "Spline 18.4" in seeds["full"] and "BBR 18.4" in seeds["full"]
    assert r["Spline faster than BBR under 20 % loss of data"]["verdict"] == "differs"
    assert r["Spline retransmits less than BBR"]["verdict"] == "inconclusive"      # equal rates
    assert r["fairness_rat makes Spline yield to a competing Cubic flow"]["verdict"] == "reproduced"
    starved = r["fairness_rat makes Spline yield to a competing BBR flow"]
    assert starved["verdict"] == "differs" and "starved: 0.05" in starved["why"]
    monkeypatch.setattr(KM, "lab3_loss_flows", lambda root=None: flows(three(19.6), three(16.0)))
    r = {x["claim"]: x for x in scorecard.spline_rows({"quick": tmp_path})}
    clean = r["Spline downloads faster than BBR on a clean path"]
    assert clean["verdict"] == "reproduced" and "reproduced only at quick mode's flow length" in clean["why"]
    assert "mechanism" not in r["Spline faster than BBR under 20 % loss of data"]["why"]     # no ablation ran
    # with lab 3's ablation: the data-loss row and the Cubic row name the change that helped most
    abl = pd.DataFrame({"scenario": ["loss", "loss", "share", "share"],
                        "change": [KM.MODEL, "published_floor=Y", KM.MODEL, "drain_test=N queue_probe_rtt=N"],
                        "n": [3, 3, 1, 1], "mean": [0.78, 2.08, 0.07, 0.42]}).set_index(["scenario", "change"])
    monkeypatch.setattr(KM, "lab3_ablation", lambda root=None: abl)
    # (the cause is kmodlab's own reading of that table: the change with the highest mean)
    r = {x["claim"]: x for x in scorecard.spline_rows({"quick": tmp_path})}
    assert "published_floor=Y gives 2.08 Mbit/s against the model's 0.78 (n=3 and 3)" in \
        r["Spline faster than BBR under 20 % loss of data"]["why"]
    assert "drain_test=N queue_probe_rtt=N gives 0.42 of the goodput against the model's 0.07" in \
        r["fairness_rat makes Spline yield to a competing Cubic flow"]["why"]
    assert "mechanism" not in r["fairness_rat makes Spline yield to a competing BBR flow"]["why"]


def test_every_judged_row_states_its_threshold(lab1_run, lab2_run):
    stated = {t["claim"] for t in scorecard.THRESHOLDS}
    rows = scorecard.fundamentals_rows({"quick": lab1_run}) + scorecard.starlink_rows({"quick": lab2_run})
    for row in rows:
        if row["verdict"] != "not reproducible here":
            assert row["claim"] in stated, row["claim"]
    assert {v for v, _ in scorecard.VERDICTS} >= {"reproduced", "partly", "inconclusive", "differs"}


def test_each_handout_shows_the_threshold_table_before_any_result():
    assert scorecard.write_handouts(check=True) == []
    assert scorecard.main(["--check-handouts"]) == 0
    for lab in LABS:
        text = (KIT / "labs" / lab / "handout.md").read_text()
        block = scorecard.handout_block(lab)
        assert text.count(scorecard.THRESHOLDS_BEGIN) == 1 and block in text, lab
        first_result = min(text.index(h) for h in ("## What runs", "## What you measure") if h in text)
        assert text.index(block) < first_result, f"{lab}: the thresholds come after a result"
        for t in scorecard.THRESHOLDS:
            assert (f"| {t['claim']} |" in block) == (lab in t["lab"])


def test_the_table_and_the_verdicts_read_the_same_thresholds(monkeypatch, lab2_run):
    before = scorecard.threshold_table("lab2")
    monkeypatch.setitem(scorecard.th("lab2", "share_modest"), "hi", 90.0)
    assert "at most 90 %" in scorecard.threshold_table("lab2") and "at most 90 %" not in before
    assert scorecard.write_handouts(["lab2"], check=True)            # the handout is out of date now
    share = by_claim(scorecard.starlink_rows({"quick": lab2_run}))[LAB2_CLAIMS[5]]
    assert share["verdict"] == "reproduced" and "taken as 50-90 %" in share["why"]


# quick-mode files behind a row that compares samples, and the flow time each lab had before
# they ran three connections per algorithm (labkit.flow_seconds(lab, "quick")); lab 3 since has
# the document's own loss test too (ack-loss-20: its six 2 s flows end 28 s in) and the ablation
# of Spline (six loss files of three 2 s connections ending 8.3 s in, four 8 s share pairs: 89.8 s);
# lab 2's P=1 runs BBR and CUBIC two more times each (four 3 s flows, 4.5 s apart: 18 s more), as
# their ratio row computes an interval now; the other algorithms there still run once; lab 2's P=10
# runs BBR and Westwood two more times each (four 3 s flows of ten connections, 7 s apart: 28 s
# more), as the "Westwood slightly ahead" row compares their intervals; lab 1's
# delay rows read lab1-wired-delay's two more Vegas (16 s) and BBR (5 s) flows with lab1-wired's (47 s)
INTERVAL_FILES = {"lab1": ("wired", "wifi"), "lab2": ("p1", "p10"),
                  "lab3": ("ack-loss-20", "loss-00", "loss-01", "loss-02", "loss-05", "loss-10",
                           "loss-20", "ablate-loss-recovery-growth", "ablate-loss-no-loss-cut",
                           "ablate-loss-no-drain-test", "ablate-loss-published-floor",
                           "ablate-loss-no-loss-reactions", "ablate-loss-pacing-up-only"),
                  "lab4": ("wifi-default", "wifi-params")}
QUICK_FLOW_SECONDS = {"lab1": 78.0 + 47.0, "lab2": 78.5 + 18.0 + 28.0, "lab3": 107.5 + 28.0 + 89.8, "lab4": 139.0 + 34.0}


def test_quick_mode_compares_one_run_or_three_never_two():
    """Where a quick-mode row computes an interval it has three samples per algorithm or more; a row
    on one run a side has no interval (the tie rule).  Two samples gave intervals like [-53.9, 68.8]."""
    from cclab import profiles, spec

    def counts(lab, *names):
        n = {}
        for name in names:
            path = KIT / "labs" / lab / "quick" / f"{name}.toml"
            table = {k: v for k, v in profiles.load_toml(path, "experiment").items() if k != "lab"}
            exp = spec.from_dict(table, path.stem, path.parent)
            for f in exp.flows:
                n[f.cca] = n.get(f.cca, 0) + exp.repetitions
        return n

    # lab 1's delay rows pool lab1-wired's flows with lab1-wired-delay's: Vegas and BBR three each
    n = counts("lab1", "wired", "wired-delay")
    assert n == {"reno": 1, "cubic": 1, "vegas": 3, "bbr": 3}, n
    for lab, names in INTERVAL_FILES.items():
        for name in names:
            n = counts(lab, name)
            assert all(x == 1 or x >= 3 for x in n.values()), f"{lab}/quick/{name}: {n}"
            if (lab, name) == ("lab2", "p1"):            # the BBR/CUBIC ratio's interval
                assert n["bbr"] >= 3 and n["cubic"] >= 3, n
            if (lab, name) == ("lab2", "p10"):           # the Westwood-against-BBR lead's intervals
                assert n["bbr"] >= 3 and n["westwood"] >= 3, n
            if lab in ("lab3", "lab4"):
                assert min(n.values()) >= 3, f"{lab}/quick/{name}: {n}"
        assert labkit.flow_seconds(lab, "quick") <= QUICK_FLOW_SECONDS[lab], lab


def test_a_band_is_judged_on_the_whole_interval(monkeypatch, lab2_run):
    assert scorecard._band([1.0, 1.1, 0.9], 0.5, 1.5) == "inside"
    assert scorecard._band([3.0, 3.1, 2.9], 0.5, 1.5) == "outside"
    assert scorecard._band([1.0, 1.6, 0.4], 0.5, 1.5) == "inconclusive"
    assert scorecard._band([1.2], 0.5, 1.5) == "inside" and scorecard._band([], 0, 1) == "inconclusive"
    # the table's full-mode CUBIC: 1.57 [1.40, 1.73] Mbit/s against a 1.96 bound: 0.71-0.88 of it,
    # across the 0.75 edge
    p1 = {"bbr": [9.20, 9.26, 9.31], "cubic": [1.50, 1.57, 1.64]}
    monkeypatch.setattr(labkit, "goodput", goodput(dict(p1, cubic=[1.47, 1.57, 1.67])))
    r = by_claim(scorecard.starlink_rows({"full": lab2_run}))
    assert r[LAB2_CLAIMS[1]]["verdict"] == "inconclusive" and "straddles" in r[LAB2_CLAIMS[1]]["why"]
    assert r[LAB2_CLAIMS[0]]["verdict"] == "reproduced"           # BBR/CUBIC at least 9.2 / 1.67
    monkeypatch.setattr(labkit, "goodput", goodput(dict(p1, cubic=three(1.9, 0.05))))
    assert by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[1]]["verdict"] == "reproduced"
    monkeypatch.setattr(labkit, "goodput", goodput(dict(p1, cubic=three(1.0, 0.05))))
    assert by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[1]]["verdict"] == "differs"
    # BBR above CUBIC, but the ratio's bounds straddle 2 (about 1.5-2.7): inconclusive; wholly below: differs
    monkeypatch.setattr(labkit, "goodput", goodput({"bbr": [3.6, 4.0, 4.4], "cubic": three(2.0, 0.05)}))
    assert by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[0]]["verdict"] == "inconclusive"
    monkeypatch.setattr(labkit, "goodput", goodput({"bbr": three(3.0, 0.05), "cubic": three(2.0, 0.05)}))
    assert by_claim(scorecard.starlink_rows({"full": lab2_run}))[LAB2_CLAIMS[0]]["verdict"] == "differs"


def test_quick_p1_judges_the_ratio_on_intervals_and_the_field_by_ties(monkeypatch, lab2_run):
    """Quick mode's P=1: BBR and CUBIC three times, the others once.  The ratio row is judged on
    the two intervals and says so; the field's row says which algorithms had intervals and that
    the single runs were compared by the tie rule."""
    p1 = {"bbr": three(8.9, 0.3), "cubic": three(3.5, 0.2), "hybla": [4.0], "reno": [3.2]}
    monkeypatch.setattr(labkit, "goodput", goodput(p1))
    r = by_claim(scorecard.starlink_rows({"quick": lab2_run}))
    ratio, best = r[LAB2_CLAIMS[0]], r[LAB2_CLAIMS[2]]
    assert "3 runs each, 95 % intervals" in ratio["why"] and "n=3" in ratio["quick"], ratio
    # 95 % t-intervals of three (t = 4.30): BBR above 8.16, CUBIC below 4.00, so the ratio is 2.04 or more
    assert ratio["verdict"] == "reproduced", ratio
    assert "3 flows of BBR and CUBIC (95 % intervals), one of each other algorithm" in best["why"], best
    monkeypatch.setattr(labkit, "goodput", goodput(dict(p1, cubic=[2.0, 3.5, 5.0])))
    ratio = by_claim(scorecard.starlink_rows({"quick": lab2_run}))[LAB2_CLAIMS[0]]
    assert ratio["verdict"] == "inconclusive", ratio     # CUBIC's interval reaches past 8.9 / 2


def test_provenance_reads_the_verdicts_beside_the_manifests_in_a_fresh_process(tmp_path):
    """As `python3 -m grading.scorecard` calls it first, before anything has put the labs on
    sys.path: each run's fidelity verdict is read from its fidelity.json."""
    import json
    import subprocess
    from grading import fixtures
    fixtures.lab1_results(tmp_path)
    root = tmp_path / "submission"
    code = ("import json, sys; from pathlib import Path; from grading import scorecard; "
            "print(json.dumps(scorecard.provenance(Path(sys.argv[1]), 'lab1')))")
    p = subprocess.run([sys.executable, "-c", code, str(root)], cwd=KIT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    prov = json.loads(p.stdout)
    assert prov["runs"] == 3 and prov["fidelity_ok"] == 3
    run = next((root / "lab1" / "lab1-wired").iterdir())
    (run / "fidelity.json").write_text(json.dumps({"ok": False, "checks": []}))
    p = subprocess.run([sys.executable, "-c", code, str(root)], cwd=KIT, capture_output=True,
                       text=True, timeout=120)
    assert json.loads(p.stdout)["fidelity_ok"] == 2, p.stderr


def test_a_lone_value_is_judged_against_the_other_sides_interval():
    vs = scorecard._vs_sparse
    assert vs([1.0, 1.1, 0.9], [5.0]) == "lower"             # 5 outside [~0.75, ~1.25]
    assert vs([5.0], [1.0, 1.1, 0.9]) == "higher"
    assert vs([1.0, 3.0, 2.0], [2.5]) == "inconclusive"       # 2.5 inside the interval
    assert vs([1.0], [1.2]) == "inconclusive"                # no interval on either side
    assert vs([], [1.0, 2.0]) == "inconclusive"
    assert vs([1.0, 1.1, 0.9], [5.0, 5.2, 4.8]) == "lower"


def test_lab5_verdicts_follow_the_learners_costs_not_only_its_last_choice(tmp_path):
    """The tuner's verdicts: the learner's final choice counts only when the costs it computed for
    the two sides (per connection, with intervals) are apart; a learner that ended on an algorithm
    by a close call is inconclusive, whichever it ended on."""
    import pandas as pd
    example = KIT / "labs" / "lab5" / "live-example.csv"
    lossy, clean = scorecard.tuner_rows({"quick": example})[:2]
    assert lossy["verdict"] == "reproduced" and "apart" in lossy["why"] and "(n=30)" in lossy["why"]
    # the recorded log's clean path: two BBR connections whose costs straddle the others'
    assert clean["verdict"] == "inconclusive" and "a close call" in clean["why"], clean["why"]
    assert "ends on htcp" in clean["why"]

    log = pd.read_csv(example, dtype={"key": str})

    def judged(slow_bbr: bool) -> dict:
        v = log.copy()
        m = v["acting"] & (v["path"] == "clean") & ((v["final_alg"] == "bbr") == slow_bbr)
        v.loc[m, "delivery_rate"] = (v.loc[m, "delivery_rate"] // 10).astype(int)
        f = tmp_path / f"live-{slow_bbr}.csv"
        v.to_csv(f, index=False)
        return scorecard.tuner_rows({"quick": f})[1]

    r = judged(slow_bbr=True)          # BBR's connections a tenth as fast: BBR costs far more
    assert r["verdict"] == "reproduced" and "apart" in r["why"], r["why"]
    r = judged(slow_bbr=False)         # the loss-based ones a tenth as fast: the claim is turned round
    assert r["verdict"] == "differs" and "ends on bbr" in r["why"] and "the costlier" in r["why"], r["why"]

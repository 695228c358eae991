"""Labs 3 and 4 on the host: their experiment files, the module-parameter handling and the
comparisons of labs/kmodlab.py, and the scorecard command's table."""

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

KIT = Path(__file__).resolve().parents[2]
for p in (KIT / "notebooks", KIT / "labs"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import kmodlab as KM  # noqa: E402
from cclab import scorecard  # noqa: E402


def files(lab, mode):
    return sorted((KIT / "labs" / lab / mode).glob("*.toml"))


@pytest.mark.parametrize("mode", ["quick", "full"])
def test_lab3_loss_sweep_on_the_data_direction_only(mode):
    exps = [KM.load_experiment(p)[0] for p in files("lab3", mode)]
    sweep = [e for e in exps if e.name.startswith("lab3-loss")]
    assert sorted(e.link.down.loss for e in sweep) == [0, 1, 2, 5, 10, 20]
    for e in exps:
        assert e.link.up.loss == 0, f"{e.name}: loss on the ACK direction"
        assert "spline:spline_mode" in e.measure.events
        assert any(f.cca == "spline" for f in e.flows)
    for e in sweep:
        n = {c: sum(f.cca == c for f in e.flows) for c in ("spline", "bbr")}
        assert n["spline"] >= 2 and n["bbr"] >= 2, "two connections per algorithm and run: intervals"


@pytest.mark.parametrize("lab,mode", [(l, m) for l in ("lab3", "lab4") for m in ("quick", "full")])
def test_one_algorithm_per_sender_pair_and_idle_pings_first(lab, mode):
    for p in files(lab, mode):
        e, _ = KM.load_experiment(p)
        by_pair = {}
        for f in e.flows:
            by_pair.setdefault(f.pair, set()).add(f.cca)
        assert all(len(c) == 1 for c in by_pair.values()), f"{p.name}: {by_pair}"
        assert min(f.start for f in e.flows) >= 2.0, f"{p.name}: no idle pings before the first flow"


def test_share_runs_start_spline_and_its_competitor_together():
    for mode in ("quick", "full"):
        e, _ = KM.load_experiment(KIT / "labs" / "lab3" / mode / "share.toml")
        starts = {}
        for f in e.flows:
            starts.setdefault(f.start, []).append(f.cca)
        assert sorted(sorted(v) for v in starts.values()) == [["bbr", "spline"], ["cubic", "spline"]]


def test_quick_modes_fit_the_budget():
    # flow time plus about 15 s of set-up per run in the software-emulated VM, within 5 min
    for lab in ("lab3", "lab4"):
        total = sum(KM.load_experiment(p)[0].planned_length() + 15 for p in files(lab, "quick"))
        assert total < 270, f"{lab}: about {total:.0f} s of runs in quick mode"


def test_lab4_files_ask_for_the_four_ways_to_leave_slow_start_and_both_sensitivities():
    for mode in ("quick", "full"):
        seen = set()
        for p in files("lab4", mode):
            e, lab = KM.load_experiment(p)
            params = lab["module_params"]
            run = SimpleNamespace(manifest={"module_params": {
                m: {k: str(v) for k, v in ps.items()} for m, ps in params.items()}})
            seen |= {(e.link.name if hasattr(e.link, "name") else p.stem.split("-")[0], KM.variant(run, f.cca))
                     for f in e.flows}
            assert "search:search_exit" in e.measure.events
        variants = {v for _, v in seen}
        assert {"cubic-hystart", "cubic-nohystart", "search", "search-t250-w35", "search-t350-w20", "bbr"} <= variants


def test_geo_buffer_is_deep_enough_for_search_to_beat_loss():
    for mode in ("quick", "full"):
        e, _ = KM.load_experiment(KIT / "labs" / "lab4" / mode / "geo-default.toml")
        assert e.link.down.buffer == "8bdp" and e.link.down.delay + e.link.up.delay == pytest.approx(0.6)


@pytest.fixture
def fake_sys(tmp_path, monkeypatch):
    for mod, ps in {"tcp_cubic": {"hystart": "1"}, "tcp_search": {"thresh": "350", "search": "Y"}}.items():
        d = tmp_path / mod / "parameters"
        d.mkdir(parents=True)
        for k, v in ps.items():
            (d / k).write_text(v + "\n")
    monkeypatch.setattr(KM, "PARAMS_DIR", tmp_path)
    return tmp_path


def test_params_are_set_read_back_and_restored(fake_sys):
    before = KM.set_params({"tcp_cubic": {"hystart": 0}, "tcp_search": {"thresh": 250, "search": True}})
    assert before == {"tcp_cubic": {"hystart": "1"}, "tcp_search": {"thresh": "350", "search": "Y"}}
    assert (fake_sys / "tcp_search/parameters/thresh").read_text() == "250"
    assert KM.read_params({"tcp_cubic": {"hystart": 0}}) == {"tcp_cubic": {"hystart": "0"}}
    KM.restore_params(before)
    assert KM.read_params({"tcp_search": {"thresh": 0}}) == {"tcp_search": {"thresh": "350"}}


def test_a_missing_parameter_is_an_error(fake_sys):
    with pytest.raises(RuntimeError, match="window_factor"):
        KM.set_params({"tcp_search": {"window_factor": 20}})


def test_variant_names():
    def run(params):
        return SimpleNamespace(manifest={"module_params": params})
    assert KM.variant(run({"tcp_cubic": {"hystart": "0"}}), "cubic") == "cubic-nohystart"
    assert KM.variant(run({"tcp_cubic": {"hystart": "1"}}), "cubic") == "cubic-hystart"
    assert KM.variant(run({}), "cubic") == "cubic"
    assert KM.variant(run({"tcp_search": {"thresh": "350", "window_factor": "35"}}), "search") == "search"
    assert KM.variant(run({"tcp_search": {"thresh": "250", "window_factor": "35"}}), "search") == "search-t250-w35"
    assert KM.variant(run({}), "bbr") == "bbr"


def test_compare_needs_separated_intervals():
    assert KM.compare([10, 10.2, 9.8], [5, 5.1, 4.9]) == "higher"
    assert KM.compare([5, 5.1, 4.9], [10, 10.2, 9.8]) == "lower"
    assert KM.compare([10, 12], [11, 13]) == "inconclusive"
    assert KM.compare([10], [1, 2, 3]) == "inconclusive"
    assert KM.compare([10, math.nan, 11], [1, 1.1]) == "higher"
    # two connections each, far apart but noisy: the t interval with 1 degree of freedom is wide
    assert KM.compare([10, 14], [6, 9]) == "inconclusive"


def test_verify_reports_a_parameter_the_run_did_not_have(tmp_path):
    base = tmp_path / "lab4"
    run = base / "lab4-geo-params" / "x-1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "status": "complete", "spec": {"lab": {"module_params": {"tcp_cubic": {"hystart": 0}}},
                                       "measure": {"events": ["search:search_exit"]}},
        "module_params": {"tcp_cubic": {"hystart": "1"}}}))
    (base / "record.json").write_text(json.dumps({"lab": "lab4", "mode": "quick",
                                                  "runs": {"lab4-geo-params/x-1": {}}}))
    bad = KM.verify("lab4", tmp_path)
    assert any("tcp_cubic.hystart asked 0, the run had 1" in b for b in bad), bad
    assert any("search.csv is missing" in b for b in bad), bad


def test_scorecard_without_lab_runs_says_not_run_and_scores_lab5(tmp_path):
    out = tmp_path / "sc.md"
    assert scorecard.main(["--results", str(tmp_path / "none"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| Spline downloads faster than BBR on a clean path |" in text
    assert text.count("not run") >= 8
    lossy = next(l for l in text.splitlines() if l.startswith("| Under 10 % loss"))
    assert "| reproduced |" in lossy and "bbr:" in lossy          # the recorded live log (lab 5)
    assert "not reproducible here" in text and "## Provenance" in text


def test_scorecard_refuses_a_record_under_the_wrong_mode(tmp_path):
    d = tmp_path / "quick" / "lab3"
    d.mkdir(parents=True)
    (d / "record.json").write_text(json.dumps({"lab": "lab3", "mode": "full", "runs": {}}))
    with pytest.raises(SystemExit, match="full-mode record"):
        scorecard.main(["--results", str(tmp_path), "--out", str(tmp_path / "sc.md")])


def test_share_samples_and_claims_on_a_synthetic_sharing_run(tmp_path):
    from cclab.analysis import synthetic
    synthetic.make_run(tmp_path / "lab3" / "lab3-share" / "r-1", experiment="lab3-share",
                       ccas=("spline", "cubic"), shares=(0.3, 0.7), rate=20e6, duration=6)
    (tmp_path / "lab3" / "record.json").write_text(json.dumps(
        {"lab": "lab3", "mode": "quick", "runs": {"lab3-share/r-1": {}}}))
    s = KM.lab3_share_samples(tmp_path)
    assert len(s) >= 50 and set(s["competitor"]) == {"cubic"}
    share = s["spline_mbps"].sum() / (s["spline_mbps"].sum() + s["other_mbps"].sum())
    assert share == pytest.approx(0.3, abs=0.01)
    c = KM.lab3_claims(tmp_path)
    assert c.loc["goodput_vs_cubic", "measured"] == "lower" and c.loc["goodput_vs_cubic", "verdict"] == "holds"
    assert c.loc["goodput_0", "verdict"] == "inconclusive" and c.loc["goodput_0", "n_spline"] == 0


def test_provenance_reads_the_engine_tc_record_per_device(tmp_path):
    # the engine records {node: {dev: {"qdisc": [...], "class": [...]}}}; plots' footers use it
    from cclab.analysis.data import RunData
    (tmp_path / "manifest.json").write_text(json.dumps({"tc": {"cc-r1": {"r1-eth2": {
        "qdisc": [{"kind": "htb"}, {"kind": "netem"}], "class": ["class htb 5:1 root"]}}}}))
    assert RunData(tmp_path).qdisc_kinds() == "r1-eth2: htb>netem"


@pytest.mark.parametrize("lab,solution_line", [
    ("lab3", 'retrans = loss_flows.groupby(["loss", "cca"])["retrans_rate"].mean()'),
    ("lab4", 'retrans = exits.groupby(["profile", "variant"])["retransmits"].mean()')])
def test_student_version_has_no_solutions_or_hidden_tests(lab, solution_line, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("otter")
    sys.path.insert(0, str(KIT))
    from grading import build
    master = nbformat.read(KIT / "notebooks" / f"{lab}.ipynb", as_version=4)
    assert any(solution_line in c.source for c in master.cells)
    stu = build.build(lab, tmp_path / "dist") / "student"
    text = (stu / f"{lab}.ipynb").read_text()
    assert solution_line not in text and "# HIDDEN" not in text and "load_fresh" not in text
    assert "grader.check" in text and (stu / "kmodlab.py").is_file()
    for cell in nbformat.read(stu / f"{lab}.ipynb", as_version=4).cells:
        if cell.cell_type == "code":
            compile(cell.source, "<student cell>", "exec")

"""The instructor pipeline on the host: build the student notebook and the autograder from the
lab 1 master, then grade sample submissions made of fixture results (grading/fixtures.py: run
folders laid out as the engine writes them, with a manifest, fidelity verdict and hash record).
No experiment runs here."""

import csv
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("otter")
nbformat = pytest.importorskip("nbformat")

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))
sys.path.insert(0, str(KIT / "notebooks"))

from grading import build, fixtures, grade  # noqa: E402

FULL = 16.0          # lab 1's autograded points


@pytest.fixture(scope="module")
def dist(lab1_dist):
    return lab1_dist


def edited_notebook(src: Path, dest: Path, edits: dict) -> Path:
    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        for old, new in edits.items():
            if cell.cell_type == "code" and old in cell.source:
                cell.source = cell.source.replace(old, new)
    nbformat.write(nb, dest)
    return dest


def rows(out: Path) -> dict:
    with open(out / "gradebook.csv") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def test_student_version_has_no_solutions_or_hidden_tests(dist):
    text = dist["student"].read_text()
    assert "w_max * (1 - 0.7) / 0.4" not in text          # a solution line
    assert "_labkit_check" not in text                      # hidden tests load labkit afresh
    assert "grader.check" in text and "q1" in text
    assert (dist["student"].parent / "labkit.py").is_file()
    assert (dist["student"].parent / "reference-lab1.csv").is_file()


def test_three_submissions_give_the_expected_gradebook(dist, tmp_path):
    subs = tmp_path / "subs"
    fixtures.lab1_submission(subs / "good", dist["master"], real=1)
    partly = edited_notebook(dist["master"], tmp_path / "partly.ipynb", {
        "K = (w_max * (1 - 0.7) / 0.4) ** (1 / 3)": "K = 2 * (w_max * (1 - 0.7) / 0.4) ** (1 / 3)",
        "vegas_queue = float(": "vegas_queue = 1.0 + float("})
    fixtures.lab1_submission(subs / "partly", partly, real=2)
    # fabricated: the results' numbers edited after the run, the answers computed from them
    fixtures.lab1_submission(subs / "fabricated", dist["master"], tamper="edit", real=3)
    # typed: real results, but a number typed into the answer
    typed = edited_notebook(dist["master"], tmp_path / "typed.ipynb", {
        "bbr_startup_s = float(": "bbr_startup_s = 0.1 + 0 * float("})
    fixtures.lab1_submission(subs / "typed", typed, real=4)
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=60)
    r = rows(out)
    assert float(r["good"]["score"]) == FULL and r["good"]["status"] == "graded"
    # partly wrong: the hidden recompute tests of q5 and q7 fail, so those answers score 0 (their
    # public type checks pass and weigh nothing); everything else passes
    assert float(r["partly"]["q5"]) == 0 and float(r["partly"]["q7"]) == 0
    for q in ("q1", "q2", "q3", "q8"):
        assert r["partly"][q] == r["good"][q], q
    assert float(r["partly"]["score"]) == FULL - 3 - 3
    # fabricated: every hidden test refuses the edited results: no measured answer scores
    assert float(r["fabricated"]["score"]) == 0
    for q in ("q1", "q2", "q3", "q5", "q7", "q8"):
        assert float(r["fabricated"][q]) < float(r["good"][q]), q
    assert float(r["typed"]["q8"]) == 0 and float(r["typed"]["score"]) == FULL - 2
    fb = (out / "feedback" / "fabricated.txt").read_text()
    assert "changed after the run" in fb                # the public check says why
    assert "_labkit_check" not in fb                    # hidden tests stay hidden
    with open(out / "canvas.csv") as f:
        canvas = list(csv.reader(f))
    assert canvas[0][:4] == ["Student", "ID", "SIS User ID", "Section"]
    assert canvas[1][0].strip() == "Points Possible" and float(canvas[1][4]) == FULL
    with open(out / "gradescope.csv") as f:
        gs = {x["SID"]: x for x in csv.DictReader(f)}
    assert float(gs["good"]["Score"]) == FULL


def test_runaway_submissions_are_stopped_and_graded_zero(dist, tmp_path):
    subs = tmp_path / "subs"
    fixtures.lab1_submission(subs / "a-good", dist["master"], real=5)
    loop = edited_notebook(dist["master"], tmp_path / "loop.ipynb",
                           {"LAB = \"lab1\"": "LAB = \"lab1\"\nwhile True:\n    pass"})
    fixtures.lab1_submission(subs / "b-loop", loop, real=6)
    hog = edited_notebook(dist["master"], tmp_path / "hog.ipynb",
                          {"LAB = \"lab1\"": "LAB = \"lab1\"\n_x = []\nwhile True:\n    _x.append(bytearray(50_000_000))"})
    fixtures.lab1_submission(subs / "c-hog", hog, real=7)
    (subs / "d-empty").mkdir()
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=10, memory_mb=1024)
    r = rows(out)
    assert float(r["a-good"]["score"]) == FULL
    assert r["b-loop"]["status"] == "timeout" and float(r["b-loop"]["score"]) == 0
    assert "time limit" in r["b-loop"]["reason"]
    assert r["c-hog"]["status"] == "memory" and float(r["c-hog"]["score"]) == 0
    assert "memory limit" in r["c-hog"]["reason"]
    assert float(r["d-empty"]["score"]) == 0 and r["d-empty"]["reason"]
    assert float(r["d-empty"]["possible"]) == FULL


def test_student_version_unfilled_fails_the_answers_without_crashing(dist, tmp_path, monkeypatch):
    from nbclient import NotebookClient
    work = tmp_path / "stu"
    shutil.copytree(dist["student"].parent, work)
    fixtures.lab1_results(work)
    monkeypatch.setenv("CCLAB_REPLAY", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(work / "lab1.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if "grader.export" not in c.source]
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(work)}}).execute()   # raises on a crash
    out_text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                       for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "q1 results:" in out_text and "results look real" in out_text
    # graded: every answer test fails, only the checks of the (real) run pass
    subs = tmp_path / "subs"
    fixtures.lab1_submission(subs / "unfilled", dist["student"], real=8)
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=1, timeout=60)
    r = rows(out)["unfilled"]
    assert r["status"] == "graded"
    for q in ("q3", "q5", "q8"):                       # answer-only questions
        assert float(r[q]) == 0, q
    assert float(r["score"]) < FULL / 3


def test_otter_engine_agrees_on_a_good_submission(dist, tmp_path):
    subs = tmp_path / "subs"
    fixtures.lab1_submission(subs / "good", dist["master"], real=9)
    fixtures.lab1_submission(subs / "fabricated", dist["master"], tamper="edit", real=10)
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=120, engine="otter")
    fast = tmp_path / "fast"
    grade.grade_all(subs, dist["zip"], fast, jobs=2, timeout=60)
    a, b = rows(out), rows(fast)
    assert float(a["good"]["score"]) == FULL and a["good"]["score"] == b["good"]["score"]
    # otter splits a question's points over its cases, so its passing type checks still earn part
    # of a fabricated run's points; the fast engine's weighting gives a measured answer nothing
    # unless its recomputation passes
    assert float(b["fabricated"]["score"]) == 0 < float(a["fabricated"]["score"]) < FULL / 2


def test_reference_bands_come_from_reference_runs(tmp_path, capsys):
    from grading import make_reference
    for i in range(2):
        fixtures.lab1_results(tmp_path / f"ref{i}")
    refs = [str(tmp_path / "ref0" / "submission"), str(tmp_path / "ref1" / "submission")]
    # two runs are too few for a band by default: refused in one line, nothing printed
    assert make_reference.main(["lab1", *refs]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and len(cap.err.strip().splitlines()) == 1
    assert "quick throughput_mbps wired/bbr: 2" in cap.err and "--min-samples 3" in cap.err
    assert make_reference.main(["lab1", *refs, "--min-samples", "0"]) == 2
    capsys.readouterr()
    assert make_reference.main(["lab1", *refs, "--min-samples", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [l.split(",") for l in out if l.startswith("quick,")]
    keys = {(r[1], r[2]) for r in rows}
    assert ("throughput_mbps", "wired/bbr") in keys and ("vegas_queue_pkts", "wired/vegas") in keys
    for r in rows:
        assert float(r[3]) < float(r[4]) and r[5] == "2"
    # edited results are refused as a reference
    fixtures.lab1_submission(tmp_path / "bad", KIT / "notebooks" / "lab1.ipynb", tamper="edit")
    assert make_reference.main(["lab1", str(tmp_path / "bad" / "submission")]) == 1
    capsys.readouterr()
    # a run whose own fidelity verdict failed gives no values; the folder's other runs still do
    import json
    import labkit
    root = tmp_path / "ref1" / "submission"
    wifi = next((root / "lab1" / "lab1-wifi").iterdir())
    v = json.loads((wifi / "fidelity.json").read_text())
    (wifi / "fidelity.json").write_text(json.dumps(dict(v, ok=False, reasons=["packet_spacing: 1.2 x"])))
    labkit.write_record("lab1", "quick", labkit.run_dirs("lab1", root), root)
    assert make_reference.main(["lab1", str(tmp_path / "ref0" / "submission"), str(root),
                                "--min-samples", "1"]) == 0
    out = capsys.readouterr().out
    n = {tuple(r.split(",")[1:3]): r.split(",")[5] for r in out.splitlines() if r.startswith("quick,")}
    assert n[("throughput_mbps", "wifi/bbr")] == "1" and n[("throughput_mbps", "wired/bbr")] == "2"
    assert "left out lab1-wifi" in out and "kernel 6.1.0-28-amd64" in out


def test_verify_names_what_is_wrong(tmp_path, monkeypatch):
    import json
    import labkit
    fixtures.lab1_results(tmp_path)
    root = tmp_path / "submission"
    assert labkit.verify("lab1", root) == []
    run = next((root / "lab1" / "lab1-wired").iterdir())
    v = json.loads((run / "fidelity.json").read_text())
    v["ok"] = False
    v["reasons"] = ["rate_ceiling: departures above the configured rate"]
    (run / "fidelity.json").write_text(json.dumps(v))
    bad = labkit.verify("lab1", root)
    assert any("hash differs" in b for b in bad) and any("fidelity verdict not OK" in b for b in bad)
    # rewriting the record too still leaves the run's own inconsistencies
    flows = run / "flows.csv"
    flows.write_text(flows.read_text().replace(",bbr,", ",cubic,", 1))
    labkit.write_record("lab1", "quick", [d for d in (root / "lab1").glob("*/*") if d.is_dir()], root)
    bad = labkit.verify("lab1", root)
    assert any("spec asked for" in b or "not verified" in b for b in bad), bad
    (root / "lab1" / "record.json").unlink()
    assert "run the experiment cell" in labkit.verify("lab1", root)[0]


def _tuner_support():
    sys.path.insert(0, str(KIT / "labs" / "lab5"))
    import tuner_support
    return tuner_support


def test_build_packages_lab5_and_its_autograder_grades_it(tmp_path):
    """grading/build.py bundles lab 5's support files under the names its notebook expects; the
    reference learner goes to the autograder only.  The master (with solutions) then gets full
    marks from grade.py and the unfilled student version does not."""
    import zipfile
    lab5 = KIT / "labs" / "lab5"
    d = build.build("lab5", tmp_path / "dist")
    stu = d / "student"
    assert (stu / "tuner_support.py").read_bytes() == (lab5 / "tuner_support.py").read_bytes()
    assert (stu / "lab5-connections.csv").read_bytes() == (lab5 / "connections.csv").read_bytes()
    assert not (stu / "lab5_reference.py").exists()
    assert "_lab5_ref" not in (stu / "lab5.ipynb").read_text()       # hidden tests stripped
    with zipfile.ZipFile(build.autograder_zip(d)) as z:
        names = set(z.namelist())
        assert z.read("files/lab5_reference.py") == (lab5 / "reference.py").read_bytes()
    assert {"files/tuner_support.py", "files/lab5-connections.csv"} <= names
    subs = tmp_path / "subs"
    # one that tries for points without the work: the reference learner borrowed from beside
    # the notebook (the grader put it there for the hidden tests, until only the grading
    # process got it)
    borrowed = _with_last_cell(stu / "lab5.ipynb", tmp_path / "borrowed.ipynb",
                               "from lab5_reference import cost, update, choose, should_switch")
    # and one that names, as its arms, an object of a class reached through the support module's
    # attributes (a mapping whose key decoder launches a process): the grader must not build it
    ran = tmp_path / "ran.txt"
    gadget = _with_last_cell(stu / "lab5.ipynb", tmp_path / "gadget.ipynb",
                             GADGET.replace("MARKER", repr(str(ran))))
    for who, nb in (("master", d / "autograder" / "lab5.ipynb"), ("unfilled", stu / "lab5.ipynb"),
                    ("borrowed", borrowed), ("gadget", gadget)):
        live = subs / who / "submission" / "lab5"
        live.mkdir(parents=True)
        shutil.copy(nb, subs / who / "lab5.ipynb")
        if who == "master":     # one copy only: the same live log in two submissions is a duplicate
            shutil.copy(lab5 / "live-example.csv", live / "live.csv")   # a live quick-mode log from the VM
            _tuner_support().record_live(live / "live.csv", live)       # its hash, as run_live records it
    out = tmp_path / "graded"
    grade.grade_all(subs, build.autograder_zip(d), out, jobs=2, timeout=300)
    r = rows(out)
    assert r["master"]["status"] == "graded", r["master"]["reason"]
    assert float(r["master"]["possible"]) == 17
    # every question gets full marks: the hidden tests compare the notebook's functions with the
    # reference learner (lab5_reference.py, autograder only) by calling them in the student's
    # process with the arguments they choose, and read the recorded connections
    for q, full in (("q1", 3), ("q2", 2), ("q3", 3), ("q4", 1), ("q5", 3), ("q6", 2), ("q7", 3)):
        assert float(r["master"][q]) == full, (q, r["master"])
    assert float(r["master"]["score"]) == 17
    assert r["unfilled"]["status"] == "graded"
    assert float(r["unfilled"]["score"]) < float(r["master"]["score"]) / 2, r["unfilled"]
    fb = (out / "feedback" / "borrowed.txt").read_text()
    for q in ("q1", "q2", "q3", "q4"):          # the student's process has no reference learner
        assert float(r["borrowed"][q]) == 0, (q, fb)
    assert "No module named 'lab5_reference'" in fb
    assert not ran.exists(), ran.read_text()


# Classes of the notebook named as others: os._Environ and subprocess.Popen, "in" tuner_support.
# Iterating such an arms object would call Popen on each key.
GADGET = """
import sys as _sys
class _Launcher: pass
_Launcher.__module__, _Launcher.__qualname__ = "tuner_support", "subprocess.Popen"
class _Env: pass
_Env.__module__, _Env.__qualname__ = "tuner_support", "os._Environ"
ARMS = _Env()
ARMS._data = {(_sys.executable, "-c", "open(MARKER, 'w').write('the grader ran it')"): 0}
ARMS.decodekey = _Launcher
choose = lambda costs, rng: "bbr"       # not the arms: the tests are what iterates them
"""


def _with_last_cell(src: Path, dest: Path, code: str) -> Path:
    import nbformat
    nb = nbformat.read(src, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(code))
    nbformat.write(nb, dest)
    return dest


def test_lab_fidelity_thresholds_follow_the_link():
    """labkit counts a bottleneck as backlogged only beyond what netem's delay line (at twice the
    rate), jitter and aggregation slots hold; the profiles' own numbers give the packet counts."""
    import labkit
    wire = 1514 * 8
    wired = {"down": {"rate": 50e6, "delay": 0.020}, "up": {"rate": 50e6, "delay": 0.020}}
    assert labkit.run_thresholds(wired)["backlog_min_pkts"] == -(-50e6 * 0.020 // wire)
    wifi = {"down": {"rate": 50e6, "delay": 0.003, "jitter": 0.002, "slot": {"max": 0.010}},
            "up": {"rate": 20e6, "delay": 0.003, "jitter": 0.002, "slot": {"max": 0.010}}}
    assert labkit.run_thresholds(wifi)["backlog_min_pkts"] == -(-50e6 * 0.015 // wire)      # 62
    leo = {"down": {"rate": 80e6, "delay": 0.015}, "up": {"rate": 10e6, "delay": 0.015},
           "dynamics": {"down_rate": [50e6, 100e6], "up_rate": [5e6, 15e6], "delay": [0.010, 0.025]}}
    assert labkit.run_thresholds(leo)["backlog_min_pkts"] == -(-100e6 * 0.025 // wire)      # 207
    # a link without delay keeps the lab's default, and every other threshold is LAB_THRESHOLDS'
    bare = labkit.run_thresholds({"down": {"rate": 1e9}})
    assert bare == labkit.LAB_THRESHOLDS or bare == dict(labkit.LAB_THRESHOLDS, backlog_min_pkts=2.0)
    assert {k: v for k, v in labkit.run_thresholds(wired).items() if k != "backlog_min_pkts"} == \
        {k: v for k, v in labkit.LAB_THRESHOLDS.items() if k != "backlog_min_pkts"}


def test_vegas_and_idle_rtt_read_what_the_run_recorded(tmp_path):
    """Vegas' own Diff comes from its vegas:(...) block, the queue from the smoothed RTT, both over
    the flow's last 4 s; the idle RTT from the pings before the first flow, not those after."""
    import labkit
    fixtures.lab1_results(tmp_path)
    root = tmp_path / "submission"
    cw = labkit.cwnd_series("lab1", "lab1-wired", "vegas", root)
    vi = labkit.vegas_info(cw)
    assert (vi["enabled"] == 1).all() and (vi["base_us"] == 40000).all()
    last = cw["t"] > cw["t"].max() - 4
    want = (cw["cwnd"] * (vi["minrtt_us"] - vi["base_us"]) / vi["base_us"])[last].median()
    assert labkit.vegas_diff("lab1", "lab1-wired", root) == pytest.approx(want)
    assert 0 < labkit.vegas_diff("lab1", "lab1-wired", root) < labkit.vegas_queue("lab1", "lab1-wired", root)
    idle = labkit.idle_rtt_ms("lab1", root)
    assert all(v == pytest.approx(40.05) for v in idle[idle.index.get_level_values(0) == "lab1-wired"])
    assert labkit.idle_pings("lab1", root)["t"].max() < fixtures.LEAD


def test_each_repetition_of_a_reference_run_is_one_sample(tmp_path, capsys):
    """A full-mode folder repeats its experiments: make_reference takes one value per repetition
    (run folders ending in -1, -2, ...), so one folder gives several samples per band."""
    import labkit
    from grading import make_reference
    root = tmp_path / "ref" / "submission"
    base = fixtures.lab1_results(tmp_path / "ref")
    for exp in ("lab1-wired", "lab1-wifi"):
        first = next((base / exp).iterdir())
        shutil.copytree(first, first.with_name(first.name[:-1] + "2"))
    labkit.write_record("lab1", "full", sorted(d for e in base.iterdir() if e.is_dir() for d in e.iterdir()),
                        root)
    assert make_reference.main(["lab1", str(root), "--min-samples", "2"]) == 0
    rows = [r.split(",") for r in capsys.readouterr().out.splitlines() if r.startswith("full,")]
    assert rows and all(r[5] == "2" for r in rows), rows
    # a run known to be disturbed can be left out, with the reason in the header
    second = next(d for d in (base / "lab1-wired").iterdir() if d.name.endswith("-2"))
    rel = f"lab1-wired/{second.name}"
    assert make_reference.main(["lab1", str(root), "--leave-out", f"{rel}=the host was busy",
                                "--min-samples", "1"]) == 0
    out = capsys.readouterr().out
    n = {r.split(",")[2]: r.split(",")[5] for r in out.splitlines() if r.startswith("full,throughput")}
    assert n["wired/bbr"] == "1" and n["wifi/bbr"] == "2", n
    assert f"left out {rel} (the host was busy)" in out
    assert make_reference.main(["lab1", str(root), "--leave-out", "lab1-wired/nothing=x"]) == 2
    assert make_reference.main(["lab1", str(root), "--leave-out", rel]) == 2
    assert "no such run" in capsys.readouterr().err


def test_left_out_flows_take_their_time_with_them():
    """A lab that runs a subset of its algorithms (lab 2 runs the ones the VM offers) does not
    wait through the left-out flows' slots when the file's flows run one after the other."""
    import labkit
    seq = [{"cca": c, "start": f"{2 + 183 * i}s", "duration": "180s"} for i, c in enumerate("abcd")]
    assert labkit.close_gaps(seq, [0, 1, 2, 3]) == [f["start"] for f in seq]
    assert labkit.close_gaps(seq, [1, 3]) == ["2s", "185s"]
    assert labkit.close_gaps(seq, [3]) == ["2s"]
    # overlapping flows share the link on purpose; size-limited ones have no planned end
    shared = [{"cca": "bbr", "duration": "180s"}, {"cca": "cubic", "start": "1s", "duration": "179s"},
              {"cca": "reno", "start": "5s", "duration": "10s"}]
    assert labkit.close_gaps(shared, [0, 2]) == ["0s", "5s"]
    sized = [{"cca": "a", "start": "0s", "bytes": "1MB"}, {"cca": "b", "start": "30s", "duration": "5s"}]
    assert labkit.close_gaps(sized, [1]) == ["30s"]
    exp = labkit._load_experiment(KIT / "labs" / "lab2" / "full" / "p1.toml", ["bbr", "cubic"])
    assert [(f.cca, f.start, f.duration) for f in exp.flows] == [("bbr", 2.0, 180.0), ("cubic", 185.0, 180.0)]
    assert exp.override["pairs"] == 2 and exp.given["flow"][1]["start"] == "185s"

"""The instructor's workflow around the grader, on the host: a roster, late submissions, regrading
one student, the manual-grading packet and its merge, the LMS files, the Gradescope autograder
run in a clean folder laid out as Gradescope does; and the grader's own cross-checks against a
copied classmate submission, a fixture-made run, numbers edited with the hashes recomputed, and
an edited lab 5 live log.  Genuine runs are a lab 1 quick-mode run from the lab VM
(grading/fixtures.py real_lab1_results)."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("otter")
nbformat = pytest.importorskip("nbformat")
pd = pytest.importorskip("pandas")

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))
sys.path.insert(0, str(KIT / "notebooks"))

from grading import build, fastgrade, fixtures, grade, gradescope, integrity, manual  # noqa: E402

FULL = 16.0          # lab 1's autograded points
MEASURED = ("q1", "q2", "q3", "q5", "q7", "q8")      # lab 1's questions with hidden checks
MANUAL = manual.manual_questions("lab1")             # the free-text questions, from the point table


@pytest.fixture(scope="module")
def dist(lab1_dist):
    return lab1_dist


def rows(out: Path) -> dict:
    with open(out / "gradebook.csv") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def answered(src: Path, dest: Path, text: str) -> Path:
    """The notebook with every free-text answer cell filled with `text` and the question's name."""
    nb = nbformat.read(src, as_version=4)
    k = 0
    for c in nb.cells:
        if "otter_answer_cell" in c.metadata.get("tags", []) and c.cell_type == "markdown":
            k += 1
            c.source = f"{text} (answer {k})"
    nbformat.write(nb, dest)
    return dest


def one_line_exit(excinfo) -> str:
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


def test_roster_late_regrade_manual_packet_and_lms_files(dist, tmp_path):
    subs = tmp_path / "subs"
    m = answered(dist["master"], tmp_path / "a.ipynb", "<script>alert(1)</script> Reno halves")
    fixtures.lab1_submission(subs / "alice", m, real=1)
    fixtures.lab1_submission(subs / "bob", dist["master"], real=2)
    fixtures.lab1_submission(subs / "dora", dist["student"], real=3)     # not on the roster, unfilled
    # handed in times: alice's zip after her deadline; bob's folder carries file times from
    # before the class deadline, which say nothing (unzip restores the times the zip carried)
    shutil.make_archive(str(subs / "alice"), "zip", root_dir=subs / "alice")
    shutil.rmtree(subs / "alice")
    os.utime(subs / "alice.zip", (1_800_000_000, 1_800_000_000))
    for p in [subs / "bob", *(subs / "bob").rglob("*")]:
        os.utime(p, (1_700_000_000, 1_700_000_000))
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name,email,sis_id,section,deadline\n"
                      "alice,Alice A,alice@example.edu,1001,L1,2027-01-15T00:00:00Z\n"
                      "bob,Bob B,bob@example.edu,1002,L2,\n"
                      "carol,Carol C,carol@example.edu,1003,L1,\n")
    out = tmp_path / "graded"

    # malformed input: one line, nothing graded
    bad = tmp_path / "bad.csv"
    bad.write_text("name,email\nAlice,a@x\n")
    with pytest.raises(SystemExit) as e:
        grade.grade_all(subs, dist["zip"], out, roster=bad)
    assert "no 'student' column" in one_line_exit(e)
    bad.write_text("student,name\nalice,A\nalice,B\n")
    with pytest.raises(SystemExit) as e:
        grade.grade_all(subs, dist["zip"], out, roster=bad)
    assert "listed twice" in one_line_exit(e)
    bad.write_text("student,deadline\nalice,next tuesday\n")
    with pytest.raises(SystemExit) as e:
        grade.grade_all(subs, dist["zip"], out, roster=bad)
    assert "is not a date" in one_line_exit(e)
    assert not (out / "gradebook.csv").exists()
    r = subprocess.run([sys.executable, str(KIT / "grading" / "grade.py"), str(subs), "--autograder",
                        str(dist["zip"]), "--out", str(out), "--roster", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr

    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=60, roster=roster,
                    deadline="2027-06-01T00:00:00Z")
    g = rows(out)
    assert set(g) == {"alice", "bob", "carol", "dora"}
    assert float(g["alice"]["score"]) == FULL and g["alice"]["name"] == "Alice A"
    for q in MEASURED:
        assert float(g["alice"][q]) > 0, q                      # a column per question
    assert g["carol"]["status"] == "missing" and float(g["carol"]["score"]) == 0
    assert "not on the roster" in g["dora"]["flags"]
    report = (out / "report.txt").read_text()
    assert "missing: carol" in report and "unknown: dora" in report
    # late: alice's own deadline (2027-01-15) against her files' time (2027-01-15T08:00Z)
    assert float(g["alice"]["late_hours"]) == pytest.approx(8.0, abs=0.01)
    assert g["alice"]["submitted"] == "2027-01-15T08:00:00Z"
    assert g["bob"]["late_hours"] == g["bob"]["submitted"] == ""   # a folder: no hand-in time
    assert "no hand-in time: bob (a folder" in report and "no hand-in time: alice" not in report
    assert "after the deadline" in (out / "feedback" / "alice.txt").read_text()
    with open(out / "canvas.csv") as f:
        canvas = list(csv.reader(f))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "Section", "lab1 (autograded)"]
    assert ["Alice A", "", "1001", "L1", "16"] in canvas
    with open(out / "gradescope.csv") as f:
        gs = {x["SID"]: x for x in csv.DictReader(f)}
    assert gs["bob"]["Email"] == "bob@example.edu" and float(gs["bob"]["Score"]) == FULL

    # the packet: one HTML file per manual question, anonymised, escaped
    d = manual.packet(subs, "lab1", out)
    assert sorted(MANUAL) == sorted(["q4", "q6", "q7b", "q9", "q10"])
    assert sorted(p.stem for p in d.glob("*.html")) == sorted(MANUAL)
    key = dict(csv.reader(open(d / "key.csv")))
    aid = manual.anon_id("lab1", "alice")
    assert key[aid] == "alice" and aid == manual.anon_id("lab1", "alice")     # stable
    q4 = (d / "q4.html").read_text()
    assert aid in q4 and "alice" not in q4 and "&lt;script&gt;" in q4 and "<script>" not in q4
    assert "Reno halves (answer 1)" in q4 and "Reno halves (answer 5)" in (d / "q10.html").read_text()
    assert "(no answer)" in q4                                   # dora left it empty
    tmpl = list(csv.reader(open(d / "scores-template.csv")))
    assert tmpl[0] == ["id"] + list(MANUAL) and tmpl[1][0] == grade.POINTS_ROW
    assert [float(x) for x in tmpl[1][1:]] == list(MANUAL.values())

    # merge: scores by id; a second merge with blanks keeps what the first merged
    s1 = tmp_path / "s1.csv"
    s1.write_text(f"id,q4,q6\n{aid},2,1.5\n{manual.anon_id('lab1', 'bob')},1,\n")
    manual.merge(s1, out)
    g = rows(out)
    assert float(g["alice"]["q4"]) == 2 and float(g["alice"]["manual"]) == 3.5
    assert float(g["alice"]["score"]) == FULL + 3.5
    assert float(g["alice"]["possible"]) == FULL + sum(MANUAL.values())
    s2 = tmp_path / "s2.csv"
    s2.write_text(f"id,q4,q6,q9\n{aid},,,2\n")
    manual.merge(s2, out)
    g = rows(out)
    assert float(g["alice"]["q4"]) == 2 and float(g["alice"]["q9"]) == 2 and float(g["bob"]["q4"]) == 1
    assert f"q9: 2/{MANUAL['q9']:g} (graded by hand)" in (out / "feedback" / "alice.txt").read_text()
    before = (out / grade.MANUAL).read_text()
    for text, why in ((f"id,q4\n{aid},3\n", "outside 0..2"), (f"id,q4\nA000000,1\n", "unknown id"),
                      (f"id,q4\n{aid},two\n", "not a number"), (f"id,q99\n{aid},1\n", "not a manual question"),
                      ("who,q4\nx,1\n", "no 'id' or 'student' column")):
        s1.write_text(text)
        with pytest.raises(SystemExit) as e:
            manual.merge(s1, out)
        assert why in one_line_exit(e)
    assert (out / grade.MANUAL).read_text() == before              # a refused merge writes nothing

    # regrading one student: bob's notebook now has a wrong answer; the other rows stay as they were
    alice_before = rows(out)["alice"]
    nb = nbformat.read(subs / "bob" / "lab1.ipynb", as_version=4)
    for c in nb.cells:
        if c.cell_type == "code" and "K = (w_max * (1 - 0.7) / 0.4) ** (1 / 3)" in c.source:
            c.source = c.source.replace("K = (w_max", "K = 2 * (w_max")
    nbformat.write(nb, subs / "bob" / "lab1.ipynb")
    done = grade.grade_all(subs, dist["zip"], out, jobs=1, timeout=60, only=["bob"])
    assert [r.student for r in done] == ["bob"]
    g = rows(out)
    assert float(g["bob"]["q5"]) == 0 and float(g["bob"]["q4"]) == 1        # manual score kept
    assert g["alice"] == alice_before
    assert g["carol"]["status"] == "missing" and "not on the roster" in g["dora"]["flags"]
    with pytest.raises(SystemExit) as e:
        grade.grade_all(subs, dist["zip"], out, only=["zed"])
    assert "no submission named 'zed'" in one_line_exit(e)
    # the whole class again: the roster, the deadline and every manual score are kept
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=60)
    g = rows(out)
    assert float(g["alice"]["q4"]) == 2 and float(g["bob"]["q4"]) == 1 and float(g["alice"]["q9"]) == 2
    assert g["bob"]["late_hours"] == "" and float(g["alice"]["late_hours"]) == pytest.approx(8.0, abs=0.01)
    assert g["carol"]["status"] == "missing" and float(g["bob"]["q5"]) == 0


GRADER_PYTHON = Path(os.environ.get("CCLAB_GRADER_PYTHON", "/opt/cclab-grader/bin/python"))


def run_gradescope(gs_zip: Path, root: Path, notebook: Path, results: Path | None = None,
                   as_zip: bool = False) -> dict:
    """Lay out `root` as Gradescope does (source/, submission/, results/), run run_autograder."""
    (root / "source").mkdir(parents=True)
    (root / "results").mkdir()
    with zipfile.ZipFile(gs_zip) as z:
        z.extractall(root / "source")
    for name in ("run_autograder", "setup.sh"):
        os.chmod(root / "source" / name, 0o755)
    sub = root / "submission"
    sub.mkdir()
    work = root.parent / (root.name + "-work")
    work.mkdir()
    shutil.copy(notebook, work / "lab1.ipynb")
    if results is not None:
        shutil.copytree(results, work / "submission")
    if as_zip:
        with zipfile.ZipFile(sub / "lab1_2026.zip", "w") as z:
            for p in work.rglob("*"):
                z.write(p, p.relative_to(work))
    else:
        shutil.copytree(work, sub, dirs_exist_ok=True)
    env = dict(os.environ, CCLAB_AUTOGRADER_ROOT=str(root), CCLAB_TIMEOUT="120")
    if os.geteuid() == 0:
        # as Gradescope runs it, as root: each submission runs as nobody, with the python3 the
        # script finds first, which must be one nobody can run (make grader-venv)
        assert GRADER_PYTHON.is_file(), f"no {GRADER_PYTHON}: make grader-venv"
        env["PATH"] = f"{GRADER_PYTHON.parent}:{env.get('PATH', '/usr/bin:/bin')}"
    r = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                       capture_output=True, text=True, timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_gradescope_autograder_runs_in_a_clean_directory(dist, tmp_path):
    gs_zip = gradescope.build(dist["zip"], tmp_path / "lab1-gradescope.zip")
    with zipfile.ZipFile(gs_zip) as z:
        names = set(z.namelist())
        req = z.read("requirements.txt").decode()
        assert z.getinfo("run_autograder").external_attr >> 16 & 0o111
    assert {"setup.sh", "run_autograder", "requirements.txt", "autograder.zip", "run_cclab.py",
            "grading/fastgrade.py", "grading/grade.py", "grading/answers.py", "grading/integrity.py"} <= names
    assert "otter-grader==" in req and "pandas==" in req
    real = fixtures.real_lab1_results(tmp_path / "real")
    res = run_gradescope(gs_zip, tmp_path / "gs1", dist["master"], real, as_zip=True)
    assert res["score"] == FULL, res["output"]
    assert {t["name"]: t["max_score"] for t in res["tests"]} == {"q1": 3, "q2": 3, "q3": 2, "q5": 3,
                                                                 "q7": 3, "q8": 2}
    assert all(t["score"] == t["max_score"] for t in res["tests"])
    # the same trusted grader: a fixture-made run scores 0 for its measured answers, and says why
    fake = fixtures.lab1_results(tmp_path / "fake").parent
    res = run_gradescope(gs_zip, tmp_path / "gs2", dist["master"], fake)
    assert res["score"] == 0
    assert "a synthetic run" in res["output"]
    assert all("cross-checks" in t["output"] for t in res["tests"]), res["tests"]


def scale_flow(sub: Path, experiment: str, cca: str, k: float, intervals: bool, ss: bool = False) -> None:
    """Multiply one flow's bytes by k in iperf.csv, flows.csv, the manifest and iperf3's JSON end
    sums (and its intervals, and ss.csv's bytes_acked, when asked), then rewrite the record with
    the public labkit.write_record: numbers edited with the hashes recomputed."""
    import labkit
    d = next((sub / "lab1" / experiment).iterdir())
    flows = pd.read_csv(d / "flows.csv")
    n = int(flows.loc[flows["cca"] == cca, "flow"].iloc[0])
    for c in ("sent_bytes", "received_bytes"):
        flows.loc[flows["flow"] == n, c] = (flows.loc[flows["flow"] == n, c] * k).round().astype("int64")
    flows.loc[flows["flow"] == n, "throughput_bps"] *= k
    flows.to_csv(d / "flows.csv", index=False)
    ip = pd.read_csv(d / "iperf.csv")
    sel = ip["flow"] == n
    ip.loc[sel, "bytes"] = (ip.loc[sel, "bytes"] * k).round().astype("int64")
    ip.loc[sel, "bits_per_second"] *= k
    ip.to_csv(d / "iperf.csv", index=False)
    m = json.loads((d / "manifest.json").read_text())
    for f in m["flows"]:
        if f["flow"] == n:
            row = flows[flows["flow"] == n].iloc[0]
            f.update(sent_bytes=int(row["sent_bytes"]), received_bytes=int(row["received_bytes"]),
                     throughput_bps=float(row["throughput_bps"]))
    (d / "manifest.json").write_text(json.dumps(m, indent=2))
    for raw in (d / "raw" / f"iperf-{n}.json", d / "raw" / f"iperf-server-{n}.json"):
        j = json.loads(raw.read_text())
        for key in ("sum_sent", "sum_received"):
            if key in j.get("end", {}):
                j["end"][key]["bytes"] = int(flows.loc[flows["flow"] == n,
                                                       "sent_bytes" if key == "sum_sent" else "received_bytes"].iloc[0])
        if intervals:
            for iv in j.get("intervals", []):
                iv["sum"]["bytes"] = int(round(iv["sum"]["bytes"] * k))
                for s in iv.get("streams", []):
                    s["bytes"] = int(round(s["bytes"] * k))
        raw.write_text(json.dumps(j))
    if ss:
        t = pd.read_csv(d / "ss.csv", low_memory=False)
        t.loc[t["flow"] == n, "bytes_acked"] = (t.loc[t["flow"] == n, "bytes_acked"] * k).round()
        t.to_csv(d / "ss.csv", index=False)
    labkit.write_record("lab1", "quick", labkit.run_dirs("lab1", sub), sub)


def test_copied_synthetic_and_rehashed_submissions_score_zero_for_what_they_fake(dist, tmp_path):
    import labkit
    subs = tmp_path / "subs"
    m = dist["master"]
    fixtures.lab1_submission(subs / "genuine", m, real=1)
    fixtures.lab1_submission(subs / "honest", m, real=2)
    # a classmate's submission/ folder handed in whole with one's own notebook
    fixtures.lab1_submission(subs / "copier", m, results_from=subs / "honest" / "submission")
    # a run grading/fixtures.py synthesised (it passes every hidden check)
    fixtures.lab1_submission(subs / "synthetic", m)
    assert labkit.verify("lab1", subs / "synthetic" / "submission") == []
    # numbers edited in the CSVs and iperf3's end sums, the record rewritten: labkit's own checks
    # pass; iperf3's per-interval counts give it away
    fixtures.lab1_submission(subs / "rehashed", m, real=3)
    scale_flow(subs / "rehashed" / "submission", "lab1-wired", "bbr", 1.04, intervals=False)
    assert labkit.verify("lab1", subs / "rehashed" / "submission") == []
    # ... and the intervals edited too: the sockets' own acknowledged bytes give it away
    fixtures.lab1_submission(subs / "deeper", m, real=4)
    scale_flow(subs / "deeper" / "submission", "lab1-wifi", "vegas", 1.3, intervals=True)
    assert labkit.verify("lab1", subs / "deeper" / "submission") == []
    # ... and ss.csv too: the link's physics (a flow faster than the link) gives it away
    fixtures.lab1_submission(subs / "physics", m, real=5)
    scale_flow(subs / "physics" / "submission", "lab1-wired", "reno", 1.25, intervals=True, ss=True)
    assert labkit.verify("lab1", subs / "physics" / "submission") == []
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=60, duplicates="zero")
    g = rows(out)
    fb = {s: (out / "feedback" / f"{s}.txt").read_text() for s in g}
    assert float(g["genuine"]["score"]) == FULL and not g["genuine"]["flags"], fb["genuine"]

    # copied, with --zero-duplicates: both named, both flagged for review, their measured answers 0
    for a, b in (("copier", "honest"), ("honest", "copier")):
        assert f"duplicate raw logs: the same raw files as {b}" in g[a]["flags"]
        assert float(g[a]["score"]) == 0 and all(float(g[a][q]) == 0 for q in MEASURED)
        assert "q5: now 0 -- raw logs identical to another student's (for review)" in fb[a]
        assert b not in fb[a]                       # the feedback does not name the classmate
    assert "copier shares raw files with honest" in (out / "report.txt").read_text()
    # the default policy flags both for review and leaves the scores to the instructor
    settings, graded = grade.load_state(out)
    assert settings["duplicates"] == "zero"
    grade.write_outputs(list(graded.values()), out, "lab1")
    flagged = rows(out)
    for a, b in (("copier", "honest"), ("honest", "copier")):
        assert f"duplicate raw logs: the same raw files as {b}" in flagged[a]["flags"]
        assert float(flagged[a]["score"]) == FULL

    expect = {"synthetic": "is not iperf3's output (no intervals, no timestamp): a synthetic run",
              "rehashed": "iperf.csv's sender bytes",
              "deeper": "the sockets acknowledged",
              "physics": "Mbit/s on a 50 Mbit/s link"}
    for s, why in expect.items():
        assert float(g[s]["score"]) == 0 and all(float(g[s][q]) == 0 for q in MEASURED), (s, fb[s])
        assert why in g[s]["flags"], (s, g[s]["flags"])
        assert f"flagged: results fail the cross-checks: " in fb[s]
        line = next(l for l in fb[s].splitlines() if l.startswith("q5: 0/3"))
        assert "the results fail the grader's cross-checks" in line and why in line, line
    # the cross-checks alone, on the untouched genuine run: nothing
    assert integrity.problems(fixtures.real_lab1_results(tmp_path / "again"), "lab1") == []


def test_the_link_bound_counts_the_receivers_own_span(tmp_path):
    """A receiver counts until the client's last control message reaches it, which loss can hold
    back: a lab 3 run in CI received 2.6 s of data for a 2 s flow.  Bytes that fit the link over
    the receiver's own span (iperf3's sum_received seconds) are physics, not a fake."""
    import labkit  # noqa: F401 -- scale_flow rewrites the record with it
    sub = fixtures.real_lab1_results(tmp_path / "a")
    scale_flow(sub, "lab1-wired", "reno", 1.25, intervals=True, ss=True)
    d = next((sub / "lab1" / "lab1-wired").iterdir())
    flows = pd.read_csv(d / "flows.csv")
    n = int(flows.loc[flows["cca"] == "reno", "flow"].iloc[0])
    assert any(p.startswith(f"flow {n}: ") and "Mbit/s on a 50 Mbit/s link" in p
               for p in integrity.cross_check(d)), integrity.cross_check(d)
    raw = d / "raw" / f"iperf-{n}.json"
    j = json.loads(raw.read_text())
    span = float(flows.loc[flows["flow"] == n, "t_end"].iloc[0] - flows.loc[flows["flow"] == n, "t_start"].iloc[0])
    j["end"]["sum_received"]["seconds"] = 1.3 * span
    raw.write_text(json.dumps(j))
    # the link bound no longer fires; the flow's own congestion windows still give it away
    bad = integrity.cross_check(d)
    assert not any("Mbit/s on a" in p for p in bad), bad
    assert bad == [p for p in bad if p.startswith(f"flow {n}: its congestion windows")], bad


def test_bytes_in_flight_at_the_last_socket_sample_count_for_the_receiver(tmp_path):
    """A receiver that closes with a hole in its data resets the sender's socket, whose last
    sample may come before the ACKs of the bytes read last (a lab 3 run at 20 % loss in CI: 59 %
    of the received bytes acknowledged at the last sample, 28 segments in flight).  What was in
    flight then counts for the receiver; without it the same shortfall is flagged."""
    sub = fixtures.real_lab1_results(tmp_path / "a")
    d = next((sub / "lab1" / "lab1-wired").iterdir())
    got = pd.read_csv(d / "flows.csv").set_index("flow")["received_bytes"]
    ss = pd.read_csv(d / "ss.csv", low_memory=False)
    n = int(ss["flow"].iloc[0])
    mine = ss["flow"] == n
    ss.loc[mine, "bytes_acked"] = ss.loc[mine, "bytes_acked"].clip(upper=0.59 * got[n]).round()
    last = ss[mine].sort_values("t").index[-1]
    ss.loc[last, "unacked"] = int(0.41 * got[n] / 1448) + 1
    ss.to_csv(d / "ss.csv", index=False)
    assert not any("the sockets acknowledged" in p for p in integrity.cross_check(d)), \
        integrity.cross_check(d)
    ss.loc[last, "unacked"] = 0
    ss.to_csv(d / "ss.csv", index=False)
    assert any(p.startswith(f"flow {n}: the sockets acknowledged") for p in integrity.cross_check(d))


def test_lab5_live_log_is_on_record_and_an_edit_scores_zero(tmp_path):
    sys.path.insert(0, str(KIT / "labs" / "lab5"))
    import tuner_support as ts
    lab5 = KIT / "labs" / "lab5"
    d = build.build("lab5", tmp_path / "dist")
    master = d / "autograder" / "lab5.ipynb"
    live = pd.read_csv(lab5 / "live-example.csv", dtype={"key": str})
    subs = tmp_path / "subs"

    def sub(name: str, log: pd.DataFrame, record: bool = True, after=None) -> Path:
        f = subs / name / "submission" / "lab5"
        f.mkdir(parents=True)
        shutil.copy(master, subs / name / "lab5.ipynb")
        if record:
            ts.record_live(log, f)                  # as run_live records it, before the notebook writes it
        log.to_csv(f / "live.csv", index=False)
        if after is not None:
            after(f / "live.csv")
        return f

    sub("genuine", live)
    # edited after the run: a lossy connection's delivery rate raised
    def bump(p):
        t = pd.read_csv(p, dtype={"key": str})
        t.loc[t.index[1], "delivery_rate"] = int(t.loc[t.index[1], "delivery_rate"]) * 3
        t.to_csv(p, index=False)
    sub("edited", live.iloc[:-2], after=bump)
    # edited, and put on record again with the public record_live: the recomputation catches it
    rec = live.iloc[:-4].copy()
    i = rec.index[rec["acting"].astype(bool)][3]
    rec.loc[i, "delivery_rate"] = int(rec.loc[i, "delivery_rate"]) * 3       # one connection's rate
    sub("rerecorded", rec)
    sub("unrecorded", live.iloc[:-6], record=False)
    out = tmp_path / "graded"
    grade.grade_all(subs, build.autograder_zip(d), out, jobs=2, timeout=300)
    g = rows(out)
    fb = {s: (out / "feedback" / f"{s}.txt").read_text() for s in g}
    assert float(g["genuine"]["score"]) == 17 and not g["genuine"]["flags"], fb["genuine"]
    assert "live.csv: changed after the run" in g["edited"]["flags"]
    assert "live.csv is not in the record" in g["unrecorded"]["flags"] or \
        "no submission/lab5/record.json" in g["unrecorded"]["flags"]
    for s in ("edited", "unrecorded", "rerecorded"):
        assert float(g[s]["q7"]) == 0, (s, fb[s])
        assert float(g[s]["q1"]) == 3                  # answers from the recorded connections stand
    assert "q7: 0/3 -- the results fail the grader's cross-checks: live.csv: changed" in fb["edited"]
    assert "q7: 0/3 -- the answer does not match its recomputation" in fb["rerecorded"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops each submission to another user")
def test_grading_refuses_when_the_sandbox_user_cannot_run_the_python(dist, tmp_path):
    """As root, with a Python `nobody` cannot run (here: reached through a folder only root may
    enter), grade.py grades nothing and says why in one line, rather than running the
    submissions' code as root; --user '' runs them as root on purpose."""
    hidden = tmp_path / "root-only"
    hidden.mkdir(mode=0o700)
    (hidden / "python3").symlink_to(sys.executable)
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    shutil.copy(dist["master"], subs / "alice" / "lab1.ipynb")
    out = tmp_path / "out"
    argv = [str(hidden / "python3"), str(KIT / "grading" / "grade.py"), str(subs),
            "--autograder", str(dist["zip"]), "--out", str(out)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "user nobody cannot run" in r.stderr and "make grader-venv" in r.stderr, r.stderr
    assert not out.exists(), list(out.iterdir())           # nothing half-made
    r = subprocess.run(argv + ["--user", ""], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with open(out / "gradebook.csv") as f:
        assert [row["student"] for row in csv.DictReader(f)] == ["alice"]


# A first cell that leaves a process behind, out of its session (double fork, setsid), and
# reports it and its own uid in the feedback.
DAEMON = """
import os as _os, time as _time
_r, _w = _os.pipe()
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.write(_w, str(_os.getpid()).encode())
        _time.sleep(120)
    _os._exit(0)
raise RuntimeError(f"DAEMON p{int(_os.read(_r, 32))} u{_os.getuid()}")
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_each_submission_runs_as_its_own_uid_and_leaves_nothing_running(dist, tmp_path):
    """As an instructor runs it (root, the grader's Python): each submission's notebook runs as
    a uid of its own, and a process it detached from its session dies with its job."""
    if os.geteuid() != 0:
        pytest.skip("the sandbox users are root's to give (grade.py as another user runs as that user)")
    assert GRADER_PYTHON.is_file(), f"no {GRADER_PYTHON}: make grader-venv"
    subs = tmp_path / "subs"
    for who, real in (("first", 1), ("second", 2)):
        nb = nbformat.read(dist["master"], as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(DAEMON))
        fixtures.lab1_submission(subs / who, dist["master"], real=real)
        nbformat.write(nb, subs / who / "lab1.ipynb")
    out = tmp_path / "graded"
    r = subprocess.run([str(GRADER_PYTHON), str(KIT / "grading" / "grade.py"), str(subs), "--autograder",
                        str(dist["zip"]), "--out", str(out), "--jobs", "2", "--timeout", "120"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[-2000:]
    seen = {}
    for who in ("first", "second"):
        fb = (out / "feedback" / f"{who}.txt").read_text()
        m = re.search(r"DAEMON p(\d+) u(\d+)", fb)
        assert m, fb
        seen[who] = int(m.group(1)), int(m.group(2))
        assert float(rows(out)[who]["score"]) == FULL, fb
    uids = {u for _, u in seen.values()}
    assert len(uids) == 2 and min(uids) >= fastgrade.JOB_UIDS, seen
    assert not any(_alive(p) for p, _ in seen.values()), seen


# An instructor's test, added to lab 1's autograder: it runs in the grading process, and passes
# only where that process is a uid of its own (fastgrade.GRADER_UIDS), in its run's group
# (fastgrade.grader_gid, which the tests belong to) and no other, working in its own copy of the
# results.
WHO_CASE = (">>> import os\n"
            f">>> assert os.getuid() >= {fastgrade.GRADER_UIDS}, os.getuid()\n"
            f">>> _block = (os.getuid() - {fastgrade.GRADER_UIDS}) // {fastgrade.UID_BLOCK}\n"
            f">>> assert os.getgid() == {fastgrade.GRADER_UIDS} + (_block + 1) * {fastgrade.UID_BLOCK} - 1, os.getgid()\n"
            ">>> assert os.getgroups() == [], os.getgroups()\n"
            ">>> assert os.path.isdir('submission/lab1') and os.stat('.').st_uid == os.getuid()\n")
WHO_TEST = ("OK_FORMAT = True\n\ntest = " + repr({
    "name": "qwho", "points": 1,
    "suites": [{"cases": [{"code": WHO_CASE, "hidden": True, "locked": False}],
                "scored": True, "setup": "", "teardown": "", "type": "doctest"}]}) + "\n")
# A last cell that looks for the grader's folders and tries to read a hidden test in each.
TESTS = """
import glob as _g
_dirs, _got = _g.glob('/tmp/grade-*/autograder'), 0
for _d in _dirs:
    try:
        open(_d + '/tests/q1.py').read()
        _got += 1
    except OSError:
        pass
raise RuntimeError(f"TESTS {len(_dirs)} {_got}")
"""


def test_the_grading_process_runs_as_a_uid_of_its_own_and_only_it_reads_the_tests(dist, tmp_path):
    """As an instructor runs it (root, the grader's Python): the process that decodes and tests
    a submission's answers is not root but a uid of its own, and the notebook, which finds the
    grader's folder in /tmp, cannot read the hidden tests there."""
    if os.geteuid() != 0:
        pytest.skip("the grading uids are root's to give")
    assert GRADER_PYTHON.is_file(), f"no {GRADER_PYTHON}: make grader-venv"
    ag = tmp_path / "lab1-autograder.zip"
    shutil.copy(dist["zip"], ag)
    with zipfile.ZipFile(ag, "a") as z:
        z.writestr("tests/qwho.py", WHO_TEST)
    subs = tmp_path / "subs"
    nb = nbformat.read(dist["master"], as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(TESTS))
    fixtures.lab1_submission(subs / "alice", dist["master"], real=1)
    nbformat.write(nb, subs / "alice" / "lab1.ipynb")
    out = tmp_path / "graded"
    r = subprocess.run([str(GRADER_PYTHON), str(KIT / "grading" / "grade.py"), str(subs), "--autograder",
                        str(ag), "--out", str(out), "--timeout", "120"],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, TMPDIR="/tmp"))
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[-2000:]
    fb = (out / "feedback" / "alice.txt").read_text()
    row = rows(out)["alice"]
    assert float(row["qwho"]) == 1 and float(row["score"]) == FULL + 1, fb
    m = re.search(r"TESTS (\d+) (\d+)", fb)
    assert m and int(m.group(1)) >= 1 and int(m.group(2)) == 0, fb


# The first notebook leaves a set-user-ID copy of `id` in /tmp (as its own uid); the second runs
# it and reports the ids it ran with.
PLANT = """
import ctypes as _ct, os as _os, shutil as _sh
for _p in ("{path}", "{deep}"):
    _sh.copy("/usr/bin/id", _p)
    _os.chmod(_p, 0o4755)
_seg = _ct.CDLL(None).shmget({key}, 1 << 20, 0o1600)     # IPC_CREAT | 0600, never removed
raise RuntimeError(f"PLANTED u{{_os.getuid()}} s{{_seg}}")
"""
USE = """
import os as _os, subprocess as _sp
_r = _sp.run(["{deep}"], capture_output=True, text=True)
raise RuntimeError(f"RAN u{{_os.getuid()}} TOP {{_os.path.exists('{path}')}} [{{_r.stdout.strip()}}]")
"""


def test_a_file_one_job_leaves_gives_the_next_no_uid_and_is_removed(dist, tmp_path):
    """As an instructor runs it: what a job leaves at the top of /tmp is gone when the next job
    starts; a set-user-ID file it leaves deeper than the grader looks (in world-writable folders
    nested four deep) runs, for the next, as the next's own uid (no process of a job gains a
    privilege); a shared memory segment it leaves dies with it (its own IPC namespace)."""
    if os.geteuid() != 0:
        pytest.skip("the grading uids are root's to give")
    if os.statvfs("/tmp").f_flag & os.ST_NOSUID:
        pytest.skip("/tmp is nosuid here: a set-user-ID file there gives nothing anyway")
    assert GRADER_PYTHON.is_file(), f"no {GRADER_PYTHON}: make grader-venv"
    path = f"/tmp/cclab-plant-{os.getpid()}"
    nest = Path(f"/tmp/cclab-plant-dir-{os.getpid()}")
    (nest / "1" / "2" / "3").mkdir(parents=True)
    for d in (nest, nest / "1", nest / "1" / "2", nest / "1" / "2" / "3"):
        os.chmod(d, 0o1777)
    deep = str(nest / "1" / "2" / "3" / "id")
    key = 0x5C1AB000 + os.getpid() % 4096

    def segments() -> list[int]:
        with open("/proc/sysvipc/shm") as f:
            return [int(line.split()[0]) for line in f.readlines()[1:]]
    subs = tmp_path / "subs"
    for who, cell in (("a_plant", PLANT), ("b_use", USE)):
        nb = nbformat.read(dist["master"], as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(cell.format(path=path, deep=deep, key=key)))
        fixtures.lab1_submission(subs / who, dist["master"], real=1 if who == "a_plant" else 2)
        nbformat.write(nb, subs / who / "lab1.ipynb")
    out = tmp_path / "graded"
    try:
        r = subprocess.run([str(GRADER_PYTHON), str(KIT / "grading" / "grade.py"), str(subs),
                            "--autograder", str(dist["zip"]), "--out", str(out), "--jobs", "1",
                            "--timeout", "120"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[-2000:]
        planted = (out / "feedback" / "a_plant.txt").read_text()
        used = (out / "feedback" / "b_use.txt").read_text()
        assert re.search(r"PLANTED u\d+ s\d+", planted), planted      # the segment was made
        assert key not in segments(), "the notebook's shared memory segment outlived it"
        m = re.search(r"RAN u(\d+) TOP (\w+) \[uid=(\d+)\S* gid=\d+\S*(?: euid=(\d+))?", used)
        assert m, used
        assert m.group(1) == m.group(3) and m.group(4) is None, used      # its own uid only
        assert m.group(2) == "False", used      # the top one went when the first job ended
        assert not os.path.lexists(path), "the planted file outlived the run"
    finally:
        if os.path.lexists(path):
            os.unlink(path)
        shutil.rmtree(nest, ignore_errors=True)


def test_each_run_takes_a_block_of_uids_no_other_run_holds(tmp_path):
    base, lock = fastgrade.claim_uids(tmp_path / "locks")
    other, lock2 = fastgrade.claim_uids(tmp_path / "locks")
    assert base != other and 0 <= base < fastgrade.UID_BLOCK * fastgrade.UID_BLOCKS
    assert base % fastgrade.UID_BLOCK == 0 and fastgrade.JOB_UIDS + base + fastgrade.UID_BLOCK <= fastgrade.GRADER_UIDS
    os.close(lock)
    os.close(lock2)
    taken = []
    for b in range(fastgrade.UID_BLOCKS - 1):       # all but one held: the last is the one left
        fd = os.open(tmp_path / "locks" / f"block-{b}", os.O_RDWR | os.O_CREAT)
        __import__("fcntl").flock(fd, __import__("fcntl").LOCK_EX)
        taken.append(fd)
    base, lock = fastgrade.claim_uids(tmp_path / "locks")
    assert base == (fastgrade.UID_BLOCKS - 1) * fastgrade.UID_BLOCK
    with pytest.raises(RuntimeError, match="held by another run"):
        fastgrade.claim_uids(tmp_path / "locks")
    for fd in taken + [lock]:
        os.close(fd)


def _as_uid(uid: int) -> int:
    """A child process that runs as uid (group nobody) until killed; its pid once it has that uid."""
    import time
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(uid)
            while True:
                time.sleep(1)
        finally:
            os._exit(1)
    deadline = time.monotonic() + 10
    while (fastgrade._proc_status(str(pid)).get("Uid", "").split("\t")[:1] != [str(uid)]
           and time.monotonic() < deadline):
        time.sleep(0.01)
    return pid


def test_what_a_killed_run_left_running_is_killed_by_the_next(tmp_path):
    """A grade.py killed outright leaves its jobs' processes and files; the next run's sweep
    (fastgrade.sweep_stale) kills the processes of every block no live run holds, and removes
    their files, nested ones too, and leaves a live run's block alone."""
    if os.geteuid() != 0:
        pytest.skip("the grading uids are root's to give")
    import signal
    import tempfile
    # the kit's own lock folder: a grade.py that another test worker runs meanwhile holds its
    # block there, so this sweep leaves that run's jobs alone
    locks = fastgrade.UID_LOCKS
    dead, dead_lock = fastgrade.claim_uids(locks)
    live, live_lock = fastgrade.claim_uids(locks)
    os.close(dead_lock)                 # the killed run's lock went with it
    stale_uid = fastgrade.job_uids(dead, 3)[0]
    live_uid = fastgrade.job_uids(live, 0)[1]
    shared = Path(tempfile.mkdtemp(prefix="cclab-sweep-", dir="/tmp"))
    os.chmod(shared, 0o1777)            # a folder everyone may write in, not the job's
    left = shared / "left-behind"
    left.write_text("x")
    os.chown(left, stale_uid, 65534)
    pids = []
    try:
        pids = [_as_uid(stale_uid), _as_uid(live_uid)]
        killed = fastgrade.sweep_stale(locks)
        assert killed == [stale_uid], killed
        assert os.waitpid(pids[0], 0)[1] == signal.SIGKILL
        assert fastgrade.live_processes_of(live_uid) == [pids[1]]
        # the block a run holds is its own to sweep: what runs there is a dead run's too
        assert fastgrade.sweep_stale(locks, mine=live // fastgrade.UID_BLOCK) == [live_uid]
        assert os.waitpid(pids[1], 0)[1] == signal.SIGKILL
        assert not left.exists(), "the killed run's file in a shared folder outlived the sweep"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(live_lock)
        shutil.rmtree(shared, ignore_errors=True)


def test_nested_leftovers_go_and_others_files_stay(tmp_path):
    """remove_files_of: a job's files at the top of a world-writable folder and in the
    world-writable folders of others within it go, down to `depth` levels; others' files, and
    folders that are not world-writable, are left as they are."""
    if os.geteuid() != 0:
        pytest.skip("the files belong to a grading uid: root's to give")
    job, nobody = fastgrade.JOB_UIDS + 5, 65534
    top = tmp_path / "tmp"
    c = top / "a" / "b" / "c"
    c.mkdir(parents=True)
    (top / "private").mkdir(mode=0o755)
    for d in (top / "a", top / "a" / "b", c, top / "private"):
        os.chown(d, nobody, nobody)
    for d in (top, top / "a", top / "a" / "b", c):
        os.chmod(d, 0o1777)
    def put(path, uid):
        path.write_text("x")
        os.chown(path, uid, nobody)
        return path
    go = [put(top / "f", job), put(top / "a" / "g", job), put(top / "a" / "b" / "h", job)]
    stay = [put(c / "too-deep", job), put(top / "a" / "b" / "theirs", nobody),
            put(top / "private" / "i", job)]
    gone = fastgrade.remove_files_of({job}, places=(str(top),), depth=3)
    assert sorted(gone) == sorted(map(str, go)), gone
    assert all(p.exists() for p in stay) and not any(p.exists() for p in go)


def test_two_runs_grading_processes_have_groups_of_their_own(tmp_path):
    a, la = fastgrade.claim_uids(tmp_path / "locks")
    b, lb = fastgrade.claim_uids(tmp_path / "locks")
    try:
        assert fastgrade.grader_gid(a) != fastgrade.grader_gid(b)
        for base in (a, b):
            g = fastgrade.grader_gid(base)
            assert fastgrade.block_of(g) == base // fastgrade.UID_BLOCK
            assert g not in {fastgrade.job_uids(base, n)[1] for n in range(fastgrade.UID_BLOCK - 1)}
    finally:
        os.close(la)
        os.close(lb)


def test_a_jobs_process_cannot_stop_the_helper_that_kills_it(tmp_path):
    """A process of a job's uid that sends SIGSTOP to everything it may, without pause, is still
    killed by kill_all_of, and kill_all_of returns: its helper is no process that uid may signal.
    (Its helper used to take the job's uid, and was stopped before it could kill.)"""
    if os.geteuid() != 0:
        pytest.skip("the grading uids are root's to give")
    import signal
    import time
    base, lock = fastgrade.claim_uids(tmp_path / "locks")
    uid = fastgrade.JOB_UIDS + base
    try:
        pid = os.fork()
        if pid == 0:                    # the job's process: stop every process it may, forever
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(uid)
                while True:
                    try:
                        os.kill(-1, signal.SIGSTOP)
                    except OSError:
                        pass
            finally:
                os._exit(1)
        deadline = time.monotonic() + 10
        while uid not in [int(_s.get("Uid", "0").split("\t")[0]) for _s in
                          [fastgrade._proc_status(str(pid))]] and time.monotonic() < deadline:
            time.sleep(0.01)
        r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(KIT)!r}); "
                            f"from grading import fastgrade; fastgrade.kill_all_of({uid}, "
                            f"fastgrade.killer_uid({base}))"], timeout=60)
        assert r.returncode == 0
        assert os.waitpid(pid, 0)[1] == signal.SIGKILL
        assert fastgrade.live_processes_of(uid) == []
    finally:
        os.close(lock)


def test_grading_refuses_where_a_notebook_could_read_the_class(dist, tmp_path):
    """As root: a submissions folder that other users may read (a notebook graded from it could
    take a classmate's code) is refused in one line, before anything is written; made private,
    the same folder is graded."""
    if os.geteuid() != 0:
        pytest.skip("only root grades as other users")
    assert GRADER_PYTHON.is_file(), f"no {GRADER_PYTHON}: make grader-venv"
    import tempfile
    shared = Path(tempfile.mkdtemp(prefix="cclab-shared-", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        subs = shared / "subs"
        fixtures.lab1_submission(subs / "alice", dist["master"], real=1)
        for p in [subs, *subs.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        out = tmp_path / "graded"
        argv = [str(GRADER_PYTHON), str(KIT / "grading" / "grade.py"), str(subs), "--autograder",
                str(dist["zip"]), "--out", str(out), "--timeout", "120"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"{subs} can be read by other users" in r.stderr and "classmates' submissions" in r.stderr
        assert not out.exists()
        os.chmod(subs, 0o711)           # not listed, but an entry may be opened by its name
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert r.returncode != 0 and f"{subs / 'alice'} can be read by other users" in r.stderr, r.stderr
        os.chmod(shared, 0o700)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert float(rows(out)["alice"]["score"]) == FULL
    finally:
        shutil.rmtree(shared, ignore_errors=True)

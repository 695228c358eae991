"""Per-student links: codes from a course secret, the notebook's enrolment, the link a run is made
on, and the grader's check that a submission's runs are on its own student's link.

The genuine run is lab 1 in quick mode from the lab VM, made as the lab user through the lab
command after enrolling as s1053 under this file's secret (tests/host/data/student-link-run.tar.xz;
its link: 85 % of the lab's rate, 80 % of its delay).  s1003's link under the same secret is
70 % and 120 %: slower and longer, so the link's physics give away s1053's run handed in as his.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))
sys.path.insert(0, str(KIT / "notebooks"))
sys.path.insert(0, str(KIT / "labs"))

import labkit  # noqa: E402
from grading import fixtures, links  # noqa: E402

SECRET = b"cclab host tests: not a course's secret"
RUN = KIT / "tests" / "host" / "data" / "student-link-run.tar.xz"
OWNER, OTHER = "s1053", "s1003"
MEASURED = ("q1", "q2", "q3", "q5", "q7", "q8")      # lab 1's questions with hidden checks


def secret_file(tmp_path) -> Path:
    p = tmp_path / "course.secret"
    p.write_text(SECRET.hex() + "\n")
    return p


def test_codes_are_the_students_own_and_the_secrets():
    ids = [f"s{n}" for n in range(1000, 1300)]
    codes = {s: links.code_for(SECRET, s) for s in ids}
    assert len(set(codes.values())) == len(ids)
    assert all(labkit.LINK_CODE.match(c) for c in codes.values())
    assert codes["s1000"] == links.code_for(SECRET, "s1000")                  # made again, the same
    assert links.code_for(SECRET + b"!", "s1000") != codes["s1000"]          # another course's
    # every factor of the grids is drawn, and nothing outside them
    for lab, (rates, delays) in labkit.LINK_LABS.items():
        got = [labkit.link_factors(lab, c) for c in codes.values()]
        assert {f["rate"] for f in got} == set(rates) and {f["delay"] for f in got} == set(delays)
    assert labkit.link_factors("lab2", codes["s1000"]) is None
    assert labkit.link_factors("lab5", codes["s1000"]) is None
    # the two students of the genuine run, as the module docstring says
    assert labkit.link_factors("lab1", links.code_for(SECRET, OWNER)) == {"rate": 0.85, "delay": 0.8}
    assert labkit.link_factors("lab1", links.code_for(SECRET, OTHER)) == {"rate": 0.7, "delay": 1.2}


def test_enrolment_is_checked_kept_once_and_refused_in_one_line(tmp_path):
    code = links.code_for(SECRET, "alice")
    assert "self-study" in labkit.describe_link("lab1", tmp_path)
    typo = code[:-1] + ("A" if code[-1] != "A" else "B")
    for sid, c, why in [("a b", code, "student ID 'a b'"), ("alice", "12345", "expected ten letters"),
                        ("alice", typo, "does not belong to student ID alice"),
                        ("bob", code, "does not belong to student ID bob")]:
        with pytest.raises(labkit.EnrolError) as e:
            labkit.enrol(sid, c, tmp_path)
        assert why in str(e.value) and "\n" not in str(e.value), e.value
    assert not (tmp_path / labkit.STUDENT_FILE).exists()
    assert labkit.enrol("alice", code.lower().replace("-", ""), tmp_path) == {"id": "alice", "code": code}
    assert labkit.enrol("alice", code, tmp_path) == {"id": "alice", "code": code}       # again: same
    bob = links.code_for(SECRET, "bob")
    with pytest.raises(labkit.EnrolError, match="already enrolled as alice"):
        labkit.enrol("bob", bob, tmp_path)
    line = labkit.describe_link("lab1", tmp_path)
    f = labkit.link_factors("lab1", code)
    assert f"{f['rate']:.0%} of its rate" in line and "alice" in line
    assert "its own link for everyone" in labkit.describe_link("lab2", tmp_path)
    (tmp_path / labkit.STUDENT_FILE).write_text('{"id": "alice", "code": "ABCDE-FGH2J"}')
    with pytest.raises(labkit.EnrolError, match="delete it and enrol again"):
        labkit.student(tmp_path)


def test_a_run_is_made_on_the_students_link():
    import kmodlab
    link = {"id": "x", "code": "ABCDE-FGH2J", "lab": "lab1", "rate": 0.7, "delay": 1.2}
    for name in ("wired", "wifi", "loss"):
        path = KIT / "labs" / "lab1" / "quick" / f"{name}.toml"
        own, mine = labkit._load_experiment(path), labkit._load_experiment(path, None, link)
        for d in ("down", "up"):
            a, b = getattr(own.link, d), getattr(mine.link, d)
            assert b.rate == pytest.approx(0.7 * a.rate) and b.delay == pytest.approx(1.2 * a.delay)
            assert (b.jitter, b.loss, b.buffer) == (a.jitter, a.loss, a.buffer)
        if isinstance(own.link.down.buffer, str):                        # BDPs follow the link
            want = own.link.down.buffer_packets(own.link.base_rtt) * 0.7 * 1.2
            assert mine.link.down.buffer_packets(mine.link.base_rtt) == pytest.approx(want, abs=1.5)
        assert mine.given["lab"]["student"] == link                     # what the manifest records
        assert [f.cca for f in mine.flows] == [f.cca for f in own.flows]
    g4 = dict(link, lab="lab4", delay=1.0)
    exp, lab = kmodlab.load_experiment(KIT / "labs" / "lab4" / "quick" / "geo-default.toml", g4)
    base, _ = kmodlab.load_experiment(KIT / "labs" / "lab4" / "quick" / "geo-default.toml")
    assert exp.link.down.rate == pytest.approx(0.7 * base.link.down.rate)
    assert exp.link.down.delay == base.link.down.delay
    assert lab["module_params"] and exp.given["lab"]["student"] == g4
    # lab 4's ACK-stall files keep the lab's link for everyone and record whose run it is
    for name in ("geo-stall-paper", "geo-stall-reset"):
        path = KIT / "labs" / "lab4" / "quick" / f"{name}.toml"
        exp, lab = kmodlab.load_experiment(path, g4)
        base, _ = kmodlab.load_experiment(path)
        assert lab["own_link"] and exp.hold and exp.rto_min == 5.0
        assert exp.link.down.rate == base.link.down.rate == 10e6
        assert exp.given["lab"]["student"] == dict(g4, own_link=True)
    bases = links._base_links("lab4", "quick")
    assert {n for n, b in bases.items() if b.own_link} == {"lab4-geo-stall-paper", "lab4-geo-stall-reset"}


def test_course_secret_and_codes_from_the_command_line(tmp_path):
    # as grading/README.md runs it: the script by its path, from the course's folder
    run = lambda *a: subprocess.run([sys.executable, str(KIT / "grading" / "links.py"), *a],
                                    cwd=tmp_path, capture_output=True, text=True, timeout=60)
    s = tmp_path / "course.secret"
    r = run("secret", str(s))
    assert r.returncode == 0 and (s.stat().st_mode & 0o777) == 0o600, r.stderr
    key = links.read_secret(s)
    r = run("secret", str(s))
    assert r.returncode != 0 and "keeps its secret" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert links.read_secret(s) == key                                  # kept, not replaced
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name\ns1,One\ns2,Two\n")
    r = run("codes", "--secret", str(s), "--roster", str(roster))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(r.stdout.splitlines()))
    assert [x["student"] for x in rows] == ["s1", "s2"]
    assert [x["code"] for x in rows] == [links.code_for(key, "s1"), links.code_for(key, "s2")]
    for text, why in [("not hex\n", "not hex"), ("abcd\n", "at least 16")]:
        s.chmod(0o600)
        s.write_text(text)
        r = run("codes", "--secret", str(s), "--roster", str(roster))
        assert r.returncode != 0 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1
    roster.write_text("student\nnot ok\n")
    s.write_text(key.hex())
    r = run("codes", "--secret", str(s), "--roster", str(roster))
    assert r.returncode != 0 and "cannot enrol" in r.stderr


def genuine(dest: Path, notebook: Path) -> Path:
    """A submission folder: the master notebook and the genuine run's submission/."""
    dest.mkdir(parents=True)
    shutil.copy(notebook, dest / "lab1.ipynb")
    with tarfile.open(RUN) as t:
        t.extractall(dest, filter="data")
    assert (dest / "submission" / "student.json").is_file()
    return dest / "submission"


def relabel(sub: Path, sid: str, link_too: bool) -> None:
    """Rewrite every run's student as `sid` (their code and factors) and, with link_too, the link
    the manifest says the run had; then the record again with the public labkit.write_record."""
    code = links.code_for(SECRET, sid)
    f = labkit.link_factors("lab1", code)
    (sub / "student.json").write_text(json.dumps({"id": sid, "code": code}))
    was = labkit.link_factors("lab1", links.code_for(SECRET, OWNER))
    for d in labkit.run_dirs("lab1", sub):
        m = json.loads((d / "manifest.json").read_text())
        m["spec"]["lab"]["student"] = {"id": sid, "code": code, "lab": "lab1", **f}
        if link_too:
            for side in ("down", "up"):
                p = m["profile"][side]
                p["rate"] = p["rate"] / was["rate"] * f["rate"]
                p["delay"] = p["delay"] / was["delay"] * f["delay"]
                m["spec"]["override"][side].update(rate=p["rate"], delay=p["delay"])
        (d / "manifest.json").write_text(json.dumps(m, indent=2))
    labkit.write_record("lab1", "quick", labkit.run_dirs("lab1", sub), sub)


def test_the_grader_takes_a_students_own_link_and_refuses_anothers(lab1_dist, tmp_path):
    pytest.importorskip("otter")
    from grading import grade
    master, key = lab1_dist["master"], secret_file(tmp_path)
    full = None
    # the genuine run, graded with the course's secret: full marks, nothing flagged
    sub = genuine(tmp_path / "one" / OWNER, master)
    assert labkit.verify("lab1", sub) == [] and links.problems(sub, "lab1", OWNER, SECRET) == []
    assert labkit.link_rate_factor("lab1", sub) == 0.85
    assert "s1053's link" in labkit.link("lab1", "lab1-wired", sub)
    grade.grade_all(tmp_path / "one", lab1_dist["zip"], tmp_path / "g1", jobs=1, timeout=120,
                    secret=key)
    with open(tmp_path / "g1" / "gradebook.csv") as f:
        row = next(csv.DictReader(f))
    full = float(row["possible"])
    assert row["student"] == OWNER and float(row["score"]) == full and not row["flags"], row

    # handed in by others: whole, relabelled, relabelled with the link edited, and a run made
    # without enrolling (self-study, the lab's own link)
    subs = tmp_path / "subs"
    genuine(subs / OTHER, master)                                       # s1053's, as s1003's
    relabel(genuine(subs / "s1004", master), "s1004", link_too=False)
    relabel(genuine(subs / "s1005", master), "s1005", link_too=True)
    fixtures.lab1_submission(subs / "s1006", master, real=1)
    out = tmp_path / "g2"
    grade.grade_all(subs, lab1_dist["zip"], out, jobs=2, timeout=120, secret=key)
    with open(out / "gradebook.csv") as f:
        g = {r["student"]: r for r in csv.DictReader(f)}
    expect = {OTHER: "made by another student",
              "s1004": "its down link ran at 17 Mbit/s and 16 ms; yours is 19 Mbit/s and 24 ms",
              "s1005": None,
              "s1006": "made without your link"}
    s5 = labkit.link_factors("lab1", links.code_for(SECRET, "s1005"))
    assert s5["rate"] < 0.85 / 1.05 or s5["delay"] > 0.8 / 0.97, s5   # so the physics can tell
    for s, why in expect.items():
        fb = (out / "feedback" / f"{s}.txt").read_text()
        assert float(g[s]["score"]) < full and all(float(g[s][q]) == 0 for q in MEASURED), (s, fb)
        flags = g[s]["flags"]
        if why is None:            # the manifest agrees with the code: the run's own logs do not
            assert "Mbit/s on a" in flags or "ms RTT on a path of" in flags, flags
        else:
            assert why in flags, (s, flags)
        assert OWNER not in fb, fb                              # the feedback names no classmate
    # the check is the course's choice: without --secret the self-study run grades full
    grade.grade_all(subs, lab1_dist["zip"], tmp_path / "g3", jobs=2, timeout=120, only=None)
    with open(tmp_path / "g3" / "gradebook.csv") as f:
        g3 = {r["student"]: r for r in csv.DictReader(f)}
    assert float(g3["s1006"]["score"]) == full, g3["s1006"]


def test_reference_bands_follow_the_students_rate(tmp_path):
    sub = genuine(tmp_path / "s", Path(__file__))           # any file stands in for the notebook
    lo, hi = labkit.band("lab1", "quick", "throughput_mbps", "wired/cubic")
    k = labkit.link_rate_factor("lab1", sub)
    assert k == 0.85
    # below the lab's band, inside the student's: accepted; above the student's: refused
    assert labkit.outside_bands("lab1", "throughput_mbps", pd.Series({"wired/cubic": lo * k * 1.01}), sub) == []
    assert labkit.outside_bands("lab1", "throughput_mbps", pd.Series({"wired/cubic": hi * k * 1.01}), sub)
    # a busy host lowers a throughput: down to half the lower edge it is the lab's setup still
    assert labkit.outside_bands("lab1", "throughput_mbps", pd.Series({"wired/cubic": lo * k * 0.51}), sub) == []
    assert labkit.outside_bands("lab1", "throughput_mbps", pd.Series({"wired/cubic": lo * k * 0.49}), sub)
    # Vegas' diff does not follow the rate; its queue over the smoothed RTT does
    dlo, _ = labkit.band("lab1", "quick", "vegas_diff_pkts", "wired/vegas")
    assert labkit.outside_bands("lab1", "vegas_diff_pkts", pd.Series({"wired/vegas": dlo * 0.99}), sub)
    qlo, _ = labkit.band("lab1", "quick", "vegas_queue_pkts", "wired/vegas")
    assert labkit.outside_bands("lab1", "vegas_queue_pkts", pd.Series({"wired/vegas": qlo * k * 1.01}), sub) == []


def test_reference_bands_from_runs_on_students_links(tmp_path, capsys):
    """grading/make_reference.py takes a run on a student's link on the lab's own scale (its
    throughputs divided by the rate factor), and --cover keeps every earlier band inside the new."""
    from grading import make_reference
    sub = genuine(tmp_path / "s", Path(__file__))
    g = labkit.goodput("lab1", sub)
    cubic = g[(g["experiment"] == "lab1-wired") & (g["cca"] == "cubic")]["mbps"].mean()
    assert make_reference.main(["lab1", str(sub), "--min-samples", "1", "--margin", "0"]) == 0
    rows = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out), comment="#")
    got = rows[(rows["metric"] == "throughput_mbps") & (rows["key"] == "wired/cubic")].iloc[0]
    assert got["lo"] == pytest.approx(cubic / 0.85, rel=1e-3) == got["hi"]
    q = rows[rows["metric"] == "vegas_diff_pkts"].iloc[0]
    assert q["lo"] == pytest.approx(labkit.vegas_diff("lab1", "lab1-wired", sub), rel=1e-3)
    q = rows[rows["metric"] == "vegas_queue_pkts"].iloc[0]
    assert q["lo"] == pytest.approx(labkit.vegas_queue("lab1", "lab1-wired", sub) / 0.85, rel=1e-3)
    ref = KIT / "labs" / "lab1" / "reference.csv"
    assert make_reference.main(["lab1", str(sub), "--min-samples", "1", "--cover", str(ref)]) == 0
    out = capsys.readouterr().out
    assert "also contains the band" in out
    new = pd.read_csv(__import__("io").StringIO(out), comment="#").set_index(["mode", "metric", "key"])
    old = pd.read_csv(ref, comment="#")
    for r in old[old["mode"] == "quick"].itertuples():
        n = new.loc[(r.mode, r.metric, r.key)]
        assert n["lo"] <= r.lo and n["hi"] >= r.hi and n["n"] == r.n + 1, (r, n)


def test_the_grader_expects_the_labs_own_link_where_the_file_keeps_it(tmp_path):
    """Lab 4's ACK-stall files keep the lab's link: a run of one of them on the lab's link,
    recorded as the student's with own_link, passes; the same run on a scaled link, or a
    geo-default run that claims own_link, is refused in one line."""
    secret = b"cclab host tests: not a course's secret"
    sid = "s2002"
    code = links.code_for(secret, sid)
    f = labkit.link_factors("lab4", code)
    assert f["rate"] < 0.95                        # this student's link is not the lab's own
    who = {"id": sid, "code": code, "lab": "lab4", **f}
    base = links._base_links("lab4", "quick")

    def run(rel, experiment, student, k):
        d = tmp_path / "submission" / "lab4" / rel
        d.mkdir(parents=True)
        prof = {n: {"rate": dd.rate * k, "delay": dd.delay} for n, dd in base[experiment].directions().items()}
        (d / "manifest.json").write_text(json.dumps({"experiment": experiment, "profile": prof,
                                                     "spec": {"lab": {"student": student}}}))
        return rel

    def problems(*runs):
        shutil.rmtree(tmp_path / "submission", ignore_errors=True)
        rels = [run(*r) for r in runs]
        (tmp_path / "submission" / "lab4" / "record.json").write_text(
            json.dumps({"lab": "lab4", "mode": "quick", "runs": {r: {} for r in rels}}))
        return links.problems(tmp_path / "submission", "lab4", sid, secret)

    own = dict(who, own_link=True)
    assert problems(("a/1", "lab4-geo-stall-paper", own, 1.0),
                    ("b/1", "lab4-geo-default", who, f["rate"])) == []
    bad = problems(("a/1", "lab4-geo-stall-paper", own, f["rate"]))
    assert len(bad) == 1 and "its down link ran at" in bad[0], bad
    bad = problems(("b/1", "lab4-geo-default", own, 1.0))
    assert bad == ["b/1: made on the lab's link; the lab's file 'lab4-geo-default' asks for yours"], bad
    bad = problems(("a/1", "lab4-geo-stall-reset", who, f["rate"]))
    assert bad == ["a/1: made on your link; the lab's file 'lab4-geo-stall-reset' asks for the lab's own"], bad

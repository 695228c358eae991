"""grading/README.md's "A term, step by step", followed as an instructor follows it: every shell
command of its steps, word for word (KIT replaced by this checkout; an optional [--flag] left
out), run in order from an empty folder, down to the files the LMS takes.  What the README asks
the instructor to make by hand is made here between the commands: the roster (the README's own
example, and the student whose genuine run is handed in), the class's submissions, and filled
manual-score sheets.  The course secret the README's command makes is then replaced by the host
tests' (tests/host/test_student_links.py), the one the genuine run's link code came from."""

import csv
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("otter")

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))
sys.path.insert(0, str(KIT / "notebooks"))

from grading import fixtures, links  # noqa: E402

README = KIT / "grading" / "README.md"
RUN = KIT / "tests" / "host" / "data" / "student-link-run.tar.xz"
SECRET = b"cclab host tests: not a course's secret"          # test_student_links.SECRET
STUDENT = "s1053"                                             # the genuine run's student


def steps() -> tuple[list[str], str]:
    """(the shell commands of "A term, step by step", in order; its example roster)."""
    text = README.read_text().split("## A term, step by step", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(sh|csv)\n(.*?)```", text, re.S)
    cmds, roster = [], None
    for kind, body in blocks:
        if kind == "csv":
            roster = "\n".join(line.strip() for line in body.strip().splitlines()) + "\n"
            continue
        joined = re.sub(r"\\\n\s*", " ", body)
        for line in joined.splitlines():
            line = line.split("#", 1)[0].strip() if not line.strip().startswith("#") else ""
            if line:
                cmds.append(re.sub(r"\s*\[--[^\]]*\]", "", line).replace("KIT", str(KIT)))
    return cmds, roster


def test_an_instructor_follows_the_readme_from_an_empty_folder(tmp_path):
    cmds, roster = steps()
    assert cmds[0] == "mkdir course && cd course" and roster, cmds[:2]
    course = tmp_path / "course"
    done = []
    # "a Python with the grader's packages": this one, or as root (where grade.py runs each
    # submission as nobody) one nobody can run, first on PATH (make grader-venv)
    env = dict(os.environ)
    py = Path(os.environ.get("CCLAB_GRADER_PYTHON", "/opt/cclab-grader/bin/python"))
    if os.geteuid() == 0:
        assert py.is_file(), f"no {py}: make grader-venv"
        env["PATH"] = f"{py.parent}:{env.get('PATH', '/usr/bin:/bin')}"
    else:
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    for cmd in cmds:
        if cmd == "mkdir course && cd course":
            course.mkdir()
            continue
        if "grading/grade.py" in cmd and not (course / "subs").exists():
            # collected: the genuine run on s1053's own link, and s1002's run made before
            # enrolling (the lab's own link), each with the master notebook
            master = course / "dist" / "lab1" / "autograder" / "lab1.ipynb"
            s = course / "subs" / "lab1" / STUDENT
            s.mkdir(parents=True)
            shutil.copy(master, s / "lab1.ipynb")
            with tarfile.open(RUN) as t:
                t.extractall(s, filter="data")
            fixtures.lab1_submission(course / "subs" / "lab1" / "s1002", master, real=1)
        if "links.py codes" in cmd:
            # the roster the README asks for: its example, and the genuine run's student
            (course / "roster.csv").write_text(roster + f"{STUDENT},Student Run,s@example.edu,1053,L1,\n")
        if "manual.py merge" in cmd:
            sheet = course / cmd.split("merge ", 1)[1].split()[0]
            q = sheet.stem.split("-", 1)[1]
            with open(course / "graded" / "lab1" / "manual" / "scores-template.csv") as f:
                rows = list(csv.DictReader(f))
            with open(sheet, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=["id", q])
                w.writeheader()
                for r in rows[1:]:                       # the first row: the points possible
                    w.writerow({"id": r["id"], q: "1"})
        r = subprocess.run(["bash", "-c", cmd], cwd=course, capture_output=True, text=True,
                           timeout=1800, env=env)
        assert r.returncode == 0, (cmd, r.stdout[-1500:], r.stderr[-1500:])
        done.append(cmd)
        if cmd.endswith("links.py secret course.secret"):
            assert (course / "course.secret").stat().st_mode & 0o077 == 0
            (course / "course.secret").write_text(SECRET.hex() + "\n")       # the tests' course
    assert any("student-release" in c for c in done) and any("gradescope.py" in c for c in done)
    codes = dict(csv.reader((course / "codes.csv").read_text().splitlines()))
    assert codes[STUDENT] == links.code_for(SECRET, STUDENT) and "s1001" in codes
    with open(course / "graded" / "lab1" / "gradebook.csv") as f:
        g = {r["student"]: r for r in csv.DictReader(f)}
    assert float(g[STUDENT]["auto"]) == 16 and not g[STUDENT]["flags"].startswith("results fail"), g[STUDENT]
    assert "made without your link" in g["s1002"]["flags"]
    assert g["s1001"]["status"] == "missing"
    assert float(g[STUDENT]["manual"]) > 0                       # the merged sheets
    with open(course / "graded" / "lab1" / "canvas.csv") as f:
        canvas = list(csv.reader(f))
    assert canvas[0][:4] == ["Student", "ID", "SIS User ID", "Section"]
    assert any(row[2] == "1053" for row in canvas[1:]), canvas
    assert (course / "release" / "README.md").is_file() and (course / "lab1-gradescope.zip").is_file()

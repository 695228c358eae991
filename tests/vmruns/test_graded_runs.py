"""The autograder of each lab gives the master's real run full marks: the quick-mode runs the
lab VM's notebook tests made this session (as the lab user, through the lab command) and kept,
graded here on the host as an instructor grades a submission (grading/grade.py's default
engine, its time and memory limits).  The guest graded lab 1's run as `nobody` already
(tests/vm/test_lab1_2.py); here every lab with a record of its experiment runs is graded."""
import csv
import shutil
import time
from pathlib import Path

import pytest

from grading import build, grade


@pytest.mark.parametrize("lab", ["lab1", "lab2", "lab3", "lab4"])
def test_a_real_run_gets_full_marks(lab, kept_lab_runs, dist, tmp_path):
    kept = Path(kept_lab_runs) / "quick"
    assert (kept / lab / "record.json").is_file(), \
        f"no kept quick-mode run of {lab}: its notebook test in the guest failed or did not run"
    sub = tmp_path / "subs" / "real"
    shutil.copytree(kept / lab, sub / "submission" / lab)
    shutil.copy(kept / f"{lab}.ipynb", sub / f"{lab}.ipynb")
    out = tmp_path / "graded"
    began = time.monotonic()
    grade.grade_all(tmp_path / "subs", build.autograder_zip(dist(lab)), out, jobs=1,
                    timeout=300, memory_mb=3072)
    print(f"{lab}: graded the run in {time.monotonic() - began:.0f} s")
    with open(out / "gradebook.csv") as f:
        row = next(csv.DictReader(f))
    feedback = (out / "feedback" / "real.txt").read_text()
    assert row["status"] == "graded", (row, feedback)
    assert float(row["possible"]) > 0, row
    assert float(row["score"]) == float(row["possible"]), (row, feedback)
    assert "cells that raised an error" not in feedback, feedback     # as in JupyterLab

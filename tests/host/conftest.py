"""Shared by the host tests."""
import os
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def lab1_dist(tmp_path_factory):
    """Lab 1 built once by grading/build.py: its folder, autograder zip, master and student."""
    pytest.importorskip("otter")
    if str(KIT) not in sys.path:
        sys.path.insert(0, str(KIT))
    from grading import build
    d = build.build("lab1", tmp_path_factory.mktemp("dist"))
    return {"dir": d, "zip": build.autograder_zip(d), "master": d / "autograder" / "lab1.ipynb",
            "student": d / "student" / "lab1.ipynb"}


@pytest.fixture(autouse=True)
def _grading_in_this_python(monkeypatch):
    """As root, grading/grade.py runs each submission as `nobody`, which must be able to run the
    grader's Python, and refuses to grade otherwise.  These host tests check the grading logic
    in-process, in this Python (under /root here, which nobody cannot run), so where nobody
    cannot run it they grade as this process's user, as `--user ''` does.  The sandbox user
    itself is tested where a Python it can run is on hand: the Gradescope run below (with
    `make grader-venv`'s Python) and tests/student."""
    if os.geteuid() != 0:
        return
    if str(KIT) not in sys.path:
        sys.path.insert(0, str(KIT))
    try:
        from grading import grade
    except ImportError:
        return
    real = grade._sandbox_user

    def as_ourselves_if_needed(name):
        try:
            return real(name)
        except SystemExit:
            return None
    monkeypatch.setattr(grade, "_sandbox_user", as_ourselves_if_needed)

"""Shared by the host tests."""
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

"""grading/build.py for labs 3 and 4: the student versions get labkit.py and kmodlab.py, the
autograders also the engine's package as cclab.zip, so grading needs no kit checkout; the graded
notebook imports the engine from that zip, not from a copy a submission brings.  (Full marks for
the masters on real results is checked by hand on a lab VM run: the results are megabytes.)"""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("otter")
nbformat = pytest.importorskip("nbformat")

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))

from grading import build, grade  # noqa: E402


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return {lab: build.build(lab, out) for lab in ("lab3", "lab4")}


def engine_sources():
    return {str(p.relative_to(KIT)): p.read_bytes() for p in (KIT / "cclab").rglob("*.py")
            if "__pycache__" not in p.parts}


@pytest.mark.parametrize("lab", ["lab3", "lab4"])
def test_build_packages_the_kmod_labs(dist, lab):
    d = dist[lab]
    stu = d / "student"
    assert (stu / "labkit.py").read_bytes() == (KIT / "notebooks" / "labkit.py").read_bytes()
    assert (stu / "kmodlab.py").read_bytes() == (KIT / "labs" / "kmodlab.py").read_bytes()
    assert not (stu / "cclab.zip").exists()              # students use the VM's kit
    text = (stu / f"{lab}.ipynb").read_text()
    assert "grader.check" in text
    assert "# HIDDEN" not in text and "load_fresh" not in text     # hidden tests stripped
    assert "BEGIN SOLUTION" not in text
    with zipfile.ZipFile(build.autograder_zip(d)) as z:
        assert z.read("files/kmodlab.py") == (KIT / "labs" / "kmodlab.py").read_bytes()
        assert z.read("files/labkit.py") == (KIT / "notebooks" / "labkit.py").read_bytes()
        bundle = z.read("files/cclab.zip")
    engine = d / "engine.zip"
    engine.write_bytes(bundle)
    with zipfile.ZipFile(engine) as z:
        assert {n: z.read(n) for n in z.namelist()} == engine_sources()


def test_engine_zip_is_reproducible(tmp_path):
    a, b = build.engine_zip(tmp_path / "a.zip"), build.engine_zip(tmp_path / "b.zip")
    assert a.read_bytes() == b.read_bytes()


def test_grading_imports_the_engine_from_the_bundle(dist, tmp_path):
    """In a grading folder (no kit, CCLAB_REPLAY=1) kmodlab puts cclab.zip first on sys.path,
    ahead of a cclab/ folder the submission brings."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("labkit.py", "kmodlab.py", "cclab.zip"):
        (work / name).write_bytes((dist["lab3"] / "autograder" / name).read_bytes())
    fake = work / "cclab" / "analysis"
    fake.mkdir(parents=True)
    (work / "cclab" / "__init__.py").write_text("FAKE = True\n")
    (fake / "__init__.py").write_text("raise ImportError('the submission copy')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CCLAB_", "PYTHON"))}
    env.update({"CCLAB_REPLAY": "1", "CCLAB_KIT": str(tmp_path / "nowhere"), "MPLBACKEND": "Agg"})
    code = ("import sys; sys.path.insert(0, ''); import kmodlab, cclab, cclab.analysis.metrics; "
            "print(cclab.__file__); print(hasattr(cclab, 'FAKE'))")
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    where, fake_used = r.stdout.split()
    assert where == str(work / "cclab.zip" / "cclab" / "__init__.py") and fake_used == "False"


def test_lab3_autograder_runs_a_submission_without_a_kit(dist, tmp_path):
    """No results in the submission: the answers fail, but the notebook's set-up (labkit,
    kmodlab, cclab.analysis from the bundle) runs, and the public check of the question that needs
    no run (q6: the notebook's function, called by the grader) passes; without a run no measured
    answer scores, so the grade is 0."""
    d = dist["lab3"]
    subs = tmp_path / "subs"
    (subs / "master").mkdir(parents=True)
    (subs / "master" / "lab3.ipynb").write_bytes((d / "autograder" / "lab3.ipynb").read_bytes())
    out = tmp_path / "graded"
    grade.grade_all(subs, build.autograder_zip(d), out, jobs=1, timeout=300)
    import csv
    with open(out / "gradebook.csv") as f:
        row = next(csv.DictReader(f))
    assert row["status"] == "graded", row["reason"]
    fb = (out / "feedback" / "master.txt").read_text()
    assert "No module named" not in fb and "ModuleNotFoundError" not in fb
    assert "name 'LOSSES' is not defined" not in fb          # the set-up cell ran
    assert "passed: q6 - 1" in fb
    assert float(row["score"]) == 0 and float(row["possible"]) == 16     # q1-q3, q5, q6, q8
    assert "q1: 0/3 -- the results fail the record check" in fb

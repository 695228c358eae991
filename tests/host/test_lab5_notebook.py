"""Lab 5's master notebook on the host: otter assign builds the student version and the autograder,
and the master, run headless on the recorded connections, passes every test cell it holds (public
and hidden) with the reference solution.  The live section (no namespaces on the host) is fed
the log of a live quick-mode run recorded in the lab VM, or one made by replaying the recorded
connections through the reference learner."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("otter")

KIT = Path(__file__).resolve().parents[2]
LAB5 = KIT / "labs" / "lab5"
sys.path.insert(0, str(LAB5))

import tuner_support as ts  # noqa: E402

ref = ts.load_reference()

SEED = 5      # the notebook's


def stage(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(KIT / "notebooks" / "lab5.ipynb", dest)
    shutil.copy(LAB5 / "tuner_support.py", dest)
    shutil.copy(LAB5 / "connections.csv", dest / "lab5-connections.csv")
    shutil.copy(LAB5 / "reference.py", dest / "lab5_reference.py")
    return dest


def replayed_live_log(dest: Path):
    """A live log as run_live writes it, made from the recorded connections."""
    conns = ts.load_connections(LAB5 / "connections.csv")
    keys = conns.groupby("path")["key"].first()
    log = ts.replay(ref.tuner(SEED), conns, 40, keys=[keys["clean"], keys["lossy"]])
    sub = dest / "submission" / "lab5"
    sub.mkdir(parents=True, exist_ok=True)
    log.to_csv(sub / "live.csv", index=False)
    return log


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    work = stage(tmp_path_factory.mktemp("lab5-src"))
    out = tmp_path_factory.mktemp("lab5-dist")
    r = subprocess.run([sys.executable, "-m", "otter", "assign", "lab5.ipynb", str(out)],
                       cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_student_version_has_no_solutions_hidden_tests_or_reference(dist):
    stu = dist / "student"
    text = (stu / "lab5.ipynb").read_text()
    assert "tied[0] if len(tied) == 1" not in text            # a solution line
    assert "_lab5_ref" not in text                             # hidden tests
    assert "grader.check" in text and "q6" in text
    assert (stu / "tuner_support.py").is_file() and (stu / "lab5-connections.csv").is_file()
    assert not (stu / "lab5_reference.py").exists()
    for cell in nbformat.read(stu / "lab5.ipynb", as_version=4).cells:
        if cell.cell_type == "code":
            compile(cell.source, "<student cell>", "exec")          # stubs are valid Python
    zips = sorted((dist / "autograder").glob("*-autograder_*.zip"))
    assert zips
    with zipfile.ZipFile(zips[-1]) as z:
        names = z.namelist()
    assert any(n.endswith("lab5_reference.py") for n in names)
    assert any(n.endswith("lab5-connections.csv") for n in names)


def real_live_log(dest: Path):
    """A live log a quick-mode run of the master wrote in the lab VM (tests/vm/test_lab5.py)."""
    sub = dest / "submission" / "lab5"
    sub.mkdir(parents=True, exist_ok=True)
    shutil.copy(LAB5 / "live-example.csv", sub / "live.csv")


@pytest.mark.parametrize("live", [real_live_log, replayed_live_log])
def test_master_passes_its_tests_on_recorded_data(live, tmp_path, monkeypatch):
    from nbclient import NotebookClient
    work = stage(tmp_path / "run")
    live(work)
    monkeypatch.setenv("CCLAB_REPLAY", "1")
    monkeypatch.setenv("CCLAB_MODE", "quick")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(work / "lab5.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(work)}}).execute()   # a failing assert raises
    hidden = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# HIDDEN")]
    assert len(hidden) >= 8
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "CongAlg" in out


def test_master_refuses_a_learner_that_differs(tmp_path, monkeypatch):
    """The hidden tests catch a tie-break that uses the random generator differently."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    work = stage(tmp_path / "run")
    replayed_live_log(work)
    monkeypatch.setenv("CCLAB_REPLAY", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(work / "lab5.ipynb", as_version=4)
    for c in nb.cells:
        if c.cell_type == "code" and "pick = tied[0] if len(tied) == 1 else rng.choice(tied)" in c.source:
            c.source = c.source.replace("pick = tied[0] if len(tied) == 1 else rng.choice(tied)",
                                        "pick = rng.choice(tied)")
    with pytest.raises(CellExecutionError) as e:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(work)}}).execute()
    assert "_ref.choose" in str(e.value) or "reference" in str(e.value)

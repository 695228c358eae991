"""grading/run_master.py on the host: its usage errors, and how it keeps a finished run (the
masters themselves run in the lab VM: tests/vm/test_lab*.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))

from grading import run_master as rm  # noqa: E402


def cli(*args):
    return subprocess.run([sys.executable, str(KIT / "grading" / "run_master.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_unknown_lab_is_one_line_and_exit_2():
    p = cli("lab9")
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0
    assert "unknown lab lab9" in p.stderr


def test_bad_mode_and_timeout_exit_2():
    assert cli("lab1", "--mode", "slow").returncode == 2
    p = cli("lab1", "--timeout", "0")
    assert p.returncode == 2 and "--timeout" in p.stderr


def test_prepare_copies_the_master_and_the_student_support_files(tmp_path):
    rm.prepare("lab3", tmp_path)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["kmodlab.py", "lab3.ipynb", "labkit.py"]
    (tmp_path / "x").mkdir()
    rm.prepare("lab1", tmp_path / "x")
    assert (tmp_path / "x" / "reference-lab1.csv").is_file()


def _finished(work: Path, lab: str, marker: str) -> None:
    (work / "submission" / lab).mkdir(parents=True)
    (work / "submission" / lab / "record.json").write_text(marker)
    (work / f"{lab}.ipynb").write_text("{}")


def test_keep_replaces_an_older_run_and_leaves_no_staging(tmp_path):
    keep = tmp_path / "keep"
    for n in ("1", "2"):
        work = tmp_path / f"work{n}"
        _finished(work, "lab1", n)
        rm.keep("lab1", work, "quick", keep)
    assert (keep / "quick" / "lab1" / "record.json").read_text() == "2"
    assert sorted(x.name for x in (keep / "quick").iterdir()) == ["lab1", "lab1.ipynb"]


def test_keep_of_an_incomplete_run_fails_and_keeps_the_old_one(tmp_path):
    keep = tmp_path / "keep"
    _finished(tmp_path / "good", "lab1", "good")
    rm.keep("lab1", tmp_path / "good", "quick", keep)
    (tmp_path / "bad").mkdir()                               # no submission folder at all
    with pytest.raises(FileNotFoundError):
        rm.keep("lab1", tmp_path / "bad", "quick", keep)
    assert (keep / "quick" / "lab1" / "record.json").read_text() == "good"
    assert sorted(x.name for x in (keep / "quick").iterdir()) == ["lab1", "lab1.ipynb"]


def test_a_dead_kernel_is_reported_with_how_it_ended():
    import signal
    p = subprocess.Popen(["sleep", "30"])
    assert rm._ended(p) == ""                             # still running: nothing to say
    p.send_signal(signal.SIGKILL)                         # (SIGHUP is ignored under nohup)
    p.wait()
    assert rm._ended(p) == " (the kernel was killed by SIGKILL)"
    q = subprocess.Popen(["sh", "-c", "exit 3"])
    q.wait()
    assert rm._ended(q) == " (the kernel exited with status 3)" and rm._ended(None) == ""


def test_a_master_runs_on_saved_results_and_keeps_them(tmp_path):
    """--results: the master analyses results saved earlier (here the grading fixtures' lab 1
    run) instead of running experiments, passes its own tests, and is kept like a run of its own;
    results of the other mode are refused with one line."""
    from grading import fixtures
    fixtures.lab1_results(tmp_path / "saved")
    p = cli("lab1", "--results", str(tmp_path / "saved" / "submission"), "--keep", str(tmp_path / "keep"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "lab1: passed its public and hidden tests in quick mode" in p.stdout
    kept = tmp_path / "keep" / "quick" / "lab1" / "record.json"
    assert kept.read_bytes() == (tmp_path / "saved" / "submission" / "lab1" / "record.json").read_bytes()
    p = cli("lab1", "--mode", "full", "--results", str(tmp_path / "saved" / "submission"))
    assert p.returncode == 1 and "made in quick mode, not full" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("run_master: lab1:")
    p = cli("lab1", "--results", str(tmp_path / "nothing"))
    assert p.returncode == 1 and "no saved results with a record" in p.stderr


def test_the_runs_progress_lines_are_relayed_while_the_cell_runs(tmp_path, capsys):
    """A lab's run cell prints the engine's progress; run_master passes those lines on as they
    come (one full-mode run cell takes many minutes), and nothing else the cell prints."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    lines = ["lab9: lab9-x: 2 flow(s), 3 repetition(s)", "[run 1/3] lab9-x (seed 1): elapsed 0:00",
             "a table row", "done: 3 run(s) in 0:40", rm.REAL_MARK]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\n" + "".join(f"print({line!r})\n" for line in lines)
        + "os.makedirs('submission/lab9', exist_ok=True)\n"
        + "open('submission/lab9/record.json', 'w').write('{}')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "lab9.ipynb")
    rm.execute("lab9", tmp_path, "quick", timeout=120)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[lab9] ")]
    assert said[:3] == ["[lab9] " + line for line in (lines[0], lines[1], lines[3])], said
    assert not any("a table row" in line or rm.REAL_MARK in line for line in said)


def test_ccas_are_checked_with_one_line_and_exit_2():
    for args, said in ((("lab1", "--ccas", "bbr"), "lab1 has none"),
                       (("lab2", "--ccas", "bbr,Cubic"), "'Cubic' is not a congestion control's name"),
                       (("lab2", "--ccas", "bbr,,cubic"), "'' is not"),
                       (("lab2", "--ccas", "bbr,cubic,bbr"), "bbr is named twice"),
                       (("lab2", "--ccas", "bbr", "--results", "x"), "give one of them")):
        p = cli(*args)
        assert p.returncode == 2 and said in p.stderr and p.stderr.strip().count("\n") == 0, (args, p.stderr)
    assert rm.parse_ccas("bbr, cubic,westwood") == ["bbr", "cubic", "westwood"]


def test_a_limited_run_goes_first_and_the_master_analyses_it(tmp_path, monkeypatch):
    """--ccas: the lab's experiments run limited to those algorithms (here a stand-in for
    labkit.run_lab that saves the shipped lab 2 run and notes what it was asked), then the master
    runs on them, not replaying (its own run cell finds them saved), and is kept; a failing limited
    run is a LabFailed naming the algorithms, and keeps nothing."""
    import shutil
    import tarfile
    with tarfile.open(KIT / "tests" / "host" / "data" / "reference-runs.tar.xz") as t:
        t.extractall(tmp_path / "ref", members=[m for m in t.getmembers() if m.name.startswith("lab2-4/")],
                     filter="data")
    sys.path.insert(0, str(KIT / "notebooks"))
    import labkit
    asked = []

    def limited(lab, mode, root=None, ccas=None, progress=print, **_):
        asked.append((lab, mode, ccas))
        progress(f"{lab}: lab2-p1: 6 flow(s), 1 repetition(s)")
        shutil.copytree(tmp_path / "ref" / "lab2-4" / lab, Path(root) / lab)
        return Path(root) / lab
    monkeypatch.setattr(labkit, "run_lab", limited)
    monkeypatch.delenv("CCLAB_REPLAY", raising=False)
    _, nb, _ = rm.run("lab2", "quick", keep_dir=tmp_path / "keep", ccas=["bbr", "cubic"])
    assert asked == [("lab2", "quick", ["bbr", "cubic"])]
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "using the saved quick results" in out and rm.REAL_MARK in out
    kept = tmp_path / "keep" / "quick" / "lab2" / "record.json"
    assert kept.read_bytes() == (tmp_path / "ref" / "lab2-4" / "lab2" / "record.json").read_bytes()

    def broken(lab, mode, **_):
        raise RuntimeError("cclab-lab-run: lab2: RunError: congestion control nosuch is not available\nmore")
    monkeypatch.setattr(labkit, "run_lab", broken)
    with pytest.raises(rm.LabFailed, match=r"^lab2: the run limited to bbr, nosuch failed: cclab-lab-run: "
                                           r"lab2: RunError: congestion control nosuch is not available$"):
        rm.run("lab2", "quick", keep_dir=tmp_path / "keep2", ccas=["bbr", "nosuch"])
    assert not (tmp_path / "keep2").exists()


def test_the_masters_environment_is_set_for_the_block_and_restored_after_a_failure(monkeypatch):
    monkeypatch.setenv("CCLAB_QUICK", "1")
    monkeypatch.delenv("CCLAB_REPLAY", raising=False)
    with pytest.raises(RuntimeError):
        with rm.environment(CCLAB_REPLAY="1", CCLAB_QUICK=None):
            assert rm.os.environ["CCLAB_REPLAY"] == "1" and "CCLAB_QUICK" not in rm.os.environ
            raise RuntimeError
    assert rm.os.environ["CCLAB_QUICK"] == "1" and "CCLAB_REPLAY" not in rm.os.environ

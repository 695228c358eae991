"""bench/lab_overhead.py --kept on the host: the breakdown of a kept notebook's time by its cells'
timings (metadata.execution, as JupyterLab writes it with recordTiming), from a kept folder made
here the way tests/student/test_browser.py keeps a lab's run."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lo():
    spec = importlib.util.spec_from_file_location("lab_overhead", KIT / "bench" / "lab_overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def code(source: str, start: str | None = None, reply: str | None = None, **more) -> dict:
    execution = dict(more)
    if start:
        execution.update({"iopub.status.busy": start, "iopub.execute_input": start})
    if reply:
        execution["shell.execute_reply"] = reply
    return {"cell_type": "code", "execution_count": 1, "outputs": [], "source": source,
            "metadata": {"execution": execution} if execution else {}}


def notebook() -> dict:
    """Six code cells, four of them timed: imports 2 s, the experiments 130 s, a plot 7 s, a
    check 3 s; between them 0.5 s, 1 s and 0.5 s.  One cell was saved untimed and one while it
    ran again (its reply the earlier run's, before its start)."""
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "# Lab 3"},
        code(["import labkit\n", "import kmodlab as KM\n"],
             "2026-12-01T10:00:00.000Z", "2026-12-01T10:00:02.000Z"),
        code("KM.run(LAB, MODE)\nproblems = KM.verify(LAB)\n",
             "2026-12-01T10:00:02.500Z", "2026-12-01T10:02:12.500000Z"),
        {"cell_type": "markdown", "metadata": {}, "source": "## Plots"},
        code("\nfig, axes = plt.subplots(1, 2)\n# labkit.run_lab(LAB) draws nothing\n",
             "2026-12-01T10:02:13.500Z", "2026-12-01T10:02:20.500Z"),
        code("# labkit.run_lab(LAB, MODE)  (commented out: runs nothing)\nrs = KM.runs(LAB)\n",
             "2026-12-01T10:02:21.000Z", "2026-12-01T10:02:24.000Z"),
        code("print('after the last save')\n"),
        code("assert not problems\n", "2026-12-01T10:05:00.000Z", "2026-12-01T09:59:00.000Z"),
    ]}


def kept_folder(root: Path, nb: dict, runs: float = 100.0, browser: float = 200.0) -> Path:
    """<root>/quick/ as test_browser.keep_run leaves it: lab3/ (the record and a run), lab3.ipynb
    and times.json."""
    base = root / "quick"
    run = base / "lab3" / "loss-00" / "r1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"network": "built"}))
    # two timed flows: the later one planned to end at 18 s, its data ended at 21.1 s
    (run / "flows.csv").write_text("flow,start,duration,t_start,t_end\n"
                                   "1,2.0,10.0,5.1,15.1\n2,8.0,10.0,11.1,21.1\n")
    sized = base / "lab3" / "loss-01" / "r1"    # a sized flow: no planned end, not counted
    sized.mkdir(parents=True)
    (sized / "flows.csv").write_text("flow,start,duration,t_start,t_end\n1,0.0,,0.3,4.0\n")
    (base / "lab3" / "record.json").write_text(json.dumps({"lab": "lab3", "seconds": runs}))
    (base / "lab3.ipynb").write_text(json.dumps(nb))
    (base / "times.json").write_text(json.dumps({"lab3": browser}))
    return root


def test_breakdown_of_a_kept_notebook(lo):
    b = lo.cell_breakdown(notebook(), runs=100.0)
    assert (b["code"], b["timed"]) == (6, 4)
    assert b["cells"] == pytest.approx(142.0)
    assert b["gaps"] == pytest.approx(2.0)
    assert b["span"] == pytest.approx(144.0)
    assert b["experiment_cells"] == 1 and b["experiments"] == pytest.approx(130.0)
    assert b["others"] == pytest.approx(12.0)
    assert [(round(s, 3), i, line) for s, i, line in b["slowest"]] == [
        (7.0, 4, "fig, axes = plt.subplots(1, 2)"),
        (3.0, 5, "# labkit.run_lab(LAB, MODE)  (commented out: runs nothing)"),
        (2.0, 1, "import labkit")]


def test_no_timings_no_breakdown(lo):
    nb = notebook()
    for c in nb["cells"]:
        c["metadata"] = {}
    assert lo.cell_breakdown(nb, runs=100.0) is None


@pytest.mark.parametrize("src, runs", [
    ("labkit.run_lab(LAB, MODE)\n", True),
    ("out = labkit.run_lab(LAB, MODE, ccas=CCAS)\n", True),
    ("KM.run(LAB, MODE)\n", True),
    ("kmodlab.run('lab4')\n", True),
    ("# KM.run(LAB, MODE)\nx = 1\n", False),
    ("for r in KM.runs(LAB):\n    print(r)\n", False),
    ("labkit.run_lab_later = 1\nKM.running(LAB)\n", False),
])
def test_experiment_cells(lo, src, runs):
    assert lo.experiment_cell(src, {"kmodlab", "KM"}) is runs


def test_the_labs_experiment_cells(lo):
    """Each lab notebook has one cell that runs its experiments, and it is the one found."""
    for lab in ("lab1", "lab2", "lab3", "lab4"):
        nb = json.loads((KIT / "notebooks" / f"{lab}.ipynb").read_text())
        for c in nb["cells"]:
            c["metadata"] = {"execution": {"iopub.execute_input": "2026-12-01T10:00:00Z",
                                           "shell.execute_reply": "2026-12-01T10:00:01Z"}}
        b = lo.cell_breakdown(nb, runs=1.0)
        assert b["experiment_cells"] == 1, lab
        assert not any("run_lab(" in line or "KM.run(" in line for _, _, line in b["slowest"])


def test_kept_prints_the_table_then_the_breakdown(lo, tmp_path, capsys):
    kept = kept_folder(tmp_path, notebook())
    assert lo.main(["--kept", str(kept), "lab3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["lab", "notebook", "s", "runs", "s", "flows", "s", "runs/flows",
                              "notebook/flows", "kept"]
    assert re.match(r"lab3 +200 +100 +\d+ +[\d.]+ +[\d.]+ +0/1", out[1]), out[1]
    assert out[2].startswith("all ")
    text = "\n".join(out[3:])
    assert "lab3: 3.1 s over 1 run(s)" in text
    assert "where the runs' time went" in text
    assert ("lab3: 4 of 6 code cells timed; cells 142.0, gaps 2.0 "
            "(first start to last reply 144.0)") in text
    assert ("experiments 130.0 in 1 cell(s), runs 100.0: "
            "30.0 of those cells outside the runs") in text
    assert "other cells 12.0; the slowest:" in text
    slow = [line for line in out if re.match(r"^ +\d+\.\d +cell ", line)]
    assert [line.split()[:3] for line in slow] == [["7.0", "cell", "4"], ["3.0", "cell", "5"],
                                                   ["2.0", "cell", "1"]]
    assert slow[0].endswith("fig, axes = plt.subplots(1, 2)")


def manifest(run: Path, start: float, end: str, tail=None, network="kept") -> None:
    run.mkdir(parents=True)
    spec = {"name": run.parent.name, **({"tail": tail} if tail is not None else {})}
    (run / "manifest.json").write_text(json.dumps(
        {"network": network, "start_epoch": start, "end": end, "spec": spec}))


def test_where_the_runs_time_went(lo, tmp_path, capsys):
    """Two runs kept (10.5 s and 12.25 s from t = 0 to the manifest's last write, tails 1 s and
    none), one made again before the second (8 s), one stopped before t = 0 (no times): 4 runs
    made; the record's 40 s leave 9.25 s outside the runs, 2.3 s a run made."""
    base = tmp_path / "quick" / "lab3"
    t0 = 1796160000.0                       # 2026-12-01T21:20:00Z
    manifest(base / "loss-00" / "r1", t0, "2026-12-01T21:20:10.500+00:00", tail=1.0,
             network="built")
    manifest(base / "loss-01" / "r1.superseded-1", t0 + 20, "2026-12-01T21:20:28+00:00",
             tail=1.0)
    manifest(base / "loss-01" / "r1", t0 + 30, "2026-12-01T21:20:42.250Z")
    stopped = base / "loss-02" / "r1"
    stopped.mkdir(parents=True)
    (stopped / "manifest.json").write_text(json.dumps({"network": "kept", "end": None}))
    t = lo.run_times(base)
    assert lo.networks(t) == "2/3"             # the superseded run is not one of the runs
    assert t == {"made": 4, "again": 1, "kept": 2, "own": pytest.approx(22.75),
                 "again_s": pytest.approx(8.0), "tails": pytest.approx(1.0)}
    lo.print_run_times([("lab3", 40.0, t)])
    out = capsys.readouterr().out.splitlines()
    assert out[-1].split() == ["lab3", "40.0", "22.8", "(1.0)", "1", "(8.0)", "9.2", "4", "2.3"]


def test_kept_without_timings_says_so(lo, tmp_path, capsys):
    nb = notebook()
    for c in nb["cells"]:
        c["metadata"] = {}
    assert lo.main(["--kept", str(kept_folder(tmp_path, nb)), "lab3"]) == 0
    out = capsys.readouterr().out
    assert "no cell timings in the kept notebooks" in out
    assert "code cells timed" not in out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

"""Shared by test_lab3.py and test_lab4.py: run a kernel-module lab's master notebook headless in
quick mode in a scratch folder, as a student would in the lab VM (root), then grade that very run
with the autograder grading/build.py makes, as the unprivileged user `nobody`.

nbclient stops at the first failing cell, so a run that returns passed every public and hidden
test the master holds.  CCLAB_LAB34_KEEP=DIR keeps the run's results in DIR/quick/<lab>/ (the
reproduction scorecard reads them from results/scorecard/)."""

from __future__ import annotations

import csv
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KIT = Path(__file__).resolve().parents[2]
BUDGET_S = 300            # quick mode, whole notebook, software-emulated guest


def run_master(lab: str, work: Path, monkeypatch, hidden_at_least: int) -> Path:
    """Run notebooks/<lab>.ipynb in `work`; returns the executed notebook's path."""
    shutil.copy(KIT / "notebooks" / f"{lab}.ipynb", work)
    shutil.copy(KIT / "notebooks" / "labkit.py", work)
    shutil.copy(KIT / "labs" / "kmodlab.py", work)
    monkeypatch.setenv("CCLAB_MODE", "quick")
    monkeypatch.setenv("CCLAB_KIT", str(KIT))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("CCLAB_REPLAY", raising=False)
    nb = nbformat.read(work / f"{lab}.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if "grader.export" not in c.source]     # no zip needed here
    began = time.monotonic()
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(work)}}).execute()
    finally:
        took = time.monotonic() - began
        print(f"{lab}: {took:.0f} s in quick mode")
        keep = os.environ.get("CCLAB_LAB34_KEEP")
        sub = work / "submission" / lab
        if keep and sub.is_dir():
            dest = Path(keep) / "quick" / lab
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(sub, dest)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "results look real" in text, "the run's own check found problems"
    hidden = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# HIDDEN")]
    assert len(hidden) >= hidden_at_least and all(c.get("execution_count") for c in hidden)
    assert (work / "submission" / lab / "record.json").is_file()
    assert took <= BUDGET_S, f"{lab} took {took:.0f} s in quick mode (budget {BUDGET_S} s)"
    nbformat.write(nb, work / f"{lab}.ipynb")
    return work / f"{lab}.ipynb"


def grade_run(lab: str, work: Path, tmp: Path) -> dict:
    """Grade the run in `work` (its notebook and submission/<lab>/) with the autograder built
    from the master, as `nobody` with grade.py's limits; full marks expected."""
    if str(KIT) not in sys.path:
        sys.path.insert(0, str(KIT))
    from grading import build, grade
    dist = build.build(lab, tmp / "dist")
    subs = tmp / "subs"
    shutil.copytree(work / "submission", subs / "real" / "submission")
    shutil.copy(work / f"{lab}.ipynb", subs / "real" / f"{lab}.ipynb")
    out = tmp / "graded"
    began = time.monotonic()
    grade.grade_all(subs, build.autograder_zip(dist), out, jobs=1, timeout=240,
                    memory_mb=2048, user="nobody")
    print(f"{lab}: graded the run in {time.monotonic() - began:.0f} s")
    with open(out / "gradebook.csv") as f:
        row = next(csv.DictReader(f))
    feedback = (out / "feedback" / "real.txt").read_text()
    assert row["status"] == "graded", row
    assert float(row["possible"]) > 0 and float(row["score"]) == float(row["possible"]), (row, feedback)
    return row

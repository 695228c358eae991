"""Shared by the lab notebook tests (test_lab1_2.py, test_lab3.py, test_lab4.py): run a lab's
master notebook headless in quick mode in a scratch folder, as a student would in the lab VM
(root), with grading/run_master.py; then grade that very run with the autograder
grading/build.py makes, as the unprivileged user `nobody`.

nbclient stops at the first failing cell, so a run that returns passed every public and hidden
test the master holds.  CCLAB_LABS_KEEP=DIR keeps each run's results in DIR/quick/<lab>/ (the
reproduction scorecard reads them from results/scorecard/)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from grading import run_master as rm  # noqa: E402

BUDGET_S = 300            # quick mode, whole notebook, software-emulated guest


def run_master(lab: str, work: Path, hidden_at_least: int):
    """Run notebooks/<lab>.ipynb in `work` in quick mode; returns the executed notebook."""
    rm.prepare(lab, work)
    try:
        nb, took = rm.execute(lab, work, "quick")
    except rm.LabFailed as e:
        print(measured(lab, work / "submission"))
        raise AssertionError(str(e)) from None
    print(f"{lab}: {took:.0f} s in quick mode")
    keep = os.environ.get("CCLAB_LABS_KEEP")
    if keep:
        rm.keep(lab, work, "quick", Path(keep))
    hidden = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# HIDDEN")]
    assert len(hidden) >= hidden_at_least and all(c.get("execution_count") for c in hidden)
    assert took <= BUDGET_S, f"{lab} took {took:.0f} s in quick mode (budget {BUDGET_S} s)"
    return nb


def measured(lab: str, root: Path) -> str:
    """What the runs of a failed notebook measured, for the test log (the scratch folder does not
    outlive the VM): each run's fidelity checks with their measured values, each flow's goodput."""
    sys.path.insert(0, str(KIT / "notebooks"))
    import labkit
    lines = [f"[{lab}] what the runs measured ({root}):"]
    try:
        for d in labkit.run_dirs(lab, root):
            fid = json.loads((d / "manifest.json").read_text()).get("fidelity") or {}
            checks = ", ".join(
                f"{c['name']}{'/' + c['direction'] if c.get('direction') else ''}={c['ok']}"
                + (f" ({c['measured']:.3g})" if isinstance(c.get("measured"), (int, float)) else "")
                for c in fid.get("checks") or [])
            lines.append(f"  {d.parent.name}/{d.name}: fidelity ok={fid.get('ok')}: {checks}")
        g = labkit.goodput(lab, root)
        if len(g):
            lines.append(g[["experiment", "flow", "cca", "streams", "mbps", "retransmits"]]
                         .to_string(index=False))
    except Exception as e:          # a run that did not get far enough to leave its files
        lines.append(f"  (no more: {type(e).__name__}: {e})")
    return "\n".join(lines)


def grade_run(lab: str, work: Path, tmp: Path) -> dict:
    """Grade the run in `work` (its notebook and submission/<lab>/) with the autograder built
    from the master, as `nobody` with grade.py's limits; full marks expected."""
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

"""Lab 3 in the lab VM, as the lab user: the master notebook runs headless in quick mode -- the loss sweep,
the sharing runs and the spline:spline_mode tracepoint for real -- and passes every public and
hidden test cell it holds; the autograder built from it then gives
that run full marks, graded as `nobody` (lab_notebooks.py)."""

from pathlib import Path

from lab_notebooks import grade_run, run_master


def test_master_runs_in_quick_mode_passes_its_tests_and_grades_full(tmp_path):
    nb = run_master("lab3", tmp_path, hidden_at_least=7)
    grade_run("lab3", Path(nb.metadata["cclab_work"]), tmp_path)

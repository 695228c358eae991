"""Lab 4 in the lab VM, as the lab user: the master notebook runs headless in quick mode -- GEO and Wi-Fi
slow starts with module parameters and the search:search_exit tracepoint for real -- and passes
every public and hidden test cell it holds; the autograder built from
it then gives that run full marks, graded as `nobody` (lab_notebooks.py)."""

from pathlib import Path

from lab_notebooks import grade_run, run_master


def test_master_runs_in_quick_mode_passes_its_tests_and_grades_full(tmp_path):
    nb = run_master("lab4", tmp_path, hidden_at_least=7)
    grade_run("lab4", Path(nb.metadata["cclab_work"]), tmp_path)

"""Lab 4 in the lab VM, as the lab user: the master notebook runs headless in quick mode -- GEO and Wi-Fi
slow starts with module parameters and the search:search_exit tracepoint for real -- and passes
every public and hidden test cell it holds (lab_notebooks.py).  The host then grades the run it
kept (tests/vmruns/test_graded_runs.py)."""

from lab_notebooks import run_master


def test_master_runs_in_quick_mode_and_passes_its_tests():
    run_master("lab4", hidden_at_least=7)

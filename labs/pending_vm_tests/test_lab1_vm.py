"""PENDING: lab 1's master notebook runs headless in quick mode inside the lab VM (as root) and
passes every public and hidden test cell.  Move it to tests/vm/ once it passes (see README.md
here): cd /work/main && vm/run.sh -- python3 -m pytest -x -s labs/pending_vm_tests/test_lab1_vm.py"""

import os
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

KIT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("lab", ["lab1"])
def test_master_runs_in_quick_mode(lab, tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("runs experiments: needs root in the lab VM")
    shutil.copy(KIT / "notebooks" / f"{lab}.ipynb", tmp_path)
    shutil.copy(KIT / "notebooks" / "labkit.py", tmp_path)
    monkeypatch.setenv("CCLAB_MODE", "quick")
    monkeypatch.setenv("CCLAB_KIT", str(KIT))
    monkeypatch.delenv("CCLAB_REPLAY", raising=False)
    nb = nbformat.read(tmp_path / f"{lab}.ipynb", as_version=4)
    began = time.monotonic()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    took = time.monotonic() - began
    print(f"{lab}: {took:.0f} s in quick mode")
    assert (tmp_path / "submission" / lab / "record.json").is_file()
    assert took <= 300, f"{lab} took {took:.0f} s in quick mode (budget 300 s)"

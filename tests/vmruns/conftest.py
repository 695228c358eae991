"""Host tests on the lab runs the in-VM suite made and kept: `make test` runs them after the
guest has stopped.  CCLAB_VM_RUNS names the folder the guest kept its runs in (its
CCLAB_LABS_KEEP, seen from the host: <dir>/quick/<lab>/ and <dir>/quick/<lab>.ipynb);
CCLAB_DIST the autograders built before the guest booted (grading/build.py --out), else they
are built here."""
import os
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

RUNS_ENV = "CCLAB_VM_RUNS"


def pytest_collection_modifyitems(config, items):
    # Refuse rather than skip: without the guest's runs these tests have nothing to check.
    runs = os.environ.get(RUNS_ENV)
    if items and (not runs or not (Path(runs) / "quick").is_dir()):
        raise pytest.UsageError(
            f"tests/vmruns checks the lab runs an in-VM suite kept: {RUNS_ENV}=<dir> with "
            f"<dir>/quick/ (make test sets it; {RUNS_ENV}={runs!r})")


@pytest.fixture(scope="session")
def kept_lab_runs() -> str:
    return os.environ[RUNS_ENV]


@pytest.fixture(scope="session")
def dist(tmp_path_factory):
    """lab -> grading/build.py's output folder for it."""
    from grading import build
    made = os.environ.get("CCLAB_DIST")
    scratch = tmp_path_factory.mktemp("dist")
    return lambda lab: build.built(lab, Path(made) if made else None, scratch)

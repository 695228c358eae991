"""Shared by the in-VM tests: they run as root inside the lab VM (vm/run.sh)."""
import os

import pytest


def pytest_collection_modifyitems(config, items):
    # Refuse to run outside the lab VM rather than skip: a skipped kernel test is not a pass.
    if os.geteuid() != 0 or not os.path.exists("/run/cclab-ctl") and not os.environ.get("CCLAB_IN_VM"):
        raise pytest.UsageError(
            "tests/vm runs inside the lab VM as root: use 'make test-guest' or 'vm/run.sh -- pytest tests/vm'")

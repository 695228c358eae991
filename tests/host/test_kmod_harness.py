"""The kmod host harness (algorithm cores under ASan + UBSan) as one pytest case.

`make check` also runs `make -C kmod test` directly; this wrapper lets a plain
`pytest tests/host` cover the cores too, and checks the harness's own summary line.
"""
import os
import re
import shutil
import subprocess

import pytest

KMOD = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "kmod")


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                    reason="needs gcc and make")
def test_kmod_cores_under_sanitizers():
    r = subprocess.run(["make", "-s", "-C", KMOD, "test"], capture_output=True, text=True,
                       timeout=300)
    out = r.stdout + r.stderr
    m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.M)
    assert m, out[-3000:]
    passed, failed = int(m.group(1)), int(m.group(2))
    assert r.returncode == 0 and failed == 0 and passed >= 30, out[-3000:]

"""Shared by the in-VM tests that act as the lab VM's lab user (test_lab_user.py) or check what a
lab left behind (test_lab5.py): who the lab user is, a scratch folder it owns, and the network
namespaces that exist.  The lab notebooks themselves run as a student runs them, in JupyterLab
through a browser (tests/student)."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

UNIT = "/etc/systemd/system/cclab-jupyter.service"


def lab_user() -> pwd.struct_passwd:
    """The user the VM's JupyterLab service runs as (its unit's User=)."""
    with open(UNIT) as f:
        return pwd.getpwnam(re.search(r"^User=(.*)$", f.read(), re.M).group(1))


def scratch_for(user: pwd.struct_passwd, lab: str) -> Path:
    """A scratch folder the lab user owns, in its home (pytest's own are root's, mode 0700)."""
    work = Path(tempfile.mkdtemp(prefix=f"cclab-test-{lab}-", dir=user.pw_dir))
    os.chown(work, user.pw_uid, user.pw_gid)
    return work


def namespaces() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


def in_other_netns() -> dict[int, str]:
    """{pid: command line} of every process in a network namespace other than the VM's own:
    what a run's Mininet network holds (its nodes' namespaces are not in `ip netns`)."""
    def netns(pid):
        try:
            return os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            return None
    root = netns(1)
    found = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            ns = netns(d)
            if ns is not None and ns != root:
                try:
                    found[int(d)] = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                except OSError:
                    pass
    return found

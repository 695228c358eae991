"""Congestion controls a run needs: loaded (modprobe tcp_<name>, or insmod a .ko the experiment
names) and allowed in every namespace, or a one-line refusal before anything is built.

    from cclab import ccas
    records = ccas.ensure(exp)      # {cca: its module's provenance record}; raises ccas.Unavailable
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import provenance
from .spec import Experiment, available_ccas


class Unavailable(RuntimeError):
    """A congestion control the experiment asks for cannot be loaded (one line: which, why)."""


def ensure(exp: Experiment) -> dict:
    """Make every flow's congestion control available; return {cca: module record}."""
    wanted = sorted({f.cca for f in exp.flows if f.protocol == "tcp"})
    have = set(available_ccas())
    for cca in wanted:
        if cca in have:
            continue
        ko = [m for m in exp.modules if Path(m).stem == f"tcp_{cca}"]
        if ko:
            if not Path(ko[0]).is_file():
                raise Unavailable(f"congestion control {cca!r}: module file {ko[0]} not found")
            r = subprocess.run(["insmod", ko[0]], capture_output=True, text=True)
        else:
            r = subprocess.run(["modprobe", f"tcp_{cca}"], capture_output=True, text=True)
        have = set(available_ccas())
        if cca not in have:
            why = (r.stderr or r.stdout).strip() or f"exit status {r.returncode}"
            how = f"insmod {ko[0]}" if ko else f"modprobe tcp_{cca}"
            raise Unavailable(f"congestion control {cca!r} is not available ({how}: {why}); "
                              f"no flow was started")
    allow(wanted)
    return {cca: provenance.module_record(cca, exp) for cca in wanted}


ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def allow(ccas) -> None:
    """A namespace other than the first may only default to an "allowed" congestion control
    (otherwise EPERM): add the experiment's to the (global) allowed list."""
    with open(ALLOWED) as f:
        allowed = f.read().split()
    missing = [c for c in ccas if c not in allowed]
    if missing:
        with open(ALLOWED, "w") as f:
            f.write(" ".join(allowed + missing))

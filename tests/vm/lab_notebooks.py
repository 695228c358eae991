"""Shared by the lab notebook tests (test_lab1_2.py, test_lab3.py, test_lab4.py, test_lab5.py):
run a lab's master notebook headless in quick mode in a scratch folder, as a student does in the
lab VM: labs 1-4 as the unprivileged lab user (the notebook's kernel is the lab user's; its
experiments go through the lab command, sudo /usr/local/sbin/cclab-lab-run), with
grading/run_master.py.  Lab 5's live connections run in the notebook's process on sockets the
lab command makes in its paths' client namespace (tuner_support.RemotePaths).

nbclient stops at the first failing cell, so a run that returns passed every public and hidden
test the master holds.  The time a lab took is printed (bench/lab_overhead.py turns such times
into overhead ratios); no test compares it with a budget.  CCLAB_LABS_KEEP=DIR keeps each run's
results in DIR/quick/<lab>/: `make test` points it into the checkout, and after the guest has
stopped the host grades those runs and builds the scorecard from them (tests/vmruns/), where
grading costs seconds instead of minutes under software emulation.

The autograders are built on the host too (`make test` passes CCLAB_DIST, grading/build.py's
output): otter assign takes about 3 minutes a lab in the emulated guest."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

KIT = Path(__file__).resolve().parents[2]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from grading import run_master as rm  # noqa: E402

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


LABS = ("lab1", "lab2", "lab3", "lab4", "lab5")
_BATCH: dict = {}


def namespaces() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


def _run_batch() -> dict:
    """Run every lab's master in one grading/run_master.py process as the lab user, the first
    time a lab test asks: nbclient's imports alone take about 45 s under software emulation, once
    instead of once a lab.  Each lab still runs in its own folder with its own kernel, and a lab
    that fails does not stop the next.  Returns {lab: (folder, seconds or None, error line or None, its progress lines),
    "namespaces": (before, after)}."""
    if _BATCH:
        return _BATCH
    user = lab_user()
    base = scratch_for(user, "labs")
    env = {"PATH": os.environ["PATH"], "HOME": user.pw_dir, "LANG": "C.UTF-8",
           "CCLAB_KIT": str(KIT), "MPLBACKEND": "Agg"}
    before = namespaces()
    r = subprocess.run(["runuser", "-u", user.pw_name, "--", sys.executable,
                        str(KIT / "grading" / "run_master.py"), *LABS, "--mode", "quick",
                        "--work", str(base)], env=env, cwd=base, capture_output=True, text=True)
    _BATCH["namespaces"] = (before, namespaces())
    for lab in LABS:
        took = re.search(rf"^{lab}: passed its public and hidden tests in quick mode in (\d+) s",
                         r.stdout, re.M)
        error = next((ln for ln in r.stderr.splitlines() if ln.startswith(f"run_master: {lab}:")),
                     None if took else f"{lab}: no result (run_master exited {r.returncode})")
        log = [ln for ln in r.stderr.splitlines() if ln.startswith(f"[{lab}]")]
        _BATCH[lab] = (base / lab, float(took.group(1)) if took else None, error, log)
    return _BATCH


def batch_namespaces() -> tuple[set, set]:
    """The network namespaces before and after the labs' batch run."""
    return _run_batch()["namespaces"]


def run_master(lab: str, hidden_at_least: int):
    """notebooks/<lab>.ipynb run in quick mode as the lab user (in the session's batch); returns
    the executed notebook, whose folder is in nb.metadata['cclab_work']."""
    user = lab_user()
    work, took, error, log = _run_batch()[lab]
    sys.stderr.write("\n".join(log[-40:]) + "\n")
    if error:
        print(measured(lab, work / "submission"))
        raise AssertionError(f"{lab} as {user.pw_name}: {error}")
    nb = nbformat.read(work / f"{lab}.ipynb", as_version=4)
    mine = [p for p in (work / "submission" / lab).rglob("*") if p.lstat().st_uid != user.pw_uid]
    assert not mine, f"results not owned by {user.pw_name}: {mine[:3]}"
    print(f"{lab}: {took:.0f} s in quick mode")
    nb.metadata["cclab_work"] = str(work)
    keep = os.environ.get("CCLAB_LABS_KEEP")
    if keep:
        rm.keep(lab, work, "quick", Path(keep))
    hidden = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# HIDDEN")]
    assert len(hidden) >= hidden_at_least and all(c.get("execution_count") for c in hidden)
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


def autograder(lab: str, tmp: Path) -> Path:
    """grading/build.py's output folder for `lab`: the one built on the host before the guest
    booted (CCLAB_DIST), else one built here."""
    from grading import build
    dist = os.environ.get("CCLAB_DIST")
    return build.built(lab, Path(dist) if dist else None, tmp / "dist")

"""Shared by the lab notebook tests (test_lab1_2.py, test_lab3.py, test_lab4.py, test_lab5.py):
run a lab's master notebook headless in quick mode in a scratch folder, as a student does in the
lab VM: labs 1-4 as the unprivileged lab user (the notebook's kernel is the lab user's; its
experiments go through the lab command, sudo /usr/local/sbin/cclab-lab-run), with
grading/run_master.py; then grade that very run with the autograder grading/build.py makes, as
the unprivileged user `nobody`.  Lab 5's live connections run in the notebook's process on
sockets the lab command makes in its paths' client namespace (tuner_support.RemotePaths).

nbclient stops at the first failing cell, so a run that returns passed every public and hidden
test the master holds.  The time a lab took is printed (bench/lab_overhead.py turns such times
into overhead ratios); no test compares it with a budget.  CCLAB_LABS_KEEP=DIR keeps each run's
results in DIR/quick/<lab>/ (the reproduction scorecard reads them from results/scorecard/)."""

from __future__ import annotations

import csv
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

KIT = Path(__file__).resolve().parents[2]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from grading import run_master as rm  # noqa: E402

UNIT = "/etc/systemd/system/cclab-jupyter.service"
AS_ROOT: set[str] = set()  # every lab runs as the lab user (lab 5's paths through the lab command)


def lab_user() -> pwd.struct_passwd:
    """The user the VM's JupyterLab service runs as (its unit's User=)."""
    with open(UNIT) as f:
        return pwd.getpwnam(re.search(r"^User=(.*)$", f.read(), re.M).group(1))


def scratch_for(user: pwd.struct_passwd, lab: str) -> Path:
    """A scratch folder the lab user owns, in its home (pytest's own are root's, mode 0700)."""
    work = Path(tempfile.mkdtemp(prefix=f"cclab-test-{lab}-", dir=user.pw_dir))
    os.chown(work, user.pw_uid, user.pw_gid)
    return work


def run_master(lab: str, work: Path, hidden_at_least: int):
    """Run notebooks/<lab>.ipynb in quick mode; returns the executed notebook, whose folder
    (the lab user's scratch folder for labs 1-4, else `work`) is in nb.metadata['cclab_work']."""
    if lab in AS_ROOT:
        rm.prepare(lab, work)
        try:
            nb, took = rm.execute(lab, work, "quick")
        except rm.LabFailed as e:
            print(measured(lab, work / "submission"))
            raise AssertionError(str(e)) from None
    else:
        user = lab_user()
        work = scratch_for(user, lab)
        env = {"PATH": os.environ["PATH"], "HOME": user.pw_dir, "LANG": "C.UTF-8",
               "CCLAB_KIT": str(KIT), "MPLBACKEND": "Agg"}
        began = time.monotonic()
        r = subprocess.run(["runuser", "-u", user.pw_name, "--", sys.executable,
                            str(KIT / "grading" / "run_master.py"), lab, "--mode", "quick",
                            "--work", str(work)], env=env, cwd=work, capture_output=True,
                           text=True)
        took = time.monotonic() - began
        work = work / lab
        sys.stderr.write(r.stderr[-4000:])
        if r.returncode != 0:
            print(measured(lab, work / "submission"))
            raise AssertionError(f"{lab} as {user.pw_name}: {r.stderr.strip().splitlines()[-1:]}")
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


def grade_run(lab: str, work: Path, tmp: Path) -> dict:
    """Grade the run in `work` (its notebook and submission/<lab>/) with the autograder built
    from the master, as `nobody` with grade.py's limits; full marks expected."""
    from grading import build, grade
    dist = build.build(lab, tmp / "dist")
    subs = tmp / "subs"
    shutil.copytree(work / "submission", subs / "real" / "submission")
    shutil.copy(work / f"{lab}.ipynb", subs / "real" / f"{lab}.ipynb")
    out = tmp / "graded"
    began = time.monotonic()
    grade.grade_all(subs, build.autograder_zip(dist), out, jobs=1, timeout=240,
                    memory_mb=2048, user="nobody")
    print(f"{lab}: graded the run in {time.monotonic() - began:.0f} s")
    with open(out / "gradebook.csv") as f:
        row = next(csv.DictReader(f))
    feedback = (out / "feedback" / "real.txt").read_text()
    assert row["status"] == "graded", row
    assert float(row["possible"]) > 0 and float(row["score"]) == float(row["possible"]), (row, feedback)
    return row

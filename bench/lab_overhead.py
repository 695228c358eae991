"""What each lab's quick mode costs beyond its flows, measured in one lab-VM session.

    vm/run.sh --timeout 3600 -- python3 bench/lab_overhead.py [lab1 lab2 lab3 lab4]

Each lab's master notebook runs in quick mode as a student runs it: as the VM's lab user, its
experiments through the lab command (grading/run_master.py --work).
For each lab it prints:
- notebook: the wall time of the whole notebook (experiments, analysis, checks);
- runs: the time the lab's experiments took (the record's `seconds`: engine set-up, flows,
  tables and tear-down of every run);
- flows: the sum over the lab's runs of each run's timeline, t = 0 to its last flow's end
  (labkit.flow_seconds, from the experiment files);
- the ratios runs/flows and notebook/flows, and the same over all labs;
- kept: how many of the lab's runs took the network the run before them left up
  (runner.keep_network), of all its runs.
The targets (issue 15) are runs/flows <= 1.3 for every lab and <= 1.25 over the quick suite.
Nothing is asserted: the figures depend on the host, and this only prints them.

    python3 bench/lab_overhead.py --kept build/student-runs/<time> [lab1 ...]

prints the same table on the host from the runs `make test-student` kept (one VM session: the
browser does every lab in JupyterLab as the lab user, and each lab's results and executed
notebook are kept): runs from each lab's record, notebook from the time Run All Cells took in
the browser (<kept>/quick/times.json; the kernel's start-up is not in it), else from the
notebook's own cell timings (first cell's start to last cell's reply), as grading/run_master.py
records them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT / "notebooks"))
sys.path.insert(0, str(KIT))

import labkit  # noqa: E402

LABS = ("lab1", "lab2", "lab3", "lab4")
TARGET_LAB, TARGET_SUITE = 1.3, 1.25


def lab_user():
    import pwd
    import re
    unit = Path("/etc/systemd/system/cclab-jupyter.service")
    m = re.search(r"^User=(.*)$", unit.read_text(), re.M) if unit.is_file() else None
    return pwd.getpwnam(m.group(1)) if m else None


def run_notebook(lab: str) -> tuple[float, float]:
    """(notebook seconds, runs seconds, kept networks) of one quick-mode run of the lab's
    master."""
    user = lab_user()
    base = Path(tempfile.mkdtemp(prefix=f"bench-{lab}-", dir=user.pw_dir if user else None))
    cmd = [sys.executable, str(KIT / "grading" / "run_master.py"), lab, "--mode", "quick",
           "--work", str(base)]
    env = dict(os.environ, CCLAB_KIT=str(KIT), MPLBACKEND="Agg")
    if user is not None and os.geteuid() == 0:
        os.chown(base, user.pw_uid, user.pw_gid)
        cmd = ["runuser", "-u", user.pw_name, "--"] + cmd
        env["HOME"] = user.pw_dir
    began = time.monotonic()
    r = subprocess.run(cmd, env=env, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    took = time.monotonic() - began
    if r.returncode != 0:
        raise SystemExit(f"lab_overhead: {lab} failed: {r.stderr.strip().splitlines()[-1:]}")
    rec = json.loads((base / lab / "submission" / lab / "record.json").read_text())
    return took, float(rec["seconds"]), networks(base / lab / "submission" / lab)


def networks(results: Path) -> str:
    """"kept/runs": how many of a lab's runs took the network of the run before them
    (runner.keep_network) instead of building one; runs made before that say nothing."""
    runs = [m for m in results.glob("*/*/manifest.json") if ".superseded-" not in m.parent.name]
    kept = sum(json.loads(m.read_text()).get("network") == "kept" for m in runs)
    return f"{kept}/{len(runs)}"


def _stamp(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def kept_notebook(kept: Path, lab: str) -> tuple[float, float]:
    """(notebook seconds, runs seconds, kept networks) of a lab run a make test guest kept in
    kept/quick/."""
    base = kept / "quick"
    rec = base / lab / "record.json"
    if not rec.is_file():
        raise SystemExit(f"lab_overhead: no kept quick-mode run of {lab} in {base}")
    runs = float(json.loads(rec.read_text())["seconds"])
    times = base / "times.json"
    if times.is_file() and lab in json.loads(times.read_text()):
        return float(json.loads(times.read_text())[lab]), runs, networks(base / lab)
    nb = json.loads((base / f"{lab}.ipynb").read_text())
    timing = [c["metadata"].get("execution") or {} for c in nb["cells"] if c["cell_type"] == "code"]
    timing = [t for t in timing if "iopub.execute_input" in t and "shell.execute_reply" in t]
    if not timing:
        raise SystemExit(f"lab_overhead: {base / (lab + '.ipynb')} has no cell timings")
    return (_stamp(timing[-1]["shell.execute_reply"]) - _stamp(timing[0]["iopub.execute_input"]),
            runs, networks(base / lab))


def main(argv=None) -> int:
    labs = list(argv if argv is not None else sys.argv[1:])
    kept = None
    if "--kept" in labs:
        i = labs.index("--kept")
        if i + 1 >= len(labs):
            print("lab_overhead: --kept needs the folder a make test guest kept its runs in",
                  file=sys.stderr)
            return 2
        kept = Path(labs[i + 1])
        del labs[i:i + 2]
    labs = labs or list(LABS)
    bad = [lab for lab in labs if lab not in LABS]
    if bad:
        print(f"lab_overhead: no lab {bad[0]} (labs: {', '.join(LABS)})", file=sys.stderr)
        return 2
    rows = []
    print(f"{'lab':5} {'notebook s':>10} {'runs s':>8} {'flows s':>8} {'runs/flows':>10} "
          f"{'notebook/flows':>14} {'kept':>6}", flush=True)
    for lab in labs:
        flows = labkit.flow_seconds(lab, "quick")
        notebook, runs, shared = kept_notebook(kept, lab) if kept else run_notebook(lab)
        rows.append((lab, notebook, runs, flows))
        mark = "" if runs / flows <= TARGET_LAB else f"  (target {TARGET_LAB})"
        print(f"{lab:5} {notebook:10.0f} {runs:8.0f} {flows:8.0f} {runs / flows:10.2f} "
              f"{notebook / flows:14.2f} {shared:>6}{mark}", flush=True)
    n, r, f = (sum(x[i] for x in rows) for i in (1, 2, 3))
    print(f"{'all':5} {n:10.0f} {r:8.0f} {f:8.0f} {r / f:10.2f} {n / f:14.2f}"
          + ("" if r / f <= TARGET_SUITE else f"  (target {TARGET_SUITE})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

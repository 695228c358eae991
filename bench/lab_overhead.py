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
After the table, for each lab, how much later than planned its runs' flows ended: over the lab's
runs, the last flow's data end (flows.csv t_end, from iperf3's own report) less its planned end
(start + duration), summed.  iperf3's connection and parameter exchange comes before each flow's
data: about 0.3 s on a short path in the software-emulated VM, about 3 s on lab 4's 600 ms GEO
path.  That time is in `runs`, not in `flows`; it is the path's, not the engine's.
Then where each lab's `runs` went, from its run folders' manifests: `in runs`, each kept run's
t = 0 to its manifest's last write (its flows as they ran, its tail, its clean-up and tables),
with the tails alone; `again`, the runs the fidelity verdict refused and the runner made again
(how many, and their time); `outside`, the rest (before t = 0: building or changing the network,
starting the servers; after the tables: the verdict and the lab's own steps, such as lab 1's
tshark on its capture), in all and per run made.
The targets (issue 15) are runs/flows <= 1.3 for every lab and <= 1.25 over the quick suite.
Nothing is asserted: the figures depend on the host, and this only prints them.

    python3 bench/lab_overhead.py --kept build/student-runs/<time> [lab1 ...]

prints the same table on the host from the runs `make test-student` kept (one VM session: the
browser does every lab in JupyterLab as the lab user, and each lab's results and executed
notebook are kept): runs from each lab's record, notebook from the time Run All Cells took in
the browser (<kept>/quick/times.json; the kernel's start-up is not in it), else from the
notebook's own cell timings (first cell's start to last cell's reply), as grading/run_master.py
records them.

When the kept notebooks carry cell timings (each code cell's metadata.execution, written by
JupyterLab with its recordTiming setting, which vm/provision.sh turns on, and by nbclient), a
breakdown of where each lab's notebook time went follows the table:
- timed: how many of the notebook's code cells carry a timing (a notebook saved before its last
  cells ran has none for those);
- cells: the sum of the timed cells' times, each from its iopub.execute_input to its
  shell.execute_reply;
- gaps: the time between cells, each cell's start less the previous one's reply (the
  browser and kernel idle between cells), summed;
- experiments: the time of the cells that ran the lab's experiments (labkit.run_lab, or
  kmodlab's run as the notebook imports it), against the lab's `runs` seconds: the rest of
  those cells is their own loading and checking;
- other cells: the rest of the cells' time (imports, analysis, plots, checks), and the 5
  slowest of them with their seconds, their index in the notebook and first line.
These too are figures only.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT / "notebooks"))
sys.path.insert(0, str(KIT))

import labkit  # noqa: E402
from cclab.results import SUPERSEDED  # noqa: E402

LABS = ("lab1", "lab2", "lab3", "lab4")
TARGET_LAB, TARGET_SUITE = 1.3, 1.25


def lab_user():
    import pwd
    import re
    unit = Path("/etc/systemd/system/cclab-jupyter.service")
    m = re.search(r"^User=(.*)$", unit.read_text(), re.M) if unit.is_file() else None
    return pwd.getpwnam(m.group(1)) if m else None


def run_notebook(lab: str) -> tuple[float, float, Path]:
    """(notebook seconds, runs seconds, results folder) of one quick-mode run of the lab's
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
    results = base / lab / "submission" / lab
    return took, float(rec["seconds"]), results


def networks(times: dict) -> str:
    """"kept/runs" from a lab's run_times(): how many of its runs took the network of the run
    before them (runner.keep_network) instead of building one; runs made before that say
    nothing."""
    return f"{times['kept']}/{times['made'] - times['again']}"


def late_data(results: Path) -> tuple[float, int]:
    """(seconds, runs): over a lab's runs (not the superseded ones) that have only timed flows,
    how long after its planned end (start + duration) each run's last flow's data ended
    (flows.csv t_end), summed; a run whose flows ended early counts 0."""
    total, n = 0.0, 0
    for path in sorted(results.glob("*/*/flows.csv")):
        if SUPERSEDED in path.parent.name:
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        try:
            planned = max(float(r["start"]) + float(r["duration"]) for r in rows)
            ended = max(float(r["t_end"]) for r in rows)
        except (KeyError, ValueError):          # a sized flow, a flow without data, no rows
            continue
        total += max(0.0, ended - planned)
        n += 1
    return total, n


def run_times(results: Path) -> dict:
    """Where a lab's runs spent their time, from its run folders' manifests (the runs made again
    included): made (run folders), again (of them, runs the judge refused and the runner made
    again: <folder>.superseded-<k>), own (over the runs kept, each run's t = 0 to its manifest's
    last write: its flows as they ran, its tail, its clean-up and tables), again_s (the same
    for the runs made again), tails (the kept runs' `tail`) and kept (of the kept runs, those
    that took the network of the run before them).  A manifest without its times (a run stopped
    before t = 0) counts in `made` and `kept` only."""
    out = {"made": 0, "again": 0, "kept": 0, "own": 0.0, "again_s": 0.0, "tails": 0.0}
    for path in sorted(results.glob("*/*/manifest.json")):
        m = json.loads(path.read_text())
        again = SUPERSEDED in path.parent.name
        out["made"] += 1
        out["again"] += again
        out["kept"] += not again and m.get("network") == "kept"
        try:
            own = _stamp(m["end"]) - float(m["start_epoch"])
        except (KeyError, TypeError, ValueError, AttributeError):   # absent, None, not a time
            continue
        out["again_s" if again else "own"] += own
        if not again:
            out["tails"] += float((m.get("spec") or {}).get("tail") or 0.0)
    return out


def print_run_times(rows) -> None:
    """For each (lab, runs seconds, run_times()), the runs' time split: in the runs, made
    again, and outside them (before t = 0, and after the tables: the verdict, the lab's own
    steps), that last also per run made."""
    print("\nwhere the runs' time went (s): `in runs` is each kept run's t = 0 to its manifest's "
          "last write (its flows as they ran, with their late starts, its tail, its tables; the "
          "tails alone in brackets); `again` the runs the fidelity verdict refused and the "
          "runner made again; `outside` the rest: before t = 0 (building or changing the "
          "network, starting the servers) and after the tables (the verdict, the lab's own "
          "steps)")
    print(f"{'lab':5} {'runs':>7} {'in runs':>8} {'(tails)':>8} {'again':>11} {'outside':>8} "
          f"{'made':>5} {'outside/run':>11}")
    for lab, runs, t in rows:
        outside = runs - t["own"] - t["again_s"]
        per = outside / t["made"] if t["made"] else float("nan")
        again = f"{t['again']} ({t['again_s']:.1f})"
        print(f"{lab:5} {runs:7.1f} {t['own']:8.1f} {'(' + format(t['tails'], '.1f') + ')':>8} "
              f"{again:>11} {outside:8.1f} {t['made']:5d} {per:11.1f}")


def _stamp(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def kept_notebook(kept: Path, lab: str) -> tuple[float, float, Path]:
    """(notebook seconds, runs seconds, results folder) of a lab run a make test guest kept in
    kept/quick/."""
    base = kept / "quick"
    rec = base / lab / "record.json"
    if not rec.is_file():
        raise SystemExit(f"lab_overhead: no kept quick-mode run of {lab} in {base}")
    runs = float(json.loads(rec.read_text())["seconds"])
    times = base / "times.json"
    if times.is_file() and lab in json.loads(times.read_text()):
        return float(json.loads(times.read_text())[lab]), runs, base / lab
    nb = json.loads((base / f"{lab}.ipynb").read_text())
    timing = [c["metadata"].get("execution") or {} for c in nb["cells"] if c["cell_type"] == "code"]
    timing = [t for t in timing if "iopub.execute_input" in t and "shell.execute_reply" in t]
    if not timing:
        raise SystemExit(f"lab_overhead: {base / (lab + '.ipynb')} has no cell timings")
    return (_stamp(timing[-1]["shell.execute_reply"]) - _stamp(timing[0]["iopub.execute_input"]),
            runs, base / lab)


# A cell runs a lab's experiments when it calls labkit.run_lab (the notebook's labkit.run_lab,
# or run_lab imported from labkit) or kmodlab's run (labs 3 and 4: `import kmodlab as KM`,
# then KM.run(LAB, MODE)).
RUN_LAB = re.compile(r"(?<![\w.])(?:labkit\.)?run_lab\s*\(")
KMOD_IMPORT = re.compile(r"^\s*(?:from\s+[\w.]+\s+)?import\s+(?:[\w.]+\s*(?:as\s+\w+)?\s*,\s*)*"
                         r"kmodlab(?:\s+as\s+(\w+))?", re.M)
SLOWEST = 5


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _code_lines(src: str) -> str:
    """The cell's source without its comment lines (a commented-out call runs nothing)."""
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("#"))


def experiment_cell(src: str, kmod_names=("kmodlab",)) -> bool:
    """Whether a code cell's source runs the lab's experiments."""
    code = _code_lines(src)
    if RUN_LAB.search(code):
        return True
    return any(re.search(rf"(?<![\w.]){re.escape(name)}\.run\s*\(", code) for name in kmod_names)


def _timing(cell: dict) -> tuple[float, float] | None:
    """(start, reply) of a code cell's last run, in seconds since the epoch; None untimed (or
    a reply older than the start: a cell saved while it ran, with an earlier run's reply)."""
    t = (cell.get("metadata") or {}).get("execution") or {}
    start = t.get("iopub.execute_input") or t.get("shell.execute_reply.started") \
        or t.get("iopub.status.busy")
    reply = t.get("shell.execute_reply")
    if not start or not reply:
        return None
    try:
        start, reply = _stamp(start), _stamp(reply)
    except ValueError:
        return None
    return (start, reply) if reply >= start else None


def _first_line(src: str) -> str:
    return next((line.strip() for line in src.splitlines() if line.strip()), "")


def cell_breakdown(nb: dict, runs: float) -> dict | None:
    """Where a notebook's time went, from its cells' timings (see the module's docstring); None
    when no code cell carries a timing.  Seconds throughout; `slowest` holds (seconds, cell
    index in the notebook, first line) of the slowest cells that ran no experiment."""
    cells = nb.get("cells") or []
    code = [(i, c) for i, c in enumerate(cells) if c.get("cell_type") == "code"]
    kmod = {"kmodlab"} | {m.group(1) for _, c in code for m in KMOD_IMPORT.finditer(_source(c))
                          if m.group(1)}
    timed = []
    for i, c in code:
        t = _timing(c)
        if t is not None:
            timed.append((t[0], t[1], i, _source(c)))
    if not timed:
        return None
    timed.sort()
    gaps = sum(max(0.0, start - prev[1]) for prev, (start, *_) in zip(timed, timed[1:]))
    exp, others = [], []
    for start, reply, i, src in timed:              # each cell's source matched once
        if experiment_cell(src, kmod):
            exp.append(reply - start)
        else:
            others.append((reply - start, i, src))
    total = sum(reply - start for start, reply, *_ in timed)
    return {
        "code": len(code), "timed": len(timed),
        "cells": total, "gaps": gaps, "span": timed[-1][1] - timed[0][0],
        "experiment_cells": len(exp), "experiments": sum(exp), "runs": runs,
        "others": sum(s for s, _, _ in others),
        "slowest": [(s, i, _first_line(src)) for s, i, src in
                    sorted(others, key=lambda x: -x[0])[:SLOWEST]],
    }


def print_breakdowns(kept: Path, labs) -> None:
    """The cell-timing breakdown of each (lab, runs seconds) whose kept notebook has timings;
    nothing but a note when none has."""
    found = {}
    for lab, runs in labs:
        path = kept / "quick" / f"{lab}.ipynb"
        b = cell_breakdown(json.loads(path.read_text()), runs) if path.is_file() else None
        found[lab] = b
    if not any(found.values()):
        print("\nno cell timings in the kept notebooks (JupyterLab's recordTiming, "
              "vm/provision.sh, writes them)")
        return
    print("\ncell timings of the kept notebooks (seconds):")
    for lab, b in found.items():
        if b is None:
            print(f"{lab}: no cell timings")
            continue
        print(f"{lab}: {b['timed']} of {b['code']} code cells timed; cells {b['cells']:.1f}, "
              f"gaps {b['gaps']:.1f} (first start to last reply {b['span']:.1f})")
        if b["experiment_cells"]:
            print(f"  experiments {b['experiments']:.1f} in {b['experiment_cells']} cell(s), "
                  f"runs {b['runs']:.1f}: {b['experiments'] - b['runs']:.1f} of those cells "
                  f"outside the runs")
        else:
            print(f"  experiments: no timed cell ran them (runs {b['runs']:.1f})")
        print(f"  other cells {b['others']:.1f}; the slowest:")
        for sec, i, line in b["slowest"]:
            print(f"  {sec:8.1f}  cell {i:<3} {line[:70]}")


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
    rows, late, spent = [], [], []
    print(f"{'lab':5} {'notebook s':>10} {'runs s':>8} {'flows s':>8} {'runs/flows':>10} "
          f"{'notebook/flows':>14} {'kept':>6}", flush=True)
    for lab in labs:
        flows = labkit.flow_seconds(lab, "quick")
        notebook, runs, results = kept_notebook(kept, lab) if kept else run_notebook(lab)
        times = run_times(results)              # the lab's manifests, read once
        shared = networks(times)
        rows.append((lab, notebook, runs, flows))
        late.append((lab, *late_data(results)))
        spent.append((lab, runs, times))
        mark = "" if runs / flows <= TARGET_LAB else f"  (target {TARGET_LAB})"
        print(f"{lab:5} {notebook:10.0f} {runs:8.0f} {flows:8.0f} {runs / flows:10.2f} "
              f"{notebook / flows:14.2f} {shared:>6}{mark}", flush=True)
    n, r, f = (sum(x[i] for x in rows) for i in (1, 2, 3))
    print(f"{'all':5} {n:10.0f} {r:8.0f} {f:8.0f} {r / f:10.2f} {n / f:14.2f}"
          + ("" if r / f <= TARGET_SUITE else f"  (target {TARGET_SUITE})"))
    print("\nhow much later than planned the runs' last flows ended (iperf3's exchanges before "
          "each flow's data; in runs s, not in flows s):")
    for lab, sec, n in late:
        print(f"{lab}: {sec:.1f} s over {n} run(s)")
    print_run_times(spent)
    if kept:
        print_breakdowns(kept, [(lab, runs) for lab, _, runs, _ in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())

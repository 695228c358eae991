"""Run lab master notebooks headless, as a student would in the lab VM, and keep their results.

    python3 grading/run_master.py lab1 [lab2 ...] [--mode quick|full] [--keep results/scorecard]
                                  [--timeout SEC] [--results DIR | --ccas A,B,...]

Each master (notebooks/<lab>.ipynb, with its answers and hidden tests) runs in a scratch folder
with the support files the student version ships with (grading/build.py's SUPPORT, without the
autograder's engine zip: the kit is on hand here).  The notebook runs its experiments for real
in the chosen mode, its own public and hidden test cells check them, and a failing cell stops
the run.  The progress of the run (cell by cell, with the time taken) goes to standard error.

With --keep DIR, a lab that ran to the end is kept as DIR/<mode>/<lab>/ (the results the
notebook saved into submission/<lab>/) and DIR/<mode>/<lab>.ipynb (the executed notebook).  It
replaces an earlier run of that lab and mode only once complete; a failed run keeps nothing.
`python3 -m grading.scorecard` reads DIR; instructors take reference bands from such runs.

With --ccas A,B,... (lab 2, whose field is every algorithm the VM offers), the lab's experiments
run limited to those congestion controls before the master starts (labkit.run_lab's `ccas`: the
flows of the others are left out with their time slots); the master then finds them saved and
analyses them.  A full-mode lab 2 limited to the algorithms the scorecard's rows compare takes
about 1.5 h instead of 5 h; the rows about the whole field say which algorithms the run holds.

With --results DIR, the master does not run its experiments: it starts from results saved
earlier in that mode, DIR/<lab>/ (e.g. a reference run made with labkit.run_lab, see
grading/README.md), and its cells only load, analyse and check those (CCLAB_REPLAY=1, as
the grader runs a submission).

Needs root or the lab VM's lab command (the lab user runs experiments through sudo
/usr/local/sbin/cclab-lab-run, as its notebooks do), except with --results: run it inside the lab
VM, e.g. through vm/run.sh, or `make scorecard`.  With --work DIR each lab runs in DIR/<lab>/,
which is kept.  Exit status: 0 all labs passed, 1 a lab failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from grading.build import ENGINE, SUPPORT  # noqa: E402
from labs.lab_command import CCA_NAME  # noqa: E402  (the names the lab command accepts)

MODES = ("quick", "full")
REAL_MARK = "results look real"      # what labs 1-4's own record check prints when it passes
# What a finished run has saved in submission/<lab>/: labs 1-4 a record of their experiment runs
# (checked by the notebook, which prints REAL_MARK), lab 5 the log of its live connections.
SAVED = {"lab5": "live.csv"}
# A full-mode lab runs its experiments in one cell: lab 3's took about 40 min in the software-
# emulated VM, lab 2's (every algorithm the VM offers) about 5 h.
FULL_CELL_TIMEOUT = 6 * 3600


class LabFailed(RuntimeError):
    """The master did not run to the end, or its results did not pass its own checks."""


LAB_COMMAND = "/usr/local/sbin/cclab-lab-run"      # labkit.HELPER: the lab user's one sudo command
# The labs whose experiments take a field of congestion controls (run_lab's `ccas`).
CCAS_LABS = ("lab2",)


def lab_command_allowed() -> bool:
    """Whether this user may run the lab command through sudo without a password."""
    import subprocess
    try:
        r = subprocess.run(["sudo", "-n", "-l", LAB_COMMAND], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


# Lines of a lab's run that are relayed while its cell runs: labkit/kmodlab's "lab3: <experiment>:
# ..." per experiment, and the runner's "[run 2/3] ..." per run and "done: ..." per experiment.
PROGRESS = re.compile(r"^(lab\d: |\[run \d+/\d+\] |done: \d+ run)")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare(lab: str, work: Path, results: Path | None = None) -> Path:
    """Copy the master and its support files into `work`, and the saved results `results`/<lab>
    (if given) as its submission/<lab>; returns the notebook's path."""
    shutil.copy(KIT / "notebooks" / f"{lab}.ipynb", work)
    for src, name in SUPPORT[lab]:
        if src != ENGINE:
            shutil.copy(KIT / src, work / name)
    if results is not None:
        shutil.copytree(results / lab, work / "submission" / lab, symlinks=False)
    return work / f"{lab}.ipynb"


def parse_ccas(text: str) -> list[str]:
    """--ccas's comma-separated names, in order; ValueError naming the first bad one."""
    names = [c.strip() for c in text.split(",")]
    for c in names:
        if not CCA_NAME.match(c):
            raise ValueError(f"--ccas: {c!r} is not a congestion control's name")
    if len(set(names)) != len(names):
        raise ValueError(f"--ccas: {next(c for c in names if names.count(c) > 1)} is named twice")
    return names


@contextlib.contextmanager
def environment(**given):
    """This process's environment with `given` set (None: left out) for the block, and as it
    was after it."""
    def put(values):
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    saved = {k: os.environ.get(k) for k in given}
    try:
        put(given)
        yield
    finally:
        put(saved)


def run_limited(lab: str, mode: str, work: Path, ccas: list[str]) -> None:
    """Run `lab`'s experiments limited to `ccas` into work/submission/<lab> (as its master's run
    cell would, through the lab command when not root); the master then finds them saved."""
    where = str(KIT / "notebooks")
    if where not in sys.path:
        sys.path.insert(0, where)
    import labkit
    _say(f"[{lab}] running its {mode}-mode experiments limited to {', '.join(ccas)}")
    try:
        with environment(CCLAB_KIT=str(KIT)):
            labkit.run_lab(lab, mode, root=work / "submission", ccas=ccas,
                           progress=lambda line: _say(f"[{lab}] {line}") if PROGRESS.match(line) else None)
    except Exception as e:              # the lab command's or the engine's one-line error
        raise LabFailed(f"{lab}: the run limited to {', '.join(ccas)} failed: "
                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def saved_mode(lab: str, results: Path) -> str:
    """The mode of the results saved in `results`/<lab>/ (its record.json); LabFailed if none."""
    import json
    rec = results / lab / "record.json"
    try:
        return json.loads(rec.read_text())["mode"]
    except (OSError, ValueError, KeyError, TypeError):
        raise LabFailed(f"{lab}: no saved results with a record in {results / lab}") from None


def execute(lab: str, work: Path, mode: str, timeout: int = 900, export: bool = False,
            replay: bool = False):
    """Run the master prepared in `work` in `mode`; returns (executed notebook, seconds).

    The export cell (otter's zip for students) is left out unless `export`.  With `replay` the
    notebook only loads the results prepared in `work` (CCLAB_REPLAY=1: no module is loaded,
    nothing is run).  Raises LabFailed with the failing cell's error, or when the run's own
    record check did not pass."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(work / f"{lab}.ipynb", as_version=4)
    if not export:
        nb.cells = [c for c in nb.cells if "grader.export" not in c.source]
    env = {"CCLAB_MODE": mode, "CCLAB_KIT": str(KIT), "MPLBACKEND": "Agg",
           "CCLAB_REPLAY": "1" if replay else None, "CCLAB_QUICK": None}
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    began = time.monotonic()
    last = [began]

    def done(cell, cell_index, **_):
        now = time.monotonic()
        n = code.index(cell_index) + 1 if cell_index in code else 0
        if now - last[0] >= 5 or n == len(code):          # slow cells only, and the last one
            _say(f"[{lab}] cell {n}/{len(code)} done ({now - last[0]:.0f} s; {now - began:.0f} s in all)")
        last[0] = now

    class Client(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            # the engine's progress lines, as the notebook prints them, relayed as they come:
            # a lab's run cell takes many minutes in full mode
            if msg.get("msg_type") == "stream":
                for line in msg["content"].get("text", "").splitlines():
                    if PROGRESS.match(line):
                        _say(f"[{lab}] {line}")
            return super().output(outs, msg, display_id, cell_index)

    client = Client(nb, timeout=timeout, kernel_name="python3",
                    resources={"metadata": {"path": str(work)}})
    client.on_cell_executed = done
    kernel = {}

    def started(**_):                   # the kernel's process, to tell how it ended if it dies
        kernel["proc"] = getattr(getattr(client.km, "provisioner", None), "process", None)

    def cell_started(cell_index, **_):
        kernel["cell"] = code.index(cell_index) + 1 if cell_index in code else "?"
    client.on_notebook_start = started
    client.on_cell_start = cell_started
    try:
        with environment(**env):        # the kernel inherits it
            client.execute()
    except CellExecutionError as e:
        where = next((code.index(i) + 1 for i, c in enumerate(nb.cells)
                      if i in code and any(o.get("output_type") == "error" for o in c.get("outputs", []))), "?")
        raise LabFailed(f"{lab}: code cell {where} failed: {e.ename}: {e.evalue}".strip()) from None
    except Exception as e:                                  # a dead kernel, a timeout
        raise LabFailed(f"{lab}: the notebook stopped in code cell {kernel.get('cell', '?')}: {type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}{_ended(kernel.get('proc'))}") from None
    took = time.monotonic() - began
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    saved_file = SAVED.get(lab, "record.json")
    if saved_file == "record.json" and REAL_MARK not in text:
        raise LabFailed(f"{lab}: the run's own record check did not print '{REAL_MARK}'")
    if not (work / "submission" / lab / saved_file).is_file():
        raise LabFailed(f"{lab}: the run saved no submission/{lab}/{saved_file}")
    nbformat.write(nb, work / f"{lab}.ipynb")
    return nb, took


def _ended(proc) -> str:
    """How the notebook's kernel process ended, when it did: its exit status or signal."""
    rc = proc.poll() if proc is not None else None
    if rc is None:
        return ""
    if rc < 0:
        try:
            return f" (the kernel was killed by {signal.Signals(-rc).name})"
        except ValueError:
            return f" (the kernel was killed by signal {-rc})"
    return f" (the kernel exited with status {rc})"


def keep(lab: str, work: Path, mode: str, dest: Path) -> Path:
    """Move a finished run's results to dest/<mode>/<lab>/ (replacing an older run only once
    the new one is in place) and its executed notebook beside them."""
    base = dest / mode
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{lab}-", dir=base))
    try:
        shutil.copytree(work / "submission" / lab, staging / lab)
        shutil.copy(work / f"{lab}.ipynb", staging / f"{lab}.ipynb")
        old = base / f".{lab}-old"
        shutil.rmtree(old, ignore_errors=True)
        if (base / lab).exists():
            (base / lab).rename(old)
        (staging / lab).rename(base / lab)
        (staging / f"{lab}.ipynb").replace(base / f"{lab}.ipynb")
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return base / lab


def run(lab: str, mode: str, keep_dir: Path | None = None, timeout: int = 900,
        work: Path | None = None, results: Path | None = None, ccas: list[str] | None = None):
    """prepare (+ run_limited) + execute (+ keep); returns (work folder, executed notebook,
    seconds)."""
    made = saved_mode(lab, results) if results is not None else mode
    if made != mode:
        raise LabFailed(f"{lab}: the results in {results / lab} were made in {made} mode, not {mode}")
    own = work is None
    work = Path(tempfile.mkdtemp(prefix=f"cclab-{lab}-")) if own else work
    work.mkdir(parents=True, exist_ok=True)
    try:
        prepare(lab, work, results)
        if ccas:
            run_limited(lab, mode, work, ccas)
        nb, took = execute(lab, work, mode, timeout, replay=results is not None)
        if keep_dir is not None:
            keep(lab, work, mode, keep_dir)
        return work, nb, took
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="run lab master notebooks headless and keep their results")
    ap.add_argument("labs", nargs="+", metavar="LAB", help=f"one or more of {', '.join(SUPPORT)}")
    ap.add_argument("--mode", default="quick", choices=MODES)
    ap.add_argument("--keep", metavar="DIR", help="keep each finished run in DIR/<mode>/<lab>/")
    ap.add_argument("--timeout", type=int, help="seconds per cell (default: 1800 in quick mode, "
                    f"{FULL_CELL_TIMEOUT} in full mode)")
    ap.add_argument("--work", metavar="DIR", help="run in DIR (kept afterwards) instead of a "
                    "scratch folder that is removed")
    ap.add_argument("--results", metavar="DIR", help="start from the results saved in DIR/<lab>/ "
                    "instead of running the experiments")
    ap.add_argument("--ccas", metavar="A,B,...", help="lab 2: run its experiments limited to "
                    "these congestion controls (a reference run)")
    a = ap.parse_args(argv)
    if a.timeout is None:
        a.timeout = 1800 if a.mode == "quick" else FULL_CELL_TIMEOUT
    bad = [lab for lab in a.labs if lab not in SUPPORT]
    if bad:
        print(f"run_master: unknown lab {bad[0]} (labs: {', '.join(SUPPORT)})", file=sys.stderr)
        return 2
    ccas = None
    if a.ccas is not None:
        try:
            ccas = parse_ccas(a.ccas)
        except ValueError as e:
            print(f"run_master: {e}", file=sys.stderr)
            return 2
        if a.results:
            print("run_master: --ccas runs the experiments, --results starts from saved ones: "
                  "give one of them", file=sys.stderr)
            return 2
        other = [lab for lab in a.labs if lab not in CCAS_LABS]
        if other:
            print(f"run_master: --ccas limits the field of algorithms of {', '.join(CCAS_LABS)}; "
                  f"{other[0]} has none", file=sys.stderr)
            return 2
    if a.timeout <= 0:
        print("run_master: --timeout must be a positive number of seconds", file=sys.stderr)
        return 2
    if os.geteuid() != 0 and not a.results and not lab_command_allowed():
        print("run_master: the labs need root or the lab command (sudo "
              f"{LAB_COMMAND}): run it in the lab VM as its lab user or as root", file=sys.stderr)
        return 2
    if a.work is not None and not Path(a.work).is_dir():
        print(f"run_master: --work {a.work}: no such folder", file=sys.stderr)
        return 2
    failed = 0
    for lab in a.labs:
        _say(f"[{lab}] running the master in {a.mode} mode")
        try:
            _, _, took = run(lab, a.mode, Path(a.keep) if a.keep else None, a.timeout,
                             work=Path(a.work) / lab if a.work else None,
                             results=Path(a.results) if a.results else None, ccas=ccas)
        except LabFailed as e:
            print(f"run_master: {e}", file=sys.stderr)
            failed += 1
            continue
        where = f"; kept in {Path(a.keep) / a.mode / lab}" if a.keep else ""
        print(f"{lab}: passed its public and hidden tests in {a.mode} mode in {took:.0f} s{where}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

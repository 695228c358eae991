"""The fast grading engine: otter's own test files, run in a forked, sandboxed child per submission.

`otter run` starts a Python, imports otter (~1.5 s), starts a Jupyter kernel (~1.5 s) and
executes the notebook through it: ~7 s per submission on a 2-core machine, ~12 min for 200.
This engine does the same work with the start-up paid once: a parent process imports otter,
pandas and matplotlib, then forks one child per submission.  The child
  * starts a new session, sets RLIMIT_AS / RLIMIT_FSIZE / RLIMIT_CORE (and RLIMIT_NPROC),
  * drops to the unprivileged user (setgroups([]), setgid, setuid) when the parent is root,
  * executes the notebook's code cells in order in one namespace, as a kernel would (IPython's
    input transformer turns magics into calls; a cell that raises is recorded and skipped, as
    otter does with ignore_errors), without otter's own `grader.*` calls,
  * runs every test file of the autograder (tests/*.py, public and hidden cases) with otter's
    `create_test_file(...).run(namespace)` and writes the results as JSON.  The parent reads the
    test files before it forks (`load_tests`), so the child needs no access to them: the
    autograder folder stays readable by the grading user only and a submission cannot read the
    hidden tests.
The parent kills a child that outlives its time limit (SIGKILL to its session: no kernel
process exists to escape it).  A MemoryError anywhere in the child ends it with status "memory".
Grades are otter's: the same test files, the same points; `grade.py --engine otter` runs the
real `otter run` instead, for comparison.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import zipfile
from pathlib import Path

GRADER_LINE = ("grader.", "import otter", "grader =", "# Initialize Otter")


def preload() -> None:
    """Import everything a child needs and exercise the code paths the labs use (CSV parsing,
    groupby/merge, line and step plots, layout), so each forked child starts warm."""
    import io
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
    df = pd.read_csv(io.StringIO("k,t,v,s\na,0.1,1,x\na,0.2,2,x\nb,0.1,3,y\n"))
    g = df.groupby(["k", "s"]).agg(v=("v", "sum"), t=("t", "min"), e=("t", "max")).reset_index()
    g.merge(df, on=["k", "s"], how="left").groupby("k")["v_x"].median()
    pd.Series({("a", "b"): 1.0}).unstack(0)
    pd.DataFrame({"x": [1.0]}, index=["r"])
    np.arange(0, 1, 0.1)
    for shape in ((1, 2), (2, 2), (2, 1), (1, 1)):
        fig, axes = plt.subplots(*shape, figsize=(6, 3), sharex=True)
        ax = np.atleast_1d(axes).ravel()[0]
        ax.plot([0, 1], [0, 1], ".", ms=2, label="x"); ax.step([0, 1], [1, 0], where="post")
        ax.axvline(0.5); ax.set_title("t"); ax.set_xlabel("x"); ax.set_ylabel("y"); ax.legend()
        fig.tight_layout()
        plt.close("all")
    pd.Series({"a": 1.0, "b": 2.0}).plot.bar(); plt.close("all")
    pd.Series({"a": 1.0}).plot.barh(); plt.close("all")
    import hashlib, json, importlib.util  # noqa: F401,E401
    import nbformat  # noqa: F401
    from IPython.core.inputtransformer2 import TransformerManager
    TransformerManager().transform_cell("x = 1\n")
    from otter.test_files import create_test_file  # noqa: F401
    from otter.test_files.exception_test import ExceptionTestFile  # noqa: F401
    import doctest  # noqa: F401
    import gc
    gc.collect()
    gc.freeze()                 # keep the warm heap shared with the children (no CoW on gc)


def unpack_autograder(zip_path: Path, dest: Path) -> Path:
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(dest)
    return dest


def _cells(nb_path: Path) -> list[str]:
    import nbformat
    from IPython.core.inputtransformer2 import TransformerManager
    tm = TransformerManager()
    nb = nbformat.read(nb_path, as_version=4)
    out = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        src = "\n".join(l for l in c.source.splitlines() if not l.lstrip().startswith(GRADER_LINE))
        if src.strip():
            out.append(tm.transform_cell(src))
    return out


def load_tests(tests_dir: Path) -> list:
    """The autograder's test files, parsed (in the parent, before any child runs)."""
    from otter.test_files import create_test_file
    return [create_test_file(str(path), None) for path in sorted(Path(tests_dir).glob("*.py"))]


def child(work: Path, tests, memory_mb: int, user) -> None:
    """Runs in the forked child; never returns."""
    code = 0
    try:
        os.setsid()
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 20, 512 << 20))
        if user is not None:
            uid, gid = user
            resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        os.chdir(work)
        os.environ.update({"HOME": str(work), "CCLAB_REPLAY": "1", "MPLBACKEND": "Agg",
                           "TMPDIR": str(work)})
        sys.path.insert(0, str(work))
        log = open(work / "log.txt", "w")
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        result = run_notebook(work, tests)
    except MemoryError:
        result, code = {"status": "memory"}, 3
    except BaseException as e:          # noqa: BLE001 -- anything: report it, never hang
        try:
            result, code = {"status": "error", "reason": f"{type(e).__name__}: {e}"}, 4
        except MemoryError:
            result, code = {"status": "memory"}, 3
    try:
        (work / "result.json").write_text(json.dumps(result, default=str))
    except BaseException:               # noqa: BLE001
        code = 5
    os._exit(code)


def run_notebook(work: Path, tests) -> dict:
    """Execute the notebook in `work`, then the tests (parsed test files, or a folder of them)."""
    import matplotlib.pyplot as plt
    from otter.test_files import create_test_file
    nbs = sorted(work.glob("*.ipynb"))
    if not nbs:
        return {"status": "missing", "reason": "no notebook in the submission"}
    # Figures are never drawn when grading: skip the layout pass (a third of a lab's run time).
    import matplotlib.figure
    matplotlib.figure.Figure.tight_layout = lambda self, *a, **k: None
    env = {"__name__": "__main__", "__builtins__": __builtins__}
    errors = []
    for i, src in enumerate(_cells(nbs[0])):
        try:
            exec(compile(src, f"<cell {i + 1}>", "exec"), env)
        except MemoryError:
            raise
        except BaseException as e:       # noqa: BLE001 -- a failing cell is the student's
            if isinstance(e, SystemExit) or isinstance(e, KeyboardInterrupt):
                errors.append(f"cell {i + 1}: {type(e).__name__}")
            else:
                errors.append(f"cell {i + 1}: {type(e).__name__}: {e}")
        finally:
            plt.close("all")
    if isinstance(tests, (str, Path)):
        tests = [create_test_file(str(path), None) for path in sorted(Path(tests).glob("*.py"))]
    results = []
    for tf in tests:
        tf.run(env)
        results.append({"name": tf.name, "score": tf.score, "possible": tf.possible,
                      "public": tf.summary(public_only=True),
                      "cases": [{"name": r.test_case.name, "hidden": r.test_case.hidden,
                                 "passed": r.passed, "message": r.message}
                                for r in tf.test_case_results]})
    return {"status": "graded", "tests": results, "cell_errors": errors}


def run_all(jobs: list[tuple[str, Path]], tests_dir: Path, parallel: int, timeout: float,
            memory_mb: int, user) -> dict[str, dict]:
    """jobs: (student, prepared work folder).  Returns {student: result dict}."""
    preload()
    tests = load_tests(tests_dir)
    pending = list(jobs)
    running: dict[int, tuple[str, Path, float, float]] = {}
    done: dict[str, dict] = {}
    while pending or running:
        while pending and len(running) < parallel:
            student, work = pending.pop(0)
            sys.stdout.flush(); sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                child(work, tests, memory_mb, user)
            now = time.monotonic()
            running[pid] = (student, work, now + timeout, now)
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for p, (student, work, deadline, began) in list(running.items()):
                if now > deadline:
                    try:
                        os.killpg(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    os.waitpid(p, 0)
                    del running[p]
                    done[student] = {"status": "timeout",
                                     "reason": f"stopped after {timeout:g} s (time limit)",
                                     "seconds": round(now - began, 2)}
            time.sleep(0.005)
            continue
        if pid not in running:
            continue
        student, work, _, began = running.pop(pid)
        try:
            os.killpg(pid, signal.SIGKILL)          # anything the submission left behind
        except (ProcessLookupError, PermissionError):
            pass
        res_file = work / "result.json"
        try:
            res = json.loads(res_file.read_text())
        except (OSError, ValueError):
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            res = {"status": "error", "reason": f"the grading process died (signal {sig}, "
                   f"exit {os.WEXITSTATUS(status) if os.WIFEXITED(status) else None})"}
        if res.get("status") == "memory":
            res["reason"] = f"stopped: the notebook exceeded the {memory_mb} MB memory limit"
        res["seconds"] = round(time.monotonic() - began, 2)
        done[student] = res
    return done

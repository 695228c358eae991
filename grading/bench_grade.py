"""How long does grading 200 submissions take on this machine?  (Target: <= 2 min.)

    python3 grading/bench_grade.py [--n 200] [--jobs 2] [--engine fast|otter]

Builds lab 1's autograder, makes N submissions from a genuine lab 1 run from the lab VM
(grading/fixtures.py real_lab1_results: three good ones for every one with edited results; the
copies are flagged as duplicates of each other, which the timing includes), grades them with grading/grade.py's pipeline
(sandboxed, in parallel) and prints the wall-clock time and the rate, and the CPU time the grading
took (on a shared machine the wall-clock time also counts the others' work).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))

from grading import build, fixtures, grade  # noqa: E402


def _cpu() -> float:
    """User and system time of this process and of the grading processes it has waited for."""
    import resource
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


GRADER_PYTHON = Path("/opt/cclab-grader/bin/python")     # make grader-venv's


def _grader_python() -> None:
    """As root, grade.py runs each submission as nobody, with a Python nobody can run: re-run
    this benchmark under make grader-venv's when there is one and this is not it."""
    if os.geteuid() == 0 and GRADER_PYTHON.is_file() and \
            Path(sys.executable).resolve() != GRADER_PYTHON.resolve() and \
            not os.environ.get("CCLAB_BENCH_REEXEC"):
        os.environ["CCLAB_BENCH_REEXEC"] = "1"
        os.execv(str(GRADER_PYTHON), [str(GRADER_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])


def main(argv=None) -> int:
    if argv is None:
        _grader_python()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--engine", choices=("fast", "otter"), default="fast")
    ap.add_argument("--target", type=float, default=120.0, help="s; exit 1 above it")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        d = build.build("lab1", t / "dist")
        master = d / "autograder" / "lab1.ipynb"
        samples = {"good": fixtures.lab1_submission(t / "s" / "good", master, real=0),
                   "fabricated": fixtures.lab1_submission(t / "s" / "fabricated", master, tamper="edit",
                                                          real=1)}
        subs = t / "subs"
        subs.mkdir()
        kinds = ["good", "good", "good", "fabricated"]
        for i in range(a.n):
            shutil.copytree(samples[kinds[i % len(kinds)]], subs / f"student{i:04d}")
        cpu0 = _cpu()
        began = time.monotonic()
        results = grade.grade_all(subs, build.autograder_zip(d), t / "out", jobs=a.jobs,
                                  engine=a.engine)
        took = time.monotonic() - began
        cpu = _cpu() - cpu0
        with open(t / "out" / "gradebook.csv") as f:
            graded = sum(1 for r in csv.DictReader(f) if r["status"] == "graded")
    print(f"graded {graded}/{len(results)} submissions in {took:.1f} s with {a.jobs} job(s), "
          f"engine {a.engine}: {took / max(1, len(results)):.2f} s each "
          f"(target {a.target:g} s for 200: {'met' if took * 200 / max(1, a.n) <= a.target else 'MISSED'})")
    # the machine may be shared: the CPU time says what the grading itself cost
    print(f"CPU time of the grading: {cpu:.1f} s ({cpu / max(1, len(results)):.2f} s a submission; "
          f"on {a.jobs} otherwise idle cores about {cpu * 200 / max(1, len(results)) / a.jobs:.0f} s for 200)")
    return 0 if took * 200 / max(1, a.n) <= a.target else 1


if __name__ == "__main__":
    sys.exit(main())

"""Build the student notebooks and the autograders from the master notebooks.

    python3 grading/build.py [lab1 lab2 ...] [--out dist]

For each lab: copies the master (notebooks/<lab>.ipynb), notebooks/labkit.py and the lab's
reference bands (labs/<lab>/reference.csv, as reference-<lab>.csv) into a scratch folder and runs
`otter assign` there.  Result:
    dist/<lab>/student/      the notebook for students: solutions and hidden tests stripped
    dist/<lab>/autograder/   the master with solutions, and <lab>-autograder_*.zip for grade.py
The masters are not executed here (assign's run_tests is off in their config): they run
experiments; tests/vm/test_labs.py runs them in the lab VM.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
LABS = ("lab1", "lab2")


def build(lab: str, out: Path) -> Path:
    dest = (out / lab).resolve()
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        shutil.copy(KIT / "notebooks" / f"{lab}.ipynb", t)
        shutil.copy(KIT / "notebooks" / "labkit.py", t)
        shutil.copy(KIT / "labs" / lab / "reference.csv", t / f"reference-{lab}.csv")
        r = subprocess.run([sys.executable, "-m", "otter", "assign", f"{lab}.ipynb", str(dest)],
                           cwd=t, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"otter assign {lab} failed:\n{r.stdout}\n{r.stderr}")
    return dest


def autograder_zip(dist_lab: Path) -> Path:
    zips = sorted((Path(dist_lab) / "autograder").glob("*-autograder_*.zip"))
    if not zips:
        raise FileNotFoundError(f"no autograder zip in {dist_lab}/autograder")
    return zips[-1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labs", nargs="*", default=list(LABS))
    ap.add_argument("--out", default="dist")
    a = ap.parse_args(argv)
    for lab in a.labs:
        d = build(lab, Path(a.out))
        print(f"{lab}: student notebook {d / 'student'}, autograder {autograder_zip(d)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

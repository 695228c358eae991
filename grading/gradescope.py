"""A Gradescope autograder that runs the kit's trusted grader (grading/fastgrade.py), built the
way otter builds one: a zip with `setup.sh`, `run_autograder` and `requirements.txt` at its top.

    python3 grading/gradescope.py dist/lab1/autograder/lab1-autograder_*.zip --out lab1-gradescope.zip

The zip holds, besides those three files:
    autograder.zip          the otter autograder grading/build.py made (tests, support files)
    grading/                grade.py, fastgrade.py, answers.py, integrity.py: the same grader
    run_cclab.py            what run_autograder calls
Gradescope unpacks it into /autograder/source and runs setup.sh once (Ubuntu image: python3,
pip, the pinned requirements); for each submission it runs run_autograder, which grades
/autograder/submission (the notebook and submission/<lab>/, or the zip the notebook's export cell
made) as `nobody` with grade.py's limits, and writes /autograder/results/results.json in
Gradescope's format: the score, one entry per question (its score, points, the reason and the
public checks' output), the reasons of the cross-checks.  CCLAB_AUTOGRADER_ROOT (or the first
argument of run_cclab.py) replaces /autograder, for a test in a temporary folder.

Gradescope grades one submission at a time: duplicate raw logs across the class are found by
grade.py on the exported submissions (see grading/README.md), not here.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import zipfile
from pathlib import Path

try:
    from grading import fastgrade
except ImportError:                     # run from inside grading/
    import fastgrade

HERE = Path(__file__).resolve().parent
MODULES = ("grade.py", *fastgrade.ENGINE_FILES)
REQUIREMENTS = ("otter-grader", "pandas", "numpy", "matplotlib", "nbformat", "ipython")

SETUP = """#!/usr/bin/env bash
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y python3 python3-pip util-linux
python3 -m pip install --break-system-packages -r /autograder/source/requirements.txt \\
    || python3 -m pip install -r /autograder/source/requirements.txt
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
set -e
ROOT="${CCLAB_AUTOGRADER_ROOT:-/autograder}"
cd "$ROOT/source"
exec python3 run_cclab.py "$ROOT"
"""

RUN_CCLAB = '''"""Grade /autograder/submission with the kit's trusted grader; write results/results.json."""
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CCLAB_AUTOGRADER_ROOT", "/autograder"))
SOURCE = Path(__file__).resolve().parent
sys.path.insert(0, str(SOURCE))
from grading import grade  # noqa: E402

LAB = {lab!r}


def entry(sub: Path, tmp: Path) -> Path:
    """The submission as grade.py takes it: a folder with the notebook, or the export zip."""
    if any(sub.glob("*.ipynb")):
        dest = tmp / "student"
        grade.copy_entry(sub, dest)     # folders and regular files: no link is followed
        return dest
    zips = sorted(sub.glob("*.zip"))
    if zips:
        dest = tmp / "student.zip"
        shutil.copy(zips[0], dest)
        return dest
    return tmp / "student"


def main() -> int:
    out = ROOT / "results"
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="cclab-gs-"))
    os.chmod(tmp, 0o755)
    try:
        e = entry(ROOT / "submission", tmp)
        if not e.exists():
            e.mkdir()
        who = grade._sandbox_user("nobody") if os.geteuid() == 0 else None
        r = grade.grade_fast([e], SOURCE / "autograder.zip", 1, float(os.environ.get("CCLAB_TIMEOUT", 600)),
                             int(os.environ.get("CCLAB_MEMORY_MB", 2048)), who, LAB)[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tests = []
    for name in sorted(r.points or r.tests):
        lines = [l for l in r.feedback.splitlines() if l.startswith(name + ":")]
        tests.append({{"name": name, "score": r.tests.get(name, 0.0), "max_score": r.points.get(name, 0.0),
                      "output": lines[0] if lines else "", "visibility": "visible"}})
    head = [f"{{LAB}}: {{r.score:g}}/{{r.possible:g}}"] + ([f"{{r.status}}: {{r.reason}}"] if r.reason else [])
    head += r.flags + ["Free-text answers are graded by hand."]
    results = {{"score": r.score, "output": "\\n".join(head + ["", r.feedback]), "tests": tests,
               "stdout_visibility": "hidden"}}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def requirements() -> str:
    lines = []
    for d in REQUIREMENTS:
        try:
            lines.append(f"{d}=={importlib.metadata.version(d)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(d)
    return "\n".join(lines) + "\n"


def _put(z: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = mode << 16
    z.writestr(info, data)


def build(autograder: Path, dest: Path, lab: str | None = None) -> Path:
    autograder = Path(autograder)
    if not zipfile.is_zipfile(autograder):
        raise SystemExit(f"gradescope: {autograder} is not an autograder zip (grading/build.py makes it)")
    lab = lab or autograder.name.split("-autograder")[0]
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w") as z:
        _put(z, "setup.sh", SETUP.encode(), 0o755)
        _put(z, "run_autograder", RUN_AUTOGRADER.encode(), 0o755)
        _put(z, "requirements.txt", requirements().encode())
        _put(z, "run_cclab.py", RUN_CCLAB.format(lab=lab).encode())
        _put(z, "autograder.zip", autograder.read_bytes())
        _put(z, "grading/__init__.py", b"")
        for m in MODULES:
            _put(z, f"grading/{m}", (HERE / m).read_bytes())
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("autograder", help="the otter autograder zip grading/build.py made")
    ap.add_argument("--out", required=True, help="the Gradescope zip to write")
    a = ap.parse_args(argv)
    if not Path(a.autograder).is_file():
        raise SystemExit(f"gradescope: no file {a.autograder}")
    print(f"Gradescope autograder: {build(Path(a.autograder), Path(a.out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

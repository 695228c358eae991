"""Build the student notebooks and the autograders from the master notebooks.

    python3 grading/build.py [lab1 lab2 ...] [--out dist]

For each lab: copies the master (notebooks/<lab>.ipynb) and the files its assignment config names
(SUPPORT below: for labs 1-2 notebooks/labkit.py and the reference bands labs/<lab>/reference.csv
as reference-<lab>.csv; for labs 3-4 labkit.py and labs/kmodlab.py, and for the autograder only
cclab.zip, the engine's package, whose analysis their hidden tests recompute with, so grading
needs no kit; for lab 5 its tuner support module, its recorded connections and the reference
learner, which only the autograder gets) into a scratch folder and runs `otter assign` there.
Result:
    dist/<lab>/student/      the notebook for students: solutions and hidden tests stripped
    dist/<lab>/autograder/   the master with solutions, and <lab>-autograder_*.zip for grade.py,
                             with cclab-trusted.json added: the master's imported modules and
                             literal constants its tests read, which the grading process binds
                             itself, and the support files only it may hold (grading/fastgrade.py)
The masters are not executed here (assign's run_tests is off in their config): they run
experiments; the student's journey runs them, every lab in JupyterLab through a browser in the
lab VM, and grades their exports (tests/student/test_browser.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

try:
    from grading import fastgrade
except ImportError:                     # run from inside grading/
    import fastgrade

KIT = Path(__file__).resolve().parents[1]

# Per lab: (source in the kit, name next to the notebook).  The names are the ones the master's
# ASSIGNMENT CONFIG lists under files / autograder_files.  A source "cclab/" is the engine's
# package, zipped (Python imports it from the zip; labs/kmodlab.py puts it on sys.path).
ENGINE = "cclab/"
SUPPORT = {
    "lab1": [("notebooks/labkit.py", "labkit.py"), ("labs/lab1/reference.csv", "reference-lab1.csv")],
    "lab2": [("notebooks/labkit.py", "labkit.py"), ("labs/lab2/reference.csv", "reference-lab2.csv")],
    "lab3": [("notebooks/labkit.py", "labkit.py"), ("labs/kmodlab.py", "kmodlab.py"),
             (ENGINE, "cclab.zip")],
    "lab4": [("notebooks/labkit.py", "labkit.py"), ("labs/kmodlab.py", "kmodlab.py"),
             (ENGINE, "cclab.zip")],
    "lab5": [("labs/lab5/tuner_support.py", "tuner_support.py"),
             ("labs/lab5/connections.csv", "lab5-connections.csv"),
             ("labs/lab5/reference.py", "lab5_reference.py")],
}
LABS = tuple(SUPPORT)
# Support files that only the grading process may hold: the student's process, which runs the
# notebook, must not find the reference solution beside it.
GRADER_ONLY = {"labs/lab5/reference.py"}


def engine_zip(dest: Path) -> Path:
    """The kit's cclab package (its .py files, cclab/... inside) as a zip Python can import from.
    Fixed timestamps, sorted names: the same sources give the same bytes."""
    src = KIT / "cclab"
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(src.rglob("*.py")):
            if "__pycache__" in f.parts:
                continue
            info = zipfile.ZipInfo(str(f.relative_to(KIT)), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, f.read_bytes())
    return dest


def master_bindings(nb_path: Path) -> tuple[dict, dict]:
    """({name: [module, attribute or ""]}, {name: value}): what the master notebook binds by an
    import at the top level of its code cells, or to a module's attribute (ARMS = ts.ARMS), and
    the upper-case names it sets to a literal (LAB = "lab4", SEED = 5).  A name bound in two
    ways, or to two values, is left out."""
    import ast
    modules, constants, clash = {}, {}, set()

    def put(table, name, value):
        other = modules if table is constants else constants
        if name in other or table.get(name, value) != value:
            clash.add(name)
        table[name] = value

    for src in fastgrade._cells(nb_path):
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname or "." not in a.name:
                        put(modules, a.asname or a.name, [a.name, ""])
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if a.name != "*":
                        put(modules, a.asname or a.name, [node.module, a.name])
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()):
                v = node.value
                if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) \
                        and modules.get(v.value.id, [None, "?"])[1] == "":
                    put(modules, node.targets[0].id, [modules[v.value.id][0], v.attr])
                    continue
                try:
                    value = ast.literal_eval(node.value)
                    json.dumps(value)
                except (ValueError, TypeError, SyntaxError, RecursionError):
                    clash.add(node.targets[0].id)   # set from code: the notebook's own
                    continue
                put(constants, node.targets[0].id, value)
    return ({k: v for k, v in modules.items() if k not in clash},
            {k: v for k, v in constants.items() if k not in clash})


def trusted_table(lab: str, master: Path, autograder: Path) -> dict:
    """grading/fastgrade.py's TRUSTED for a lab: of the master's bindings, those its tests read,
    and the support files only the grading process gets."""
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(autograder) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith("tests/")])
        read = set(fastgrade.test_names(Path(tmp) / "tests"))
    modules, constants = master_bindings(master)
    return {"modules": {k: v for k, v in sorted(modules.items()) if k in read},
            "constants": {k: v for k, v in sorted(constants.items()) if k in read},
            "grader_only": sorted(name for src, name in SUPPORT[lab] if src in GRADER_ONLY)}


def build(lab: str, out: Path) -> Path:
    dest = (out / lab).resolve()
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        shutil.copy(KIT / "notebooks" / f"{lab}.ipynb", t)
        for src, name in SUPPORT[lab]:
            if src == ENGINE:
                engine_zip(t / name)
            else:
                shutil.copy(KIT / src, t / name)
        r = subprocess.run([sys.executable, "-m", "otter", "assign", f"{lab}.ipynb", str(dest)],
                           cwd=t, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"otter assign {lab} failed:\n{r.stdout}\n{r.stderr}")
        zipped = autograder_zip(dest)
        table = trusted_table(lab, t / f"{lab}.ipynb", zipped)
        with zipfile.ZipFile(zipped, "a", zipfile.ZIP_DEFLATED) as z:
            z.writestr(fastgrade.TRUSTED, json.dumps(table, indent=1, sort_keys=True) + "\n")
    return dest


def built(lab: str, dist: Path | None, scratch: Path) -> Path:
    """dist/<lab> if this script already made it there (make test builds before the guest boots),
    else a build of `lab` into scratch."""
    if dist is not None and (Path(dist) / lab / "autograder").is_dir():
        return Path(dist) / lab
    return build(lab, scratch)


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

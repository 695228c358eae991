"""Write the repository a course hands to its students.

    python3 grading/release.py DEST [--labs lab1 lab2 ...]     (or: make student-release DEST=...)

DEST (new, or empty) gets what a student needs to build the lab VM and do the labs, and nothing
that grades them:
- the Vagrantfile, vm/, kmod/, the engine (cclab/), topologies/, examples/, pyproject.toml;
- each lab's experiment files and handout (labs/<lab>/quick, full, handout.md), the lab command
  the VM runs experiments through (labs/lab_command.py) and the labs' support modules;
- the student notebooks grading/build.py makes (solutions and hidden tests stripped), with the
  files each one ships with, in notebooks/;
- a README for students (README.md), and the kit's licence terms if it has any.
Left out: the master notebooks, grading/ (autograders, fixtures, references), lab 5's reference
learner, the reference bands' sources, the scorecard and its evidence, the tests.  The release
then checks itself: no file may hold a solution or hidden-test marker or a line of a master's
solution or hidden test (a one-line error names the file, exit 1).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from grading import build  # noqa: E402

TREES = ["vm", "kmod", "cclab", "topologies", "examples"]
FILES = ["Vagrantfile", "pyproject.toml", ".gitignore", "labs/lab_command.py", "labs/kmodlab.py"]
LAB_FILES = {"lab5": ["labs/lab5/tuner_support.py", "labs/lab5/connections.csv",
                      "labs/lab5/live-example.csv"]}
LAB_PARTS = ["quick", "full", "handout.md", "reference.csv"]
NEVER = ["labs/lab5/reference.py", "grading", "tests", "notebooks/lab1.ipynb.master"]
MARKERS = ["# BEGIN SOLUTION", "# END SOLUTION", "# HIDDEN", "# BEGIN QUESTION", "# BEGIN TESTS",
           "\"hidden\": true", "ASSIGNMENT CONFIG"]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.o", "*.ko", "*.mod*", ".*.cmd",
                                "Module.symvers", "modules.order", "build", "harness")

README = """# Congestion-control labs

This repository holds the lab VM and the notebooks of your course's TCP congestion-control labs.
Every number a lab shows is measured in the VM: a real Linux kernel, emulated links (netem,
tbf), iperf3, ss, tshark and two research congestion controls built as kernel modules.

## Start

You need [Vagrant](https://www.vagrantup.com/) and one of VirtualBox or libvirt (x86-64), or
Parallels or VMware Fusion (Apple Silicon).

```sh
vagrant up            # builds the lab VM (first time: 10-15 minutes)
```

Provisioning ends with a line like

```
[provision] JupyterLab: http://localhost:8888/lab?token=3f9c...
```

Open that address in your browser (it listens on your own machine only).  Lost the token?
`vagrant ssh -c 'sudo cat /etc/cclab/jupyter-token'`.

On a Linux host without Vagrant, the same VM runs under QEMU (as root):
`apt-get install qemu-system-x86 debootstrap`, then

```sh
vm/run.sh --systemd --forward 8888 -- sleep 3600   # the lab VM for an hour
```

prints a line `[vm] JupyterLab: http://127.0.0.1:8888/lab?token=...` to open in your browser.
This VM keeps nothing once it stops (its disk is a throwaway copy of the image): do graded work
in the Vagrant VM, or download your notebooks and your submission zip before the hour is over.
`vm/run.sh -- cclab profiles` runs one command in it.

## The labs

The notebooks are in `notebooks/` ({labs}).  Each has a handout in `labs/<lab>/handout.md`.
In the VM, JupyterLab shows them in `notebooks/` of your home there: each is copied in from this
repository when the VM starts, unless you have it already, so your edits are never overwritten.
They stay across `vagrant halt` and `vagrant up`; `vagrant destroy` deletes them, so hand in
your zip first.
A lab runs in quick mode unless you ask for full mode (`MODE = "full"` in its first cells):
quick mode takes minutes, full mode the source studies' durations (hours for lab 2); the
notebook says how long before it starts.  Your results go to `notebooks/submission/<lab>/`; a
new run never deletes earlier results (results of the other mode are kept as
`submission/<lab>-quick` or `-full`).

When you are done, run the notebook's last cell: it writes the zip you hand in.

Experiments need root inside the VM; the notebook runs as you and starts them through the one
command the VM lets you run as root (`sudo /usr/local/sbin/cclab-lab-run`).
"""


class ReleaseError(Exception):
    pass


def master_lines(lab: str) -> set[str]:
    """Distinctive lines of a master's solutions and hidden tests (long enough to be telling)."""
    nb = json.loads((KIT / "notebooks" / f"{lab}.ipynb").read_text())
    out = set()
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"])
        hidden = src.startswith("# HIDDEN")
        inside = False
        for line in src.splitlines():
            s = line.strip()
            if s.startswith("# BEGIN SOLUTION"):
                inside = True
                continue
            if s.startswith("# END SOLUTION"):
                inside = False
                continue
            if (inside or hidden) and len(s) >= 40 and not s.startswith("#"):
                out.add(s)
    # A line that the lab's support modules hold too (labkit.py, kmodlab.py ship with the
    # student notebook, and the hidden tests recompute with them) is public by design.
    shipped = "\n".join((KIT / src).read_text(errors="replace")
                        for src, _ in build.SUPPORT[lab] if src != build.ENGINE)
    return {s for s in out if s not in shipped}


def check(dest: Path, labs: list[str]) -> None:
    """Refuse a release that holds grading material (ReleaseError names the first file)."""
    for rel in NEVER:
        if (dest / rel).exists():
            raise ReleaseError(f"{rel} must not be in a student release")
    secret = set().union(*(master_lines(lab) for lab in labs))
    for f in sorted(dest.rglob("*")):
        if not f.is_file() or ".git" in f.parts:
            continue
        try:
            text = f.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for m in MARKERS:
            if m in text and f.name != "release.py":
                raise ReleaseError(f"{f.relative_to(dest)}: holds {m!r}")
        for line in secret:
            if line in text:
                raise ReleaseError(f"{f.relative_to(dest)}: holds a line of a solution or hidden "
                                   f"test: {line[:60]!r}")


def release(dest: Path, labs: list[str]) -> Path:
    dest = Path(dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise ReleaseError(f"{dest} is not empty: give a new folder")
    bad = [lab for lab in labs if lab not in build.LABS]
    if bad:
        raise ReleaseError(f"no lab {bad[0]} (labs: {', '.join(build.LABS)})")
    dest.mkdir(parents=True, exist_ok=True)
    for t in TREES:
        shutil.copytree(KIT / t, dest / t, ignore=IGNORE)
    for f in FILES + [f for lab in labs for f in LAB_FILES.get(lab, [])]:
        if (KIT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(KIT / f, dest / f)
    for lab in labs:
        for part in LAB_PARTS:
            src = KIT / "labs" / lab / part
            if src.is_dir():
                shutil.copytree(src, dest / "labs" / lab / part, ignore=IGNORE)
            elif src.is_file():
                shutil.copy2(src, dest / "labs" / lab / part)
    nbdir = dest / "notebooks"
    nbdir.mkdir()
    with tempfile.TemporaryDirectory() as tmp:
        for lab in labs:
            student = build.build(lab, Path(tmp)) / "student"
            for f in sorted(student.iterdir()):
                if f.is_file():
                    shutil.copy2(f, nbdir / f.name)
    (dest / "README.md").write_text(README.replace("{labs}", ", ".join(labs)))
    # The kit commit this release was made from: runs made in the release name it beside the
    # release's own commit (cclab.provenance.kit_commit), so evidence traces back to kit code.
    from cclab import provenance
    source = provenance.kit_commit()
    source.pop("release_of", None)
    (dest / provenance.RELEASE_FILE).write_text(json.dumps(
        {"kit": source, "labs": labs}, indent=1) + "\n")
    check(dest, labs)
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="write the student release of the kit")
    ap.add_argument("dest")
    ap.add_argument("--labs", nargs="+", default=list(build.LABS))
    a = ap.parse_args(argv)
    try:
        d = release(Path(a.dest), a.labs)
    except (ReleaseError, RuntimeError) as e:
        print(f"release: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"student release of {', '.join(a.labs)} in {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Labs 1 and 2 in the lab VM, as the lab user (experiments through its one sudo command): each
master notebook runs headless in quick mode and passes every public and hidden test cell (a
failing assert stops nbclient) (lab_notebooks.py).
Then lab 1's real run goes through the instructor pipeline: grading/build.py's autograder
(built on the host before the guest booted, lab_notebooks.autograder), grading/grade.py grading
the run in the guest as the unprivileged user `nobody` with a time and memory limit -- the master with its answers gets full marks, the same results with numbers
edited after the run fail the recompute tests, and a probe cell shows who ran it and the limits.
The notebooks run in scratch folders, so their results do not land in the checkout."""

import csv
import pwd
import re
import resource
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from lab_notebooks import KIT, autograder, run_master

LAB1_POINTS = 16.0        # lab 1's autograded points
RUNS: dict[str, Path] = {}


@pytest.mark.parametrize("lab", ["lab1", "lab2"])
def test_master_runs_in_quick_mode_and_passes_its_tests(lab):
    nb = run_master(lab, hidden_at_least=8)
    RUNS[lab] = Path(nb.metadata["cclab_work"])


PROBE = '''import os, resource
from pathlib import Path
_scratch = Path.cwd().parent.parent          # grade.py's scratch: work/<random>/, autograder/
# compact: the grader's feedback keeps one short line of a cell's error
raise RuntimeError(f"PROBE u{os.geteuid()} m{resource.getrlimit(resource.RLIMIT_AS)[0] >> 20} "
                   f"k{int(os.access({kit!r}, os.W_OK))} w{int(os.access(Path.cwd().parent, os.R_OK))} "
                   f"t{int(os.access(_scratch / 'autograder' / 'tests', os.R_OK))} "
                   f"a{int((_scratch / 'autograder').exists())}")
'''


def test_grading_a_real_run_as_an_unprivileged_user(tmp_path):
    from grading import build, grade
    assert "lab1" in RUNS, "lab 1's quick-mode run did not complete (see the test above)"
    # grading as `nobody` needs a Python it can run (the image's venv): no fallback to root here
    assert grade._sandbox_user("nobody") is not None, f"nobody cannot run {sys.executable} with otter"
    real = RUNS["lab1"]
    dist = autograder("lab1", tmp_path)
    master = dist / "autograder" / "lab1.ipynb"
    subs = tmp_path / "subs"
    # the notebook the run executed (answers and all) with its results
    shutil.copytree(real / "submission", subs / "real" / "submission")
    shutil.copy(real / "lab1.ipynb", subs / "real" / "lab1.ipynb")
    # the same results with BBR's bytes edited after the run, answers computed from the edit
    shutil.copytree(subs / "real", subs / "edited")
    wired = next((subs / "edited" / "submission" / "lab1" / "lab1-wired").glob("*/iperf.csv"))
    df, flows = pd.read_csv(wired), pd.read_csv(wired.parent / "flows.csv")
    bbr = int(flows.loc[flows["cca"] == "bbr", "flow"].iloc[0])
    df.loc[df["flow"] == bbr, "bytes"] = (df.loc[df["flow"] == bbr, "bytes"] * 1.5).astype(int)
    df.to_csv(wired, index=False)
    shutil.copy(master, subs / "edited" / "lab1.ipynb")
    # a probe: the master with a first code cell that reports who runs it and under what limits
    shutil.copytree(real / "submission", subs / "probe" / "submission")
    nb = nbformat.read(master, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first, nbformat.v4.new_code_cell(PROBE.replace("{kit!r}", repr(str(KIT)))))
    nbformat.write(nb, subs / "probe" / "lab1.ipynb")
    out = tmp_path / "graded"
    memory_mb = 2048
    began = time.monotonic()
    grade.grade_all(subs, build.autograder_zip(dist), out, jobs=2, timeout=180,
                    memory_mb=memory_mb, user="nobody")
    print(f"graded 3 submissions in {time.monotonic() - began:.0f} s")
    with open(out / "gradebook.csv") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert rows["real"]["status"] == "graded", rows["real"]
    assert float(rows["real"]["score"]) == LAB1_POINTS, (
        rows["real"], (out / "feedback" / "real.txt").read_text())
    assert float(rows["edited"]["score"]) < LAB1_POINTS / 2, rows["edited"]
    assert "changed after the run" in (out / "feedback" / "edited.txt").read_text()
    fb = (out / "feedback" / "probe.txt").read_text()
    nobody = pwd.getpwnam("nobody").pw_uid
    probe = re.search(r"PROBE u(\d+) m(-?\d+) k(\d) w(\d) t(\d) a(\d)", fb)
    assert probe, fb
    uid, mem, kit_w, work_l, tests_r, ag = (int(x) for x in probe.groups())
    assert uid == nobody and mem == memory_mb, fb
    assert kit_w == 0 and work_l == 0, fb                  # the kit and the work folder: closed
    assert tests_r == 0, fb                                # the hidden tests: out of reach
    print(f"probe: uid {uid}, {mem} MiB, autograder folder seen: {bool(ag)}")
    assert float(rows["probe"]["score"]) == LAB1_POINTS        # the probe's cell is its only error
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != memory_mb << 20   # set in the child only

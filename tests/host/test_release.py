"""The student release (grading/release.py): what it holds and what it refuses to hold."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))

from grading import release  # noqa: E402

LABS = ["lab1", "lab2", "lab3", "lab4", "lab5"]


@pytest.fixture(scope="module")
def rel(tmp_path_factory):
    return release.release(tmp_path_factory.mktemp("rel") / "course", LABS)


def test_the_release_holds_what_a_student_needs(rel):
    for f in ["Vagrantfile", "README.md", "vm/provision.sh", "vm/run.sh", "kmod/tcp_spline.c",
              "cclab/runner.py", "cclab/analysis/plots.py", "topologies/wired.toml",
              "labs/lab_command.py", "labs/lab1/handout.md", "notebooks/labkit.py",
              "labs/lab5/tuner_support.py"]:
        assert (rel / f).is_file(), f
    for lab in LABS:
        nb = json.loads((rel / "notebooks" / f"{lab}.ipynb").read_text())
        assert nb["cells"], lab
    assert list((rel / "labs" / "lab1" / "quick").glob("*.toml"))
    assert "vagrant up" in (rel / "README.md").read_text()


def test_the_release_names_the_kit_commit_it_was_made_from(rel):
    """Runs made in a release trace back to the kit's code: release.json holds the kit's commit,
    and the release's own provenance reports it (cclab.provenance.release_of)."""
    from cclab import provenance
    head = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(KIT), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    rec = json.loads((rel / "release.json").read_text())
    assert rec["labs"] == LABS
    if head.returncode == 0:
        assert rec["kit"]["commit"] == head.stdout.strip() and "dirty" in rec["kit"]
    assert provenance.release_of(rel) == rec["kit"]
    assert provenance.release_of(KIT) is None               # the kit itself is no release
    (rel.parent / "broken").mkdir(exist_ok=True)
    (rel.parent / "broken" / "release.json").write_text("{not json")
    assert provenance.release_of(rel.parent / "broken") is None


def test_the_release_holds_no_grading_material(rel):
    for rel_path in ["grading", "tests", "labs/lab5/reference.py", "docs/scorecard.md"]:
        assert not (rel / rel_path).exists(), rel_path
    secret = set().union(*(release.master_lines(lab) for lab in LABS))
    assert len(secret) > 20                      # the masters do have solutions to look for
    text = "\n".join(f.read_text(errors="replace") for f in rel.rglob("*") if f.is_file())
    assert not [s for s in secret if s in text]
    assert "# HIDDEN" not in text and "BEGIN SOLUTION" not in text


def test_a_master_slipped_in_is_refused_naming_it(rel, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(rel, bad)
    shutil.copy(KIT / "notebooks" / "lab3.ipynb", bad / "notebooks" / "my-copy.ipynb")
    with pytest.raises(release.ReleaseError, match="my-copy.ipynb"):
        release.check(bad, LABS)


def test_bad_destination_or_lab_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    for args, why in ([str(tmp_path / "full")], "not empty"), \
                     ([str(tmp_path / "new"), "--labs", "lab9"], "no lab lab9"):
        r = subprocess.run([sys.executable, str(KIT / "grading" / "release.py"), *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and why in r.stderr, r.stderr
    assert (tmp_path / "full" / "x").read_text() == "mine"

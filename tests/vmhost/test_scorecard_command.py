"""The README's scorecard commands, as written, in a clean clone of the checkout: `make scorecard`
runs every lab's master notebook in quick mode in the lab VM (about 20 min under software
emulation, so `make test-nightly` runs it, not `make test`, which makes the same table from the
browser's runs), keeps each lab's results, packs their tables into docs/evidence/ and regenerates
docs/scorecard.md from that evidence; then `python3 -m grading.scorecard --evidence docs/evidence`
makes the same table again.  The full-mode line,
`make scorecard MODE=full LABS="lab1 lab4"`, runs the same way (about 35 min)."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
LABS = ("lab1", "lab2", "lab3", "lab4", "lab5")


def rows_name_records(table: str, kept: Path, mode: str, labs) -> None:
    """Each lab's row of `mode` in the table names the record it was made from (its hash)."""
    for lab in labs:
        digest = hashlib.sha256((kept / lab / "record.json").read_bytes()).hexdigest()
        row = next((ln for ln in table.splitlines() if ln.startswith(f"| {lab} | {mode} |")), "")
        assert digest[:12] in row, (lab, row)


@pytest.mark.nightly
def test_make_scorecard_as_written(tmp_path):
    kit = tmp_path / "kit"
    subprocess.run(["git", "clone", "-q", str(KIT), str(kit)], check=True)
    assert not (kit / "results" / "scorecard").exists()
    r = subprocess.run(["make", "scorecard"], cwd=kit, capture_output=True, text=True,
                       timeout=4 * 3600)
    print(r.stdout[-3000:])
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    kept = kit / "results" / "scorecard" / "quick"
    for lab in LABS:
        assert (kept / f"{lab}.ipynb").is_file(), lab
        assert (kept / lab / "record.json").is_file(), lab
    table = (kit / "docs" / "scorecard.md").read_text()
    rows_name_records(table, kept, "quick", ("lab1", "lab2", "lab3", "lab4"))
    index = json.loads((kit / "docs" / "evidence" / "index.json").read_text())
    for lab in ("lab1", "lab2", "lab3", "lab4"):
        assert index["quick"]["labs"][lab]["record_sha256"] == hashlib.sha256(
            (kept / lab / "record.json").read_bytes()).hexdigest(), lab
    again = subprocess.run([sys.executable, "-m", "grading.scorecard", "--evidence", "docs/evidence"],
                           cwd=kit, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (kit / "docs" / "scorecard.md").read_text() == table


@pytest.mark.nightly
def test_make_scorecard_full_mode_as_written(tmp_path):
    """`make scorecard MODE=full LABS="lab1 lab4"`, as the README writes it: the two labs' master
    notebooks in full mode (about 21 min of flows), kept under results/scorecard/full/, and
    their full-mode rows in the table name the records kept; the quick-mode evidence the clone
    came with is still there."""
    kit = tmp_path / "kit"
    subprocess.run(["git", "clone", "-q", str(KIT), str(kit)], check=True)
    before = json.loads((kit / "docs" / "evidence" / "index.json").read_text())
    quick_before = before["quick"]
    r = subprocess.run(["make", "scorecard", "MODE=full", "LABS=lab1 lab4"], cwd=kit,
                       capture_output=True, text=True, timeout=4 * 3600)
    print(r.stdout[-3000:])
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    kept = kit / "results" / "scorecard" / "full"
    table = (kit / "docs" / "scorecard.md").read_text()
    for lab in ("lab1", "lab4"):
        assert (kept / f"{lab}.ipynb").is_file(), lab
        assert json.loads((kept / lab / "record.json").read_text())["mode"] == "full", lab
    rows_name_records(table, kept, "full", ("lab1", "lab4"))
    assert not (kit / "results" / "scorecard" / "quick").exists()   # only what was asked ran
    index = json.loads((kit / "docs" / "evidence" / "index.json").read_text())
    assert index["quick"] == quick_before
    assert {"lab1", "lab4"} <= set(index["full"]["labs"])
    for lab, kept_before in before.get("full", {}).get("labs", {}).items():   # labs not run again
        if lab not in ("lab1", "lab4"):
            assert index["full"]["labs"][lab] == kept_before, lab

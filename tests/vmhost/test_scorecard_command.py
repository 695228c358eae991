"""The README's scorecard commands, as written, in a clean clone of the checkout: `make scorecard`
runs every lab's master notebook in quick mode in the lab VM (about 20 min under software
emulation, so `make test-nightly` runs it, not `make test`, which makes the same table from the
browser's runs), keeps each lab's results and regenerates docs/scorecard.md from them; then
`python3 -m grading.scorecard` makes the same table from what was kept.  The full-mode line,
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
    again = subprocess.run([sys.executable, "-m", "grading.scorecard"], cwd=kit,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (kit / "docs" / "scorecard.md").read_text() == table


@pytest.mark.nightly
def test_make_scorecard_full_mode_as_written(tmp_path):
    """`make scorecard MODE=full LABS="lab1 lab4"`, as the README writes it: the two labs' master
    notebooks in full mode (about 21 min of flows), kept under results/scorecard/full/, and
    their full-mode rows in the table name the records kept."""
    kit = tmp_path / "kit"
    subprocess.run(["git", "clone", "-q", str(KIT), str(kit)], check=True)
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

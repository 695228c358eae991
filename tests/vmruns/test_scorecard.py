"""The reproduction scorecard from real runs: after the lab notebook tests in the guest
(tests/vm/test_lab1_2.py, test_lab3.py, test_lab4.py, test_lab5.py) ran their masters in quick
mode and kept the results, `python3 -m cclab.scorecard` makes the table from them on the host.
Every lab's section carries measured quick-mode values and a verdict for each claim, and the
provenance names these runs (the guest's kernel, fidelity OK)."""

import json
import re
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))

from cclab.scorecard import VERDICTS as _VERDICTS  # noqa: E402

VERDICTS = {v for v, _ in _VERDICTS}


def test_scorecard_is_made_from_this_sessions_lab_runs(kept_lab_runs, tmp_path):
    kept = Path(kept_lab_runs) / "quick"
    missing = [lab for lab in ("lab1", "lab2", "lab3", "lab4") if not (kept / lab / "record.json").is_file()]
    assert not missing, f"no kept quick-mode run of {missing}: their notebook tests failed or did not run"
    assert (kept / "lab5" / "live.csv").is_file()
    out = tmp_path / "scorecard.md"
    p = subprocess.run([sys.executable, "-m", "cclab.scorecard", "--results", kept_lab_runs, "--out", str(out)],
                       cwd=KIT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    labs = {re.search(r"\(lab (\d)\)", s.splitlines()[0]).group(1): s for s in sections
            if re.search(r"\(lab \d\)", s.splitlines()[0])}
    assert sorted(labs) == ["1", "2", "3", "4", "5"], [s.splitlines()[0] for s in sections]
    for lab, body in labs.items():
        rows = [[c.strip() for c in line.strip().strip("|").split(" | ")]
                for line in body.splitlines() if line.startswith("| ") and not line.startswith("| claim")]
        assert rows, f"lab {lab}: no rows"
        measured = [r for r in rows if r[4] != "not reproducible here"]
        assert measured, f"lab {lab}: nothing measured"
        for r in rows:
            assert r[4] in VERDICTS, (lab, r)
            assert r[5], f"lab {lab}: no reason given for {r[0]!r}"
        # every measured claim shows a value from this session's quick run, none "not run"
        assert all(r[2] != "not run" for r in measured), (lab, [r[:3] for r in measured])
        assert any(re.search(r"\d", r[2]) for r in measured), f"lab {lab}: no numbers in the quick column"
    prov = text.split("## Provenance", 1)[1]
    for lab in ("lab1", "lab2", "lab3", "lab4"):
        kernel = json.loads(next((kept / lab).rglob("manifest.json")).read_text())["kernel"]
        line = next(x for x in prov.splitlines() if x.startswith(f"| {lab} | quick |"))
        runs, ok = re.search(r"\| (\d+) \((\d+)\) \|", line).groups()
        assert int(runs) > 0 and runs == ok, line
        assert kernel and kernel in line, (kernel, line)

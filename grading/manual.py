"""Free-text answers: a grading packet per question, and the manual scores merged back.

    python3 grading/manual.py packet SUBMISSIONS --lab lab1 --out graded/lab1 [--named]
    python3 grading/manual.py merge SCORES.csv --out graded/lab1

`packet` writes OUT/manual/:
    <question>.html        every student's answer to that question (one file per manual question,
                           from the lab's point table, grading/points.py), in a stable order
    key.csv                id -> student (keep it to yourself: the packets show ids only)
    scores-template.csv    id, one column per manual question; its first row holds the points
                           possible ("(points possible)"), then one empty row per student
Answers are anonymised by a stable id ("A" and 6 hex digits of the SHA-256 of lab and student:
the same student has the same id in every packet of the lab, and regrading does not change it);
`--named` shows the students' names instead.  Answers are shown as escaped text, never rendered:
nothing a student typed runs in the grader's browser.

`merge` reads a filled template (by id, or with a `student` column instead), checks it (an
unknown id or question, a score that is not a number or is outside 0..points possible: one-line
error, exit 1, nothing written) and merges it into OUT/manual-scores.csv: a cell it leaves empty
keeps the score merged before, so scores are never dropped.  It then writes the gradebook,
canvas.csv and gradescope.csv again from OUT/results.json (what grade.py graded) with the manual
columns, without regrading anything.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import json
import sys
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from grading import grade, points  # noqa: E402

EMPTY = "_Type your answer here, replacing this text._"
BEGIN, END = "<!-- BEGIN QUESTION -->", "<!-- END QUESTION -->"


def anon_id(lab: str, student: str) -> str:
    return "A" + hashlib.sha256(f"{lab}:{student}".encode()).hexdigest()[:6]


def manual_questions(lab: str, master: Path | None = None) -> dict[str, float]:
    """{question: points} of the lab's manual (free-text) questions, in the notebook's order."""
    return {q["question"]: q["points"] for q in points.table(lab, master) if q["graded"] == "by hand"}


def _notebook(entry: Path):
    import nbformat
    try:
        if entry.is_file():
            with zipfile.ZipFile(entry) as z:
                names = sorted(n for n in z.namelist() if n.endswith(".ipynb") and "/" not in n.strip("/"))
                return nbformat.reads(z.read(names[0]).decode(), as_version=4) if names else None
        nbs = sorted(entry.glob("*.ipynb"))
        return nbformat.read(nbs[0], as_version=4) if nbs else None
    except Exception:           # noqa: BLE001 -- a broken notebook is an empty answer sheet
        return None


def answers(nb, questions: list[str]) -> dict[str, str]:
    """{question: the student's text}: the cells between each manual question's prompt (the cell
    with BEGIN QUESTION) and its END QUESTION, in order; the n-th such block is the n-th manual
    question."""
    out, current, k = {}, None, 0
    for c in (nb.cells if nb is not None else []):
        src = c.source
        if current is not None and END in src:
            current = None
        if BEGIN in src.split(END)[-1]:
            if k < len(questions):
                current = questions[k]
                out[current] = []
            k += 1
            continue
        if current is not None:
            text = src.strip()
            if text and text != EMPTY:
                out[current].append(("code: " if c.cell_type == "code" else "") + text)
    return {q: "\n\n".join(out.get(q, [])) for q in questions}


def packet(submissions: Path, lab: str, out: Path, named: bool = False, master: Path | None = None) -> Path:
    qs = manual_questions(lab, master)
    if not qs:
        raise SystemExit(f"manual: {lab} has no manual questions")
    entries = sorted(p for p in Path(submissions).iterdir() if p.is_dir() or p.suffix == ".zip")
    students = {(p.stem if p.is_file() else p.name): p for p in entries}
    ids = {s: anon_id(lab, s) for s in students}
    if len(set(ids.values())) != len(ids):
        raise SystemExit("manual: two students share an anonymous id; use --named")
    got = {s: answers(_notebook(p), list(qs)) for s, p in students.items()}
    d = Path(out) / "manual"
    d.mkdir(parents=True, exist_ok=True)
    order = sorted(students, key=lambda s: s if named else ids[s])
    for q, pts in qs.items():
        parts = [f"<!doctype html><meta charset='utf-8'><title>{lab} {q}</title>",
                 "<style>body{font-family:sans-serif;max-width:50em;margin:auto}"
                 "pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}</style>",
                 f"<h1>{html.escape(lab)} {html.escape(q)} ({pts:g} points): {len(order)} answers</h1>"]
        for s in order:
            who = s if named else ids[s]
            text = got[s][q]
            parts.append(f"<section id='{html.escape(who)}'><h2>{html.escape(who)}</h2>"
                         + (f"<pre>{html.escape(text)}</pre>" if text else "<p><em>(no answer)</em></p>")
                         + "</section>")
        (d / f"{q}.html").write_text("\n".join(parts) + "\n")
    with open(d / "key.csv", "w", newline="") as f:
        w = grade._csv_writer(f)
        w.writerow(["id", "student"])
        for s in sorted(students, key=lambda s: ids[s]):
            w.writerow([ids[s], s])
    with open(d / "scores-template.csv", "w", newline="") as f:
        w = grade._csv_writer(f)
        w.writerow(["id"] + list(qs))
        w.writerow([grade.POINTS_ROW] + [f"{p:g}" for p in qs.values()])
        for s in order:
            w.writerow([s if named else ids[s]] + [""] * len(qs))
    (d / "questions.json").write_text(json.dumps({"lab": lab, "named": named, "points": qs}) + "\n")
    return d


def merge(scores: Path, out: Path) -> Path:
    out = Path(out)
    d = out / "manual"
    if not (out / grade.STATE).is_file():
        raise SystemExit(f"manual: no {out / grade.STATE}: grade the class into {out} first")
    if not (d / "questions.json").is_file():
        raise SystemExit(f"manual: no packet in {d}: run `manual.py packet` first")
    meta = json.loads((d / "questions.json").read_text())
    qs: dict = meta["points"]
    with open(d / "key.csv", newline="") as f:
        key = {r["id"]: r["student"] for r in csv.DictReader(f)}
    settings, results = grade.load_state(out)
    try:
        with open(scores, newline="") as f:
            rows = list(csv.DictReader(f))
            cols = list(rows[0].keys()) if rows else []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise SystemExit(f"manual: {scores}: {type(e).__name__}: {e}")
    who_col = "id" if "id" in cols else "student" if "student" in cols else None
    if who_col is None:
        raise SystemExit(f"manual: {scores}: no 'id' or 'student' column")
    unknown_q = [c for c in cols if c not in (who_col, "id", "student") and c not in qs]
    if unknown_q:
        raise SystemExit(f"manual: {scores}: column {unknown_q[0]!r} is not a manual question of "
                         f"{meta['lab']} ({', '.join(qs)})")
    new: dict[str, dict] = {}
    for i, r in enumerate(rows, start=2):
        ident = (r.get(who_col) or "").strip()
        if ident == grade.POINTS_ROW or not ident:
            continue
        student = ident if who_col == "student" or meta.get("named") and ident not in key else key.get(ident)
        if student is None or student not in results:
            raise SystemExit(f"manual: {scores} line {i}: unknown {who_col} {ident!r}")
        for q in qs:
            v = (r.get(q) or "").strip()
            if v == "":
                continue
            try:
                x = float(v)
            except ValueError:
                raise SystemExit(f"manual: {scores} line {i}: {q} = {v!r} is not a number")
            if not 0 <= x <= float(qs[q]):
                raise SystemExit(f"manual: {scores} line {i}: {q} = {v} is outside 0..{qs[q]:g}")
            new.setdefault(student, {})[q] = x
    maxima, old = grade.manual_scores(out)
    merged = {s: dict(v) for s, v in old.items()}
    for s, v in new.items():
        merged.setdefault(s, {}).update(v)
    allq = list(dict.fromkeys(list(maxima) + list(qs)))
    pts = {**maxima, **{q: float(p) for q, p in qs.items()}}
    tmp = out / (grade.MANUAL + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = grade._csv_writer(f)
        w.writerow(["student"] + allq)
        w.writerow([grade.POINTS_ROW] + [f"{pts[q]:g}" for q in allq])
        for s in sorted(merged):
            w.writerow([s] + [f"{merged[s][q]:g}" if q in merged[s] else "" for q in allq])
    tmp.replace(out / grade.MANUAL)
    grade.write_outputs(list(results.values()), out, settings.get("lab") or meta["lab"],
                        deadline=settings.get("deadline"), duplicates=settings.get("duplicates", "flag"))
    return out / grade.MANUAL


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("packet", help="one HTML file of answers per manual question, and a score template")
    p.add_argument("submissions")
    p.add_argument("--lab", required=True, choices=points.LABS)
    p.add_argument("--out", required=True, help="the folder grade.py wrote (the packet goes in OUT/manual)")
    p.add_argument("--named", action="store_true", help="show students' names, not anonymous ids")
    p.add_argument("--master", help="the master notebook (default notebooks/<lab>.ipynb)")
    m = sub.add_parser("merge", help="merge a filled score template into the gradebook")
    m.add_argument("scores")
    m.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "packet":
        if not Path(a.submissions).is_dir():
            raise SystemExit(f"manual: no folder {a.submissions}")
        d = packet(Path(a.submissions), a.lab, Path(a.out), a.named, Path(a.master) if a.master else None)
        print(f"packet: {d} (score template {d / 'scores-template.csv'})")
    else:
        print(f"manual scores: {merge(Path(a.scores), Path(a.out))}; gradebook {Path(a.out) / 'gradebook.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

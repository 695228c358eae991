"""Each lab's point table, read from its master notebook: what every question is worth and what
earns it.

    python3 grading/points.py [lab1 lab2 ...] [--write | --check]

A measured answer (a question with hidden tests) earns its points only when all of its hidden
checks pass: the record check of the saved results and the recomputation of the answer from the
raw logs (grading/fastgrade.py, score_file).  Its public checks (types, shapes) give feedback
and are worth 0.  A question with public tests only is scored by them; a manual question is
graded by hand.  Prints one Markdown table per lab; `--write` puts a short one at the end of each
labs/<lab>/handout.md, `--check` exits 1 when a handout's table is out of date.  Exits 2 for a lab
it does not know.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
LABS = ("lab1", "lab2", "lab3", "lab4", "lab5")


def _config(src: str) -> dict:
    out = {}
    for line in src.splitlines()[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def table(lab: str, notebook: Path | None = None) -> list[dict]:
    """[{question, points, graded, hidden, public, check_points}] in the notebook's order."""
    import nbformat
    nb = nbformat.read(notebook or KIT / "notebooks" / f"{lab}.ipynb", as_version=4)
    rows, q, in_tests = [], None, False
    for c in nb.cells:
        src = c.source.strip()
        if c.cell_type == "raw" and src.startswith("# BEGIN QUESTION"):
            cfg = _config(src)
            pts = cfg.get("points", "0")
            try:
                pts = float(pts)
            except ValueError:          # a list of points per case
                pts = float(sum(float(x) for x in pts.strip("[]").split(",") if x.strip()))
            q = {"question": cfg.get("name", "?"), "points": pts,
                 "manual": cfg.get("manual", "false").lower() == "true", "hidden": 0, "public": 0}
            rows.append(q)
        elif c.cell_type == "raw" and src.startswith("# BEGIN TESTS"):
            in_tests = True
        elif c.cell_type == "raw" and src.startswith("# END TESTS"):
            in_tests = False
        elif c.cell_type == "code" and in_tests and q is not None:
            q["hidden" if src.startswith("# HIDDEN") else "public"] += 1
    for q in rows:
        if q.pop("manual"):
            q["graded"], q["check_points"] = "by hand", 0.0
        elif q["hidden"]:
            q["graded"], q["check_points"] = "recomputed", 0.0
        else:
            q["graded"], q["check_points"] = "public checks", q["points"]
    return rows


def markdown(lab: str) -> str:
    rows = table(lab)
    lines = [f"{lab}: points", "",
             "| question | points | graded by | hidden checks | public checks |",
             "|---|---:|---|---:|---:|"]
    for q in rows:
        what = {"recomputed": "hidden checks: recomputed from the raw logs or the reference (all must pass)",
                "by hand": "by hand", "public checks": "its public checks"}[q["graded"]]
        pub = f"{q['public']} (0 points)" if q["graded"] == "recomputed" else str(q["public"])
        lines.append(f"| {q['question']} | {q['points']:g} | {what} | {q['hidden']} | {pub} |")
    auto = sum(q["points"] for q in rows if q["graded"] != "by hand")
    hand = sum(q["points"] for q in rows if q["graded"] == "by hand")
    lines += ["", f"autograded {auto:g}, by hand {hand:g}, total {auto + hand:g}"]
    return "\n".join(lines)


BEGIN = "<!-- points: written by grading/points.py --write from the master notebook -->"
END = "<!-- end of points -->"


def handout_block(lab: str) -> str:
    """The short table a handout carries (between BEGIN and END)."""
    rows = table(lab)
    lines = [BEGIN, "### Points", "",
             "An autograded answer earns its points only when every hidden check passes: the record "
             "check of your saved results, then the answer recomputed from your raw logs (or compared "
             "with the reference solution). The notebook's public checks are feedback, worth 0 points.",
             "", "| question | points | graded |", "|---|---:|---|"]
    for q in rows:
        how = {"recomputed": "autograded", "by hand": "by hand",
               "public checks": "autograded (its public checks)"}[q["graded"]]
        lines.append(f"| {q['question']} | {q['points']:g} | {how} |")
    auto = sum(q["points"] for q in rows if q["graded"] != "by hand")
    hand = sum(q["points"] for q in rows if q["graded"] == "by hand")
    lines += ["", f"Autograded {auto:g}, by hand {hand:g}, total {auto + hand:g}.", END]
    return "\n".join(lines)


def handout_path(lab: str) -> Path:
    return KIT / "labs" / lab / "handout.md"


def write_handout(lab: str) -> bool:
    """Put the lab's point table in its handout (replacing an older one); True if it changed."""
    p = handout_path(lab)
    text = p.read_text()
    block = handout_block(lab)
    if BEGIN in text and END in text:
        new = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        new = text.rstrip("\n") + "\n\n" + block + "\n"
    if new != text:
        p.write_text(new)
    return new != text


def handout_current(lab: str) -> bool:
    text = handout_path(lab).read_text()
    return handout_block(lab) in text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labs", nargs="*", default=list(LABS))
    ap.add_argument("--write", action="store_true", help="put each table in labs/<lab>/handout.md")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a handout's table differs from its notebook's points")
    a = ap.parse_args(argv)
    unknown = [lab for lab in a.labs if lab not in LABS]
    if unknown:
        print(f"points: no such lab: {', '.join(unknown)} (labs: {', '.join(LABS)})", file=sys.stderr)
        return 2
    if a.check:
        stale = [lab for lab in a.labs if not handout_current(lab)]
        for lab in stale:
            print(f"points: {handout_path(lab)} does not carry the points of notebooks/{lab}.ipynb "
                  f"(run grading/points.py --write {lab})", file=sys.stderr)
        return 1 if stale else 0
    if a.write:
        for lab in a.labs:
            print(f"{handout_path(lab)}: {'updated' if write_handout(lab) else 'up to date'}")
        return 0
    print("\n\n".join(markdown(lab) for lab in a.labs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

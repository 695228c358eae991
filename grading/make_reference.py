"""Tolerance bands from reference runs.

    python3 grading/make_reference.py lab1 SUBMISSION_DIR... [--margin 0.15] > labs/lab1/reference.csv

Each SUBMISSION_DIR is a folder holding `<lab>/record.json` and the runs it lists (what a lab
notebook leaves in `submission/`), made by an instructor in the lab VM -- several of them, in
each mode, so the bands cover run-to-run spread.  Every graded metric is recomputed with the
same code the autograder uses (notebooks/labkit.py); the band is [min, max] over the reference
runs widened by the margin.  Runs that fail labkit.verify() are refused.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT / "notebooks"))

import labkit  # noqa: E402


def metrics(lab: str, root: Path) -> dict[tuple[str, str], float]:
    out = {}
    g = labkit.goodput(lab, root)
    if lab == "lab1":
        sel = g[g["experiment"].isin(["lab1-wired", "lab1-wifi"])]
        for (prof, cca), v in sel.groupby(["profile", "cca"])["mbps"].mean().items():
            out[("throughput_mbps", f"{prof}/{cca}")] = v
        out[("vegas_queue_pkts", "wired/vegas")] = labkit.vegas_diff(lab, "lab1-wired", root)
    elif lab == "lab2":
        for exp, metric in (("lab2-p1", "p1_mbps"), ("lab2-p10", "p10_mbps")):
            for cca, v in g[g["experiment"] == exp].groupby("cca")["mbps"].mean().items():
                out[(metric, cca)] = v
        out[("share_pct", "bbr")] = labkit.share(lab, "lab2-share", "bbr", root)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lab", choices=("lab1", "lab2"))
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--margin", type=float, default=0.15)
    a = ap.parse_args(argv)
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for root in a.roots:
        bad = labkit.verify(a.lab, root)
        if bad:
            print(f"make_reference: {root}: not a clean run: {bad[:3]}", file=sys.stderr)
            return 1
        mode = labkit.read_record(a.lab, root)["mode"]
        for (metric, key), v in metrics(a.lab, root).items():
            if v == v:
                values[(mode, metric, key)].append(float(v))
    print(f"# Tolerance bands for {a.lab}, from {len(a.roots)} reference run folder(s) "
          f"(grading/make_reference.py, margin {a.margin:g}).")
    print("mode,metric,key,lo,hi,n,source")
    for (mode, metric, key), vs in sorted(values.items()):
        lo, hi = min(vs) * (1 - a.margin), max(vs) * (1 + a.margin)
        print(f"{mode},{metric},{key},{lo:.4g},{hi:.4g},{len(vs)},reference runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

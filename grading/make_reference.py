"""Tolerance bands from reference runs.

    python3 grading/make_reference.py lab1 SUBMISSION_DIR... [--margin 0.25] > labs/lab1/reference.csv

Each SUBMISSION_DIR is a folder holding `<lab>/record.json` and the runs it lists (what a lab
notebook leaves in `submission/`), made by an instructor in the lab VM -- several of them, in
each mode, so the bands cover run-to-run spread.  Every graded metric is recomputed with the
same code the autograder uses (notebooks/labkit.py), each from the runs of its experiment whose
fidelity verdict is OK (a folder where one experiment's verdict failed still gives the others).  The band is [min, max] over the reference
runs, widened on each side by half their range (a few runs understate the spread) and by the
margin times the value; metrics that cannot be negative stay >= 0.  Folders that fail
labkit.verify() for any other reason are refused.  The header records how the bands were made: the reference
folders, the kernel(s), kit commit(s) and dates of their runs, the number of runs per band.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT / "notebooks"))

import labkit  # noqa: E402


def metrics(lab: str, root: Path) -> dict[tuple[str, str], tuple[float, str]]:
    """{(metric, key): (value, the experiment it comes from)}"""
    out = {}
    g = labkit.goodput(lab, root)
    if lab == "lab1":
        sel = g[g["experiment"].isin(["lab1-wired", "lab1-wifi"])]
        for (exp, prof, cca), v in sel.groupby(["experiment", "profile", "cca"])["mbps"].mean().items():
            # Vegas' throughput in a quick run depends on whether its slow-start overshoot ended
            # in a loss (lab VM: 31.9-46.8 Mbit/s on wired, 5.3-47.2 on Wi-Fi): not banded
            if cca != "vegas":
                out[("throughput_mbps", f"{prof}/{cca}")] = (v, exp)
        out[("vegas_diff_pkts", "wired/vegas")] = (labkit.vegas_diff(lab, "lab1-wired", root), "lab1-wired")
        out[("vegas_queue_pkts", "wired/vegas")] = (labkit.vegas_queue(lab, "lab1-wired", root), "lab1-wired")
    elif lab == "lab2":
        for exp, metric in (("lab2-p1", "p1_mbps"), ("lab2-p10", "p10_mbps")):
            for cca, v in g[g["experiment"] == exp].groupby("cca")["mbps"].mean().items():
                if cca in ("bbr", "cubic"):          # the study's comparison; the notebook bands these
                    out[(metric, cca)] = (v, exp)
        out[("share_pct", "bbr")] = (labkit.share(lab, "lab2-share", "bbr", root), "lab2-share")
    return out


def unfaithful(problems: list[str]) -> set[str] | None:
    """The experiments whose runs failed only their fidelity verdict, or None when anything else
    is wrong (hashes, manifest, congestion control, tables): such a folder is refused."""
    out = set()
    for p in problems:
        rel, _, what = p.partition(": ")
        if not what.startswith("fidelity verdict not OK") or "/" not in rel:
            return None
        out.add(rel.split("/")[0])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lab", choices=("lab1", "lab2"))
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--margin", type=float, default=0.25)
    ap.add_argument("--keep", type=Path, help="an existing reference.csv whose rows for the modes "
                    "not given here are carried over as they are")
    a = ap.parse_args(argv)
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    kernels, commits, starts, modes = set(), set(), [], set()
    for root in a.roots:
        bad = labkit.verify(a.lab, root)
        skip = unfaithful(bad)
        if skip is None:
            print(f"make_reference: {root}: not a clean run: {bad[:3]}", file=sys.stderr)
            return 1
        if skip:
            print(f"# {root}: left out {', '.join(sorted(skip))} (fidelity verdict not OK)")
        mode = labkit.read_record(a.lab, root)["mode"]
        modes.add(mode)
        for d in labkit.run_dirs(a.lab, root):
            m = json.loads((d / "manifest.json").read_text())
            kernels.add(str(m.get("kernel")))
            commits.add(str((m.get("kit") or {}).get("commit", "?"))[:12]
                        + ("+dirty" if (m.get("kit") or {}).get("dirty") else ""))
            starts.append(str(m.get("start", "?"))[:19])
        for (metric, key), (v, exp) in metrics(a.lab, root).items():
            if v == v and exp not in skip:
                values[(mode, metric, key)].append(float(v))
    print(f"# Tolerance bands for {a.lab}, made by grading/make_reference.py from {len(a.roots)} "
          f"reference run folder(s) in {'/'.join(sorted(modes))} mode:")
    print("#   " + " ".join(str(r) for r in a.roots))
    print(f"#   kernel {', '.join(sorted(kernels))}; kit {', '.join(sorted(commits))}")
    print(f"#   runs made {min(starts)} .. {max(starts)} UTC; n = runs per band")
    print(f"# band = [min, max] of the runs, widened by half their range and by {a.margin:g} x the value.")
    print("mode,metric,key,lo,hi,n,source")
    for (mode, metric, key), vs in sorted(values.items()):
        lo, hi = band(vs, a.margin)
        if metric.endswith("_pct"):
            hi = min(hi, 100.0)
        print(f"{mode},{metric},{key},{lo:.4g},{hi:.4g},{len(vs)},reference runs")
    if a.keep is not None and a.keep.is_file():
        kept = [line for line in a.keep.read_text().splitlines()
                if line and not line.startswith("#") and not line.startswith("mode,")
                and line.split(",")[0] not in modes]
        if kept:
            print(f"# carried over from the previous {a.keep.name} (no reference runs in this mode yet):")
            print("\n".join(kept))
    return 0


def band(vs: list[float], margin: float) -> tuple[float, float]:
    lo, hi = min(vs), max(vs)
    half = (hi - lo) / 2
    lo, hi = lo - half - margin * abs(lo), hi + half + margin * abs(hi)
    if min(vs) >= 0:
        lo = max(lo, 0.0)
    return lo, hi


if __name__ == "__main__":
    sys.exit(main())

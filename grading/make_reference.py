"""Tolerance bands from reference runs.

    python3 grading/make_reference.py lab1 SUBMISSION_DIR... [--margin 0.25] [--leave-out RUN=WHY]
        [--min-samples 3] [--keep labs/lab1/reference.csv] [--cover labs/lab1/reference.csv] \
        > new-reference.csv

Each SUBMISSION_DIR is a folder holding `<lab>/record.json` and the runs it lists (what a lab
notebook leaves in `submission/`), made by an instructor in the lab VM -- several of them, in
each mode, so the bands cover run-to-run spread.  Every graded metric is recomputed with the
same code the autograder uses (notebooks/labkit.py), each from the runs of its experiment whose
fidelity verdict is OK (a folder where one experiment's verdict failed still gives the others).
Runs on students' links (labkit.link_factors) count too: a throughput band (labkit.RATE_SCALED_METRICS)
is made on the lab's own link's scale, each run's value divided by its link's rate factor, and the
autograder scales it back to the student's link.  Each repetition of an experiment is one sample (full mode repeats each experiment three times,
so one full-mode folder gives three samples; the autograder bands a student's mean over the
repetitions, whose spread is smaller than that of single repetitions).  The band is [min, max]
over the samples, widened on each side by half their range (a few samples understate the spread)
and by the margin times the value; metrics that cannot be negative stay >= 0.  A band needs at
least --min-samples samples (3 by default): with fewer, the script names the band and writes
nothing, because one or two short runs say little about the spread (a quick-mode band made from
one run once failed a later real run of the same experiment).  Folders that fail
labkit.verify() for any other reason are refused.  The header records how the bands were made: the reference
folders, the kernel(s), kit commit(s) and dates of their runs, the number of samples per band,
and every run left out: by its fidelity verdict, or by --leave-out RUN=WHY (a run the instructor
knows was disturbed, e.g. the host was busy during it; WHY goes into the header).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
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
    # A run on a student's link (labkit.link_factors) gives the metrics that follow the link's
    # rate on the lab's own link's scale: labkit.outside_bands scales the band back to a student's.
    k = labkit.link_rate_factor(lab, root)
    return {mk: ((v / k, exp) if mk[0] in labkit.RATE_SCALED_METRICS else (v, exp))
            for mk, (v, exp) in out.items()}


def repetitions(lab: str, root: Path, scratch: Path, leave_out=()) -> list[Path]:
    """One folder per repetition number (a run's folder name ends in -<repetition>), each with a
    record listing only that repetition's runs (without the runs `leave_out` names) and links to
    the experiments' folders; `root` itself when its runs were not repeated nor left out."""
    rec = labkit.read_record(lab, root)
    groups: dict[str, dict] = defaultdict(dict)
    for rel, files in rec["runs"].items():
        rep = rel.rsplit("-", 1)[-1]
        if rel not in leave_out:
            groups[rep if rep.isdigit() else "1"][rel] = files
    if len(groups) < 2 and not set(leave_out) & set(rec["runs"]):
        return [root]
    out = []
    for rep, runs in sorted(groups.items(), key=lambda kv: int(kv[0])):
        sub = scratch / f"{len(list(scratch.iterdir()))}" / lab
        sub.mkdir(parents=True)
        for exp in {rel.split("/")[0] for rel in runs}:
            (sub / exp).symlink_to((labkit.lab_dir(lab, root) / exp).resolve(), target_is_directory=True)
        (sub / labkit.RECORD).write_text(json.dumps(dict(rec, runs=runs)))
        out.append(sub.parent)
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
    ap.add_argument("--min-samples", type=int, default=3,
                    help="fewest samples a band may be made from (default 3)")
    ap.add_argument("--keep", type=Path, help="an existing reference.csv whose rows for the modes "
                    "not given here are carried over as they are")
    ap.add_argument("--cover", type=Path, help="an existing reference.csv whose bands for the modes "
                    "given here the new ones must contain (each new band becomes the hull of both): "
                    "earlier reference runs no longer at hand still count")
    ap.add_argument("--leave-out", metavar="RUN=WHY", action="append", default=[],
                    help="leave out one run (its folder under the lab's, e.g. lab1-wifi/20261123-065857-3) "
                    "for the reason WHY, which the header records (e.g. the host was busy during it)")
    a = ap.parse_args(argv)
    a.leave = dict(x.split("=", 1) if "=" in x else (x, "") for x in a.leave_out)
    if not all(a.leave.values()):
        print("make_reference: --leave-out takes RUN=WHY (the reason goes into the header)", file=sys.stderr)
        return 2
    known = {rel for root in a.roots for rel in (labkit.read_record(a.lab, root) or {}).get("runs", {})}
    if a.min_samples < 1:
        print("make_reference: --min-samples must be at least 1", file=sys.stderr)
        return 2
    if set(a.leave) - known:
        print(f"make_reference: --leave-out {sorted(set(a.leave) - known)[0]}: no such run in the "
              "reference folders", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="make_reference-") as tmp:
        return bands(a, Path(tmp))


def bands(a: argparse.Namespace, scratch: Path) -> int:
    """Print the bands the reference folders `a.roots` give (`scratch`: for per-repetition views);
    nothing is printed unless every band can be made."""
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    kernels, commits, starts, modes = set(), set(), [], set()
    notes = []
    for root in a.roots:
        bad = labkit.verify(a.lab, root)
        skip = unfaithful(bad)
        if skip is None:
            print(f"make_reference: {root}: not a clean run: {bad[:3]}", file=sys.stderr)
            return 1
        if skip:
            notes.append(f"# {root}: left out {', '.join(sorted(skip))} (fidelity verdict not OK)")
        mode = labkit.read_record(a.lab, root)["mode"]
        modes.add(mode)
        for d in labkit.run_dirs(a.lab, root):
            m = json.loads((d / "manifest.json").read_text())
            kernels.add(str(m.get("kernel")))
            commits.add(str((m.get("kit") or {}).get("commit", "?"))[:12]
                        + ("+dirty" if (m.get("kit") or {}).get("dirty") else ""))
            starts.append(str(m.get("start", "?"))[:19])
        for rel in sorted(set(a.leave) & set(labkit.read_record(a.lab, root)["runs"])):
            notes.append(f"# {root}: left out {rel} ({a.leave[rel]})")
        for sample in repetitions(a.lab, root, scratch, a.leave):
            for (metric, key), (v, exp) in metrics(a.lab, sample).items():
                if v == v and exp not in skip:
                    values[(mode, metric, key)].append(float(v))
    few = [f"{mode} {metric} {key}: {len(vs)}" for (mode, metric, key), vs in sorted(values.items())
           if len(vs) < a.min_samples]
    if few:
        print(f"make_reference: too few samples for a band (fewer than --min-samples "
              f"{a.min_samples}): {'; '.join(few)}; make more reference runs", file=sys.stderr)
        return 1
    out = notes + [
        f"# Tolerance bands for {a.lab}, made by grading/make_reference.py from {len(a.roots)} "
        f"reference run folder(s) in {'/'.join(sorted(modes))} mode:",
        "#   " + " ".join(str(r) for r in a.roots),
        f"#   kernel {', '.join(sorted(kernels))}; kit {', '.join(sorted(commits))}",
        f"#   runs made {min(starts)} .. {max(starts)} UTC; n = samples per band (one per "
        "repetition of an experiment)",
        f"# band = [min, max] of the samples, widened by half their range and by {a.margin:g} x the value.",
        "mode,metric,key,lo,hi,n,source"]
    earlier = {}
    if a.cover is not None:
        import pandas as pd
        ref = pd.read_csv(a.cover, comment="#")
        earlier = {(r.mode, r.metric, r.key): (float(r.lo), float(r.hi), int(r.n))
                   for r in ref.itertuples() if r.mode in modes}
        out.insert(len(notes) + 5, f"# each band also contains the band {a.cover} had for it (its "
                   "reference runs are not at hand): n counts both")
    for (mode, metric, key), vs in sorted(values.items()):
        lo, hi = band(vs, a.margin)
        n, source = len(vs), "reference runs"
        if (mode, metric, key) in earlier:
            elo, ehi, en = earlier[(mode, metric, key)]
            lo, hi, n, source = min(lo, elo), max(hi, ehi), n + en, "reference runs and the earlier band"
        if metric.endswith("_pct"):
            hi = min(hi, 100.0)
        out.append(f"{mode},{metric},{key},{lo:.4g},{hi:.4g},{n},{source}")
    if a.keep is not None and a.keep.is_file():
        kept = [line for line in a.keep.read_text().splitlines()
                if line and not line.startswith("#") and not line.startswith("mode,")
                and line.split(",")[0] not in modes]
        if kept:
            out.append(f"# carried over from the previous {a.keep.name} (no reference runs in this mode yet):")
            out += kept
    print("\n".join(out))
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

"""python -m cclab.analysis {verdict,report,metrics} RUN_DIR...  (see cclab/analysis/__init__.py)"""

from __future__ import annotations

import argparse
import json
import sys

from . import fidelity, metrics, report
from .data import load_runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cclab.analysis")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verdict", help="check each run's fidelity and record it beside its manifest (fidelity.json)")
    v.add_argument("paths", nargs="+", help="run, experiment or results folders")
    v.add_argument("--no-write", action="store_true", help="print only, leave manifests alone")
    v.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    v.add_argument("--strict", action="store_true", help="exit 2 if any run is untrustworthy")
    r = sub.add_parser("report", help="a Markdown (and HTML) report per experiment")
    r.add_argument("paths", nargs="+")
    r.add_argument("-o", "--out", default="reports")
    r.add_argument("--html", action="store_true")
    r.add_argument("--svg", action="store_true", help="also save every figure as SVG")
    r.add_argument("--no-verdict", action="store_true", help="do not check unchecked runs")
    m = sub.add_parser("metrics", help="metrics as CSV on stdout")
    m.add_argument("paths", nargs="+")
    m.add_argument("--per", choices=["flow", "run", "cca", "summary"], default="flow")
    a = ap.parse_args(argv)

    runs = load_runs(a.paths)
    if not runs:
        print(f"no runs (no manifest.json) under {', '.join(a.paths)}", file=sys.stderr)
        return 1
    if a.cmd == "verdict":
        out, bad = {}, 0
        for run in runs:
            res = fidelity.verdict(run) if a.no_write else fidelity.write_verdict(run.path)
            out[str(run.path)] = res
            bad += not res["ok"]
            if not a.json:
                print(f"{run.path}: {fidelity.summary_line(res)}")
                for c in res["checks"]:
                    mark = {True: "ok ", False: "NO ", None: " ? "}[c["ok"]]
                    d = f"[{c['direction']}] " if c.get("direction") else ""
                    print(f"    {mark} {c['name']:<20} {d}{c['reason']}")
        if a.json:
            print(json.dumps(out, indent=2, default=str))
        return 2 if (a.strict and bad) else 0
    if a.cmd == "report":
        for p in report.build(runs, a.out, html=a.html, check=not a.no_verdict, svg=a.svg):
            print(p)
        return 0
    if a.per == "flow":
        df = metrics.flow_table(runs)
    elif a.per == "run":
        df = metrics.run_table(runs)
    elif a.per == "cca":
        df = metrics.per_cca(runs)
    else:
        pc = metrics.per_cca(runs)
        df = metrics.summarise(pc, "cca", [c for c in report.SUMMARY_METRICS if c in pc])
    df.to_csv(sys.stdout, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A report per experiment: verdicts, metrics with confidence intervals, figures, provenance.

    python -m cclab.analysis report results/cubic-vs-bbr -o reports/ [--html]

writes reports/<experiment>/report.md (and report.html) with its figures beside it.
"""

from __future__ import annotations

import html as _html
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from . import events, fidelity, metrics, plots
from .data import RunData, as_runs

SUMMARY_METRICS = ["goodput_bps", "utilisation", "rtt_p50_ms", "rtt_p95_ms", "rtt_p99_ms",
                   "qdelay_p95_ms", "retransmits", "retrans_rate", "ss_exit_s", "ss_overshoot",
                   "fct_s"]


def _fmt(v, ref=None) -> str:
    """Numbers for tables; `ref` picks the unit (values >= 1e6 shown in millions)."""
    if v is None:
        return ""
    if isinstance(v, float):
        if not math.isfinite(v):
            return ""
        a = abs(v if ref is None else ref)
        if a >= 1e6:
            return f"{v / 1e6:.3g} M"
        return f"{v:.4g}"
    return str(v)


def md_table(df: pd.DataFrame) -> str:
    if not len(df):
        return "_(none)_\n"
    cols = list(df.columns)
    out = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(_fmt(r[c]).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(out) + "\n"


def summary_table(runs, confidence: float = 0.95) -> pd.DataFrame:
    """Per algorithm: each metric as 'mean +- half-width (n)' over repetitions."""
    pc = metrics.per_cca(runs)
    if not len(pc):
        return pd.DataFrame()
    s = metrics.summarise(pc, "cca", [m for m in SUMMARY_METRICS if m in pc], confidence)
    s = s[s["n"] > 0]
    s["value"] = [
        (_fmt(r["mean"]) + ("" if not math.isfinite(r["half_width"]) else f" ± {_fmt(r['half_width'], r['mean'])}")
         + f" (n={r['n']})") if math.isfinite(r["mean"]) else ""
        for _, r in s.iterrows()]
    return s.pivot(index="metric", columns="cca", values="value").reindex(
        [m for m in SUMMARY_METRICS if m in set(s["metric"])]).reset_index()


def verdict_table(runs) -> pd.DataFrame:
    rows = []
    for r in runs:
        v = r.fidelity
        rows.append({"run": r.name, "rep": r.repetition, "status": r.manifest.get("status"),
                     "fidelity": "not checked" if not v else ("OK" if v.get("ok") else "UNTRUSTWORTHY"),
                     "failed": ", ".join(v.get("failed", [])) if v else "",
                     "not measured": ", ".join(v.get("unknown", [])) if v else ""})
    return pd.DataFrame(rows)


def check_table(run: RunData) -> pd.DataFrame:
    v = run.fidelity or {}
    return pd.DataFrame([{"check": c["name"], "dir": c.get("direction", ""),
                          "ok": {True: "yes", False: "NO", None: "?"}[c["ok"]],
                          "measured": c.get("measured"), "expected": c.get("expected"),
                          "reason": c.get("reason")} for c in v.get("checks", [])])


def figures(runs, out: Path, formats=("png",)) -> list[tuple[str, Path]]:
    """Make every figure that the runs have data for; returns (title, file)."""
    figs = []

    def add(title, name, fn, *a, **k):
        try:
            fig = fn(*a, **k)
        except Exception as e:          # one figure failing must not lose the report
            figs.append((f"{title} (failed: {type(e).__name__}: {e})", None))
            return
        p = out / f"{name}.png"
        for fmt in formats:
            fig.savefig(out / f"{name}.{fmt}", dpi=110)
        plt.close(fig)
        figs.append((title, p))

    show = runs if len(runs) <= 6 else runs[:6]
    add(f"Delivered ({plots.window_text(metrics.THROUGHPUT_WINDOW)} bins), cwnd and RTT per flow"
        + ("" if show is runs else " (first 6 runs)"),
        "timeseries", plots.timeseries, show)
    add("Throughput against p95 RTT", "throughput_delay", plots.throughput_delay, runs)
    add("Algorithms compared (mean, 95% CI)", "bars", plots.bars, runs)
    add("CDF of RTT", "cdf_rtt", plots.cdf, runs, "rtt")
    add("CDF of queueing delay", "cdf_qdelay", plots.cdf, runs, "qdelay")
    add("Download time against size", "download_times", plots.download_times, runs)
    ft = metrics.flow_table(runs)
    if len(ft) and ft["fct_s"].notna().any():
        add("Flow completion time against size", "fct", plots.fct_vs_size, runs)
    if any(len(events.search_norm_diff(r)) for r in runs):
        add("SEARCH norm_diff against THRESH", "search_norm_diff", plots.norm_diff, show)
    if any(len(events.spline_modes(r)) for r in runs):
        add("Spline mode timeline", "spline_modes", plots.spline_modes, show)
    return figs


def build(runs, out, html: bool = False, check: bool = True, write_verdicts: bool = True,
          svg: bool = False) -> list[Path]:
    """One report per experiment among `runs`; returns the report files.  Figures are PNG
    (embedded in the report), and also SVG with svg=True."""
    runs = as_runs(runs)
    out = Path(out)
    by_exp: dict[str, list[RunData]] = {}
    for r in runs:
        if check and not r.fidelity:
            v = fidelity.write_verdict(r.path) if write_verdicts else fidelity.verdict(r)
            r.manifest["fidelity"] = v
        by_exp.setdefault(r.experiment, []).append(r)
    written = []
    for exp, rs in by_exp.items():
        d = out / exp
        d.mkdir(parents=True, exist_ok=True)
        figs = figures(rs, d, ("png", "svg") if svg else ("png",))
        md = [f"# Experiment `{exp}`\n",
              f"{len(rs)} run(s); {sum(r.trusted is True for r in rs)} trustworthy, "
              f"{sum(r.trusted is False for r in rs)} untrustworthy, "
              f"{sum(r.trusted is None for r in rs)} not checked.\n"]
        bad = [r for r in rs if r.trusted is False]
        if bad:
            md.append("> **Warning: untrustworthy runs.** Their numbers are in the tables and "
                      "figures (marked) but should not be relied on:\n")
            for r in bad:
                md.append(f"> - `{r.name}`: {fidelity.summary_line(r.fidelity)}\n")
            md.append("\n")
        md += ["## Fidelity verdicts\n", md_table(verdict_table(rs)),
               "\n## Metrics per algorithm (mean ± 95% t-interval over runs)\n",
               md_table(summary_table(rs)),
               "\n## Per run\n", md_table(metrics.run_table(rs).drop(columns=["experiment"], errors="ignore")),
               "\n## Per flow\n",
               md_table(_flow_columns(metrics.flow_table(rs))),
               "\n## Figures\n"]
        for title, p in figs:
            md.append(f"### {title}\n")
            if p is not None:
                md.append(f"![{title}]({p.name})\n")
        md.append("\n## Provenance\n")
        prov = pd.DataFrame([r.provenance() for r in rs])
        md.append(md_table(prov))
        md.append("\n## Fidelity checks per run\n")
        for r in rs:
            md.append(f"### `{r.name}`: {fidelity.summary_line(r.fidelity)}\n")
            md.append(md_table(check_table(r)))
        text = "\n".join(md)
        path = d / "report.md"
        path.write_text(text)
        written.append(path)
        if html:
            hp = d / "report.html"
            hp.write_text(to_html(text, exp))
            written.append(hp)
    return written


def _flow_columns(ft: pd.DataFrame) -> pd.DataFrame:
    cols = ["run", "flow", "cca", "goodput_bps", "utilisation", "rtt_p50_ms", "rtt_p95_ms",
            "rtt_p99_ms", "qdelay_p95_ms", "retransmits", "ss_exit_s", "ss_exit_cwnd",
            "ss_overshoot", "fct_s"]
    return ft[[c for c in cols if c in ft]] if len(ft) else ft


def to_html(md: str, title: str) -> str:
    """The report's Markdown as a self-contained HTML page (the subset this module writes)."""
    body, in_table, in_quote = [], False, False
    for line in md.splitlines():
        esc = _html.escape(line)
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if set(line.replace("|", "").strip()) <= set("-"):
                continue
            if not in_table:
                body.append("<table>")
                in_table = True
                body.append("<tr>" + "".join(f"<th>{_html.escape(c)}</th>" for c in cells) + "</tr>")
            else:
                body.append("<tr>" + "".join(f"<td>{_html.escape(c)}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith(">"):
            if not in_quote:
                body.append('<div class="warn">')
                in_quote = True
            body.append(_inline(esc[4:].lstrip("- ")) + "<br>")
            continue
        if in_quote:
            body.append("</div>")
            in_quote = False
        if line.startswith("![") and "](" in line:
            alt, src = line[2:].split("](", 1)
            body.append(f'<img src="{_html.escape(src.rstrip(")"))}" alt="{_html.escape(alt)}">')
        elif line.startswith("### "):
            body.append(f"<h3>{_inline(esc[4:])}</h3>")
        elif line.startswith("## "):
            body.append(f"<h2>{_inline(esc[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{_inline(esc[2:])}</h1>")
        elif line.strip():
            body.append(f"<p>{_inline(esc)}</p>")
    if in_table:
        body.append("</table>")
    if in_quote:
        body.append("</div>")
    css = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse;"
           "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}"
           ".warn{background:#fdd;border-left:6px solid #c00;padding:6px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_html.escape(title)}</title>"
            f"<style>{css}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _inline(s: str) -> str:
    import re
    s = re.sub(r"`([^`]*)`", r"<code>\1</code>", s)
    return re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", s)

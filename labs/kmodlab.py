"""Labs 3 and 4 (the kit's own congestion-control modules): running their experiments, and the
numbers their notebooks and autograder tests recompute from the saved raw tables.

Runs go through the engine like labkit.run_lab does, with two additions these labs need:

* module parameters.  An experiment file may hold a `[lab.module_params]` table, e.g.
      tcp_cubic = { hystart = 0 }
      tcp_search = { thresh = 250 }
  They are global to the kernel, so they are written to /sys/module/<module>/parameters/
  before the experiment's runs, read back into every run's manifest ("module_params"), and
  restored afterwards.  The engine never sees the `lab` table (spec.from_dict would refuse it);
  the manifest's spec keeps it, so a run says what it asked for.
* the modules' tracepoints (spline:spline_mode, search:search_exit) are recorded by the engine
  when the file's [measure] events names them (spline.csv, search.csv in the run folder).

Everything else -- the record of SHA-256 hashes, verify(), the fidelity verdict, replaying saved
results when CCLAB_REPLAY=1 or when results of the same mode exist -- is labkit's.

The analysis uses the engine's package (cclab.analysis: metrics, stats, events, plots): in the lab
VM the kit is at /kit (elsewhere, point CCLAB_KIT at a checkout of the kit); the autograder that
grading/build.py makes carries its own copy, cclab.zip, which grading uses.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

import labkit

KIT = labkit.kit_root()
BUNDLE = "cclab.zip"        # the engine's package, in the autograder (grading/build.py)


def _engine_path() -> Path | None:
    """Where `import cclab` comes from: when grading (replaying), the copy grading/build.py put
    in the autograder -- the code the hidden tests were built with, which the autograder copies
    over any file of that name a submission brings, and which needs no kit on the grading
    machine; otherwise the kit (the lab VM's /kit, or CCLAB_KIT)."""
    if labkit.replaying():
        for d in (Path(__file__).resolve().parent, Path.cwd()):
            if (d / BUNDLE).is_file():
                return d / BUNDLE
    return KIT


_ENGINE = _engine_path()
if _ENGINE is not None:
    if str(_ENGINE) in sys.path:
        sys.path.remove(str(_ENGINE))
    sys.path.insert(0, str(_ENGINE))

from cclab.analysis import events, metrics, stats  # noqa: E402
from cclab.analysis.data import RunData  # noqa: E402
from cclab.schema import MODULE_EVENTS  # noqa: E402

PARAMS_DIR = Path("/sys/module")


# ---------------------------------------------------------------- module parameters

def read_params(wanted: dict) -> dict:
    """The current value of each parameter named in {module: {param: value}} (as text)."""
    out = {}
    for mod, ps in (wanted or {}).items():
        out[mod] = {}
        for p in ps:
            f = PARAMS_DIR / mod / "parameters" / p
            out[mod][p] = f.read_text().strip() if f.is_file() else None
    return out


def _as_text(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _same(asked, got) -> bool:
    a, g = _as_text(asked), (got or "")
    return a == g or {a, g} <= {"1", "Y", "y"} or {a, g} <= {"0", "N", "n"}


def set_params(wanted: dict) -> dict:
    """Write every parameter; returns the values before, for restore_params."""
    before = read_params(wanted)
    for mod, ps in (wanted or {}).items():
        for p, v in ps.items():
            f = PARAMS_DIR / mod / "parameters" / p
            if not f.is_file():
                raise RuntimeError(f"{mod}.{p}: no {f} (is the module loaded?)")
            f.write_text(_as_text(v))
    now = read_params(wanted)
    for mod, ps in (wanted or {}).items():
        for p, v in ps.items():
            if not _same(v, now[mod][p]):
                raise RuntimeError(f"{mod}.{p}: asked {v}, the kernel has {now[mod][p]}")
    return before


def restore_params(before: dict) -> None:
    for mod, ps in (before or {}).items():
        for p, v in ps.items():
            if v is not None:
                try:
                    (PARAMS_DIR / mod / "parameters" / p).write_text(v)
                except OSError:
                    pass


# ---------------------------------------------------------------- running

def load_experiment(path: Path, link: dict | None = None):
    """(Experiment, the file's [lab] table), on the student's link when given: labkit's."""
    return labkit.load_experiment(Path(path), None, link)


def _modprobe(mods) -> None:
    import subprocess
    for m in mods:
        if not (PARAMS_DIR / m).is_dir() and os.geteuid() == 0:
            subprocess.run(["modprobe", m], capture_output=True)


class ModuleParams(labkit.LabHooks):
    """labkit.run_lab's hooks for labs 3 and 4: each experiment file's [lab] table may set the
    kit's modules' parameters ({module: {param: value}}); they are set before the experiment,
    checked, and put back after it, and each run's manifest says which values it had."""

    takes_ccas = False

    def begin(self) -> None:
        _modprobe(["tcp_spline", "tcp_search"])

    def describe(self, extra: dict) -> str:
        params = extra.get("module_params") or {}
        return f", parameters {params}" if params else ""

    @contextmanager
    def around(self, exp, extra: dict):
        params = extra.get("module_params") or {}
        _modprobe(params)
        before = set_params(params)
        try:
            yield read_params(params)
        finally:
            restore_params(before)

    def after(self, run_dir: Path, extra: dict, held) -> None:
        from cclab import results
        results.write_beside(run_dir, "module_params", held)
        super().after(run_dir, extra, held)


def run(lab: str, run_mode: str | None = None, root=None, progress=print,
        who: dict | None = None) -> Path:
    """Run (or load) every experiment of lab 3 or 4: labkit.run_lab with ModuleParams."""
    return labkit.run_lab(lab, run_mode, root, progress=progress, who=who, hooks=ModuleParams())


# ---------------------------------------------------------------- checks of a real run

def verify(lab: str, root=None) -> list[str]:
    """labkit.verify, plus: every run asked for the modules' tracepoints got its table, and the
    module parameters the file asked for are the ones the kernel had during the run."""
    bad = labkit.verify(lab, root)
    for d in labkit.run_dirs(lab, root):
        if not (d / "manifest.json").is_file():
            continue
        m = labkit.read_manifest(d)
        rel = d.name
        spec = m.get("spec") or {}
        for ev in (spec.get("measure") or {}).get("events") or []:
            table = MODULE_EVENTS.get(ev)
            if table and not (d / f"{table}.csv").is_file():
                bad.append(f"{rel}: {ev} asked for but {table}.csv is missing")
        bad += [f"{rel}: {b}" for b in _loss_check(d, m)]
        asked = (spec.get("lab") or {}).get("module_params") or {}
        got = m.get("module_params") or {}
        for mod, ps in asked.items():
            for p, v in ps.items():
                if not _same(v, (got.get(mod) or {}).get(p)):
                    bad.append(f"{rel}: {mod}.{p} asked {v}, the run had {(got.get(mod) or {}).get(p)}")
    return bad


def netem_loss_rate(p: float, rho: float = 0.0) -> float:
    """The share of packets netem drops for `loss P RHO` (both 0-1).  With a correlation netem
    draws each number as (1 - RHO) x a fresh uniform one + RHO x the last draw; a sum like that
    is no longer uniform, so fewer draws than P fall below P: about (P - RHO/2) / (1 - RHO)
    for RHO <= P <= 1 - RHO (the last draw taken as uniform).  "20% 5%" drops about 18.4 %."""
    if rho <= 0 or not rho <= p <= 1 - rho:
        return p
    return (p - rho / 2) / (1 - rho)


def _loss_check(d: Path, m: dict) -> list[str]:
    """Each direction given random loss had it: the share of packets its netem dropped is at
    least the share netem drops for the asked loss (netem_loss_rate), less four binomial
    standard deviations and half a point for that estimate (a full buffer adds drops of its
    own, so there is no upper bound).  An ACK direction never fills its buffer, so there the
    share must also be at most that rate plus the same margin."""
    prof = m.get("profile") or {}
    asked = {k: netem_loss_rate(float((prof.get(k) or {}).get("loss") or 0) / 100,
                                float((prof.get(k) or {}).get("loss_correlation") or 0) / 100)
             for k in ("down", "up")}
    if not any(asked.values()):
        return []
    q = labkit._csv(d, "qdisc")
    data_dirs = {f.get("direction") or "down" for f in (m.get("spec") or {}).get("flow") or []}
    bad = []
    for direction, p in asked.items():
        if not p:
            continue
        rows = q[(q["direction"] == direction) & (q["kind"] == "netem")] if len(q) else q
        if not len(rows):
            bad.append(f"{direction} direction: {p:.0%} loss asked, but qdisc.csv has no netem counters")
            continue
        last = rows.sort_values("t").groupby(["node", "dev"]).last()
        drops, sent = float(last["drops"].sum()), float(last["packets"].sum())
        n = drops + sent
        seen = drops / n if n else 0.0
        margin = 4 * math.sqrt(p * (1 - p) / n) + 0.005 if n else 1.0
        ack_only = bool(data_dirs) and direction not in data_dirs
        if seen < p - margin or (ack_only and seen > p + margin):
            bad.append(f"{direction} direction: netem dropped {seen:.1%} of {n:.0f} packets, "
                       f"{p:.1%} expected")
    return bad


# ---------------------------------------------------------------- loading

def runs(lab: str, root=None) -> list[RunData]:
    return [RunData(d) for d in labkit.run_dirs(lab, root) if (d / "manifest.json").is_file()]


def _params(run: RunData) -> dict:
    return run.manifest.get("module_params") or {}


def variant(run: RunData, cca: str) -> str:
    """The algorithm as lab 4 compares it: cubic-hystart / cubic-nohystart, search (defaults)
    or search-t<THRESH per mille>-w<WINDOW_FACTOR in tenths> when changed, bbr, ..."""
    p = _params(run)
    if cca == "cubic":
        h = (p.get("tcp_cubic") or {}).get("hystart")
        if h is None:
            return "cubic"
        return "cubic-hystart" if _same(1, h) else "cubic-nohystart"
    if cca == "search":
        s = p.get("tcp_search") or {}
        th, wf = s.get("thresh"), s.get("window_factor")
        if held(run):
            n = str(s.get("stall_bins") or "0")
            return "search-stall-noreset" if n == "0" else f"search-stall-reset{n}"
        if th in (None, "350") and wf in (None, "35"):
            return "search"
        return f"search-t{th}-w{wf}"
    return cca


def held(run: RunData) -> list:
    """The run's [[hold]] tables as its manifest recorded them (empty: none)."""
    return list(((run.manifest.get("spec") or {}).get("hold")) or [])


def profile_name(run: RunData) -> str:
    return str(run.profile.get("name") or Path(str((run.manifest.get("spec") or {}).get("profile", "?"))).stem)


def loss_of(run: RunData) -> float:
    return float(run.direction("down").get("loss") or 0.0)


def flows(lab: str, root=None, loaded: list[RunData] | None = None) -> pd.DataFrame:
    """cclab.analysis.metrics.flow_metrics of every run, with profile, loss (data direction, %),
    variant, goodput in Mbit/s, bdp in packets and the flow's start.  `loaded`: the lab's runs,
    when the caller has read them already (runs(lab, root))."""
    frames = []
    for r in (runs(lab, root) if loaded is None else loaded):
        fm = metrics.flow_metrics(r)
        if not len(fm):
            continue
        fm = fm.copy()
        fm["profile"] = profile_name(r)
        fm["loss"] = loss_of(r)
        fm["variant"] = [variant(r, c) for c in fm["cca"]]
        fm["goodput_mbps"] = fm["goodput_bps"] / 1e6
        frames.append(fm)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def ci_table(df: pd.DataFrame, by, value: str, confidence: float = 0.95) -> pd.DataFrame:
    """Mean and t-interval of `value` per group (cclab.analysis.metrics.summarise), indexed by
    the group: columns n, mean, ci_low, ci_high."""
    s = metrics.summarise(df, by, [value], confidence)
    by = [by] if isinstance(by, str) else list(by)
    return s.set_index(by)[["n", "mean", "ci_low", "ci_high"]]


# ---------------------------------------------------------------- lab 3: Spline against BBR

def _loss_sweep(f: pd.DataFrame) -> pd.DataFrame:
    return f[f["experiment"].str.startswith("lab3-loss")].reset_index(drop=True) if len(f) else f


def _ack_loss(f: pd.DataFrame) -> pd.DataFrame:
    return f[f["experiment"] == ACK_LOSS_EXPERIMENT].reset_index(drop=True) if len(f) else f


def lab3_loss_flows(root=None) -> pd.DataFrame:
    return _loss_sweep(flows("lab3", root))


ACK_LOSS_EXPERIMENT = "lab3-ack-loss-20"


def lab3_ack_flows(root=None) -> pd.DataFrame:
    """The seed's own loss test: the connections of lab3-ack-loss-20 (20 % of the ACKs lost,
    5 % correlated, no data lost)."""
    return _ack_loss(flows("lab3", root))


def lab3_where_lost(root=None) -> pd.DataFrame:
    """Goodput (Mbit/s) with 20 % loss on the ACKs (the seed's setup) and on the data, per
    (lost, cca): mean and 95 % t-interval over the connections."""
    f = flows("lab3", root)                 # every lab 3 run read once
    acks, data = _ack_loss(f), _loss_sweep(f)
    parts = [acks.assign(lost="ACKs")] if len(acks) else []
    if len(data):
        parts.append(data[data["loss"] == 20.0].assign(lost="data"))
    if not parts:
        return pd.DataFrame(columns=["n", "mean", "ci_low", "ci_high"])
    return ci_table(pd.concat(parts, ignore_index=True), ["lost", "cca"], "goodput_mbps")


def lab3_goodput(root=None) -> pd.DataFrame:
    """Goodput (Mbit/s) per (loss %, cca): mean and 95 % t-interval over the flows."""
    return ci_table(lab3_loss_flows(root), ["loss", "cca"], "goodput_mbps")


def lab3_retrans(root=None) -> pd.DataFrame:
    """Retransmitted segments per segment sent, per (loss %, cca): mean and 95 % interval."""
    return ci_table(lab3_loss_flows(root), ["loss", "cca"], "retrans_rate")


def lab3_modes(root=None) -> pd.DataFrame:
    """Spline's mode in each ss sample of the loss sweep: t, flow, run, loss, mode."""
    out = []
    for r in runs("lab3", root):
        if not r.experiment.startswith("lab3-loss"):
            continue
        mi = events.module_info(r, "spline")
        if not len(mi):
            continue
        d = pd.DataFrame({"t": mi["t"], "flow": mi["flow"],
                          "mode": mi["pacing_gain"].round().astype(int).map(events.SPLINE_MODES),
                          "fairness": mi["cwnd_gain"]})
        d["run"], d["loss"] = r.label, loss_of(r)
        out.append(d.dropna(subset=["mode"]))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["t", "flow", "mode", "fairness", "run", "loss"])


def lab3_mode_share(root=None) -> pd.DataFrame:
    """Fraction of Spline's ss samples in each mode, per loss % (rows) and mode (columns)."""
    m = lab3_modes(root)
    if not len(m):
        return pd.DataFrame()
    return m.groupby("loss")["mode"].value_counts(normalize=True).unstack(fill_value=0.0)


def lab3_mode_changes(root=None) -> pd.DataFrame:
    """spline:spline_mode events of the loss sweep: run, loss, flow, t, old, new, cwnd, fairness."""
    out = []
    for r in runs("lab3", root):
        if not r.experiment.startswith("lab3-loss"):
            continue
        ev = r.table("spline")
        if len(ev):
            ev = ev.copy()
            ev["run"], ev["loss"] = r.label, loss_of(r)
            out.append(ev)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _pairs_of(fl: pd.DataFrame):
    """(spline flow, competitor flow) for each pair of flows that start together."""
    out = []
    for start, g in fl.groupby("start"):
        sp = g[g["cca"] == "spline"]["flow"].tolist()
        ot = g[g["cca"] != "spline"]["flow"].tolist()
        if sp and ot:
            out.append((sp[0], ot[0]))
    return out


def lab3_fairness_rat(root=None) -> pd.DataFrame:
    """Spline's fairness_rat (ss's cwnd_gain) while it shares the link: median per competitor."""
    rows = []
    for r in runs("lab3", root):
        if r.experiment != "lab3-share":
            continue
        fl = metrics.flow_info(r)
        mi = events.module_info(r, "spline")
        for a, b in _pairs_of(fl):
            v = mi[mi["flow"] == a]["cwnd_gain"]
            rows.append({"run": r.label, "competitor": fl.loc[b, "cca"],
                         "fairness_median": float(v.median()) if len(v) else math.nan,
                         "fairness_min": float(v.min()) if len(v) else math.nan,
                         "below3_frac": float((v < 3).mean()) if len(v) else math.nan})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- lab 4: SEARCH slow start

def _bbr_startup(r: RunData, flow) -> tuple[float, float]:
    """(seconds, cwnd) at the end of a BBR flow's Startup: from its first ss sample in Startup
    (pacing gain 2.89; before the handshake completes the block reads 0) to the first later
    sample with a pacing gain between 0 and 2 (Drain paces at 0.35, ProbeBW at 0.75-1.25)."""
    mi = events.module_info(r, "bbr")
    mi = mi[mi["flow"] == flow].sort_values("t")
    up = mi[mi["pacing_gain"] > 2]
    if not len(up):
        return math.nan, math.nan
    t0 = float(up["t"].iloc[0])
    after = mi[(mi["t"] > t0) & (mi["pacing_gain"] > 0) & (mi["pacing_gain"] < 2)]
    if not len(after):
        return math.nan, math.nan
    t1 = float(after["t"].iloc[0])
    ss = r.table("ss")
    c = pd.to_numeric(ss.loc[after.index[0], "cwnd"], errors="coerce") if after.index[0] in ss.index else math.nan
    return t1 - t0, float(c)


def lab4_exits(root=None) -> pd.DataFrame:
    """One row per flow of lab 4: profile, variant, flow, run, t_exit (s after the flow's first
    cwnd sample: first finite ssthresh; BBR: the length of its Startup), cwnd_exit (packets), bdp
    (packets), exit_bdp (cwnd_exit / bdp), retransmits, reason (search:search_exit's, for SEARCH),
    norm_diff_exit."""
    rows = []
    for r in runs("lab4", root):
        fm = metrics.flow_metrics(r)
        ex = r.table("search")
        for _, f in fm.iterrows():
            fl = f["flow"]
            row = {"profile": profile_name(r), "experiment": r.experiment, "run": r.label,
                   "flow": fl, "cca": f["cca"], "variant": variant(r, f["cca"]),
                   "bdp": f["bdp_packets"], "retransmits": f["retransmits"],
                   "goodput_mbps": f["goodput_bps"] / 1e6, "reason": None,
                   "norm_diff_exit": math.nan}
            if f["cca"] == "bbr":
                row["t_exit"], row["cwnd_exit"] = _bbr_startup(r, fl)
                row["reason"] = "startup"
            else:
                row["t_exit"], row["cwnd_exit"] = f["ss_exit_s"], f["ss_exit_cwnd"]
                if f["cca"] == "search" and len(ex):
                    e = ex[ex["flow"] == fl].sort_values("t")
                    if len(e):
                        row["reason"] = str(e["reason"].iloc[0])
                        row["norm_diff_exit"] = float(e["norm_diff"].iloc[0]) / 1000.0
            row["exit_bdp"] = row["cwnd_exit"] / row["bdp"] if row["bdp"] else math.nan
            rows.append(row)
    return pd.DataFrame(rows)


def lab4_stall(root=None) -> pd.DataFrame:
    """One row per SEARCH download of lab 4 that met an ACK stall (a [[hold]] of the ACK path):
    variant, run, flow, stall_bins, hold_start (s after the download's first cwnd sample, when
    the plug was applied), hold_s (how long the ACKs were held), cwnd_at_hold (packets: the last
    tcp_probe/ss sample before the hold), t_exit, cwnd_exit, bdp, exit_bdp, reason
    (search:search_exit's), exit_after_hold (whether slow start was still on when the hold
    began)."""
    exits = lab4_exits(root)
    rows = []
    for r in runs("lab4", root):
        if not held(r):
            continue
        steps = r.table("holds")
        blocks = steps[steps["action"] == "block"] if len(steps) else steps
        releases = steps[steps["action"] == "release_indefinite"] if len(steps) else steps
        if not len(blocks) or not len(releases):
            continue
        t_block = float(blocks["t_applied"].iloc[0])
        t_release = float(releases[releases["t_applied"] >= t_block]["t_applied"].iloc[0])
        cw = metrics.cwnd_series(r)
        for _, e in exits[(exits["run"] == r.label) & (exits["cca"] == "search")].iterrows():
            c = cw[cw["flow"] == e["flow"]].sort_values("t")
            if not len(c):
                continue
            c = c[c["port"] == c["port"].iloc[0]]          # the download's data connection
            t0 = float(c["t"].iloc[0])
            before = c[c["t"] <= t_block]
            rows.append({
                "variant": e["variant"], "run": r.label, "flow": e["flow"],
                "stall_bins": int(((_params(r).get("tcp_search") or {}).get("stall_bins")) or 0),
                "hold_start": t_block - t0, "hold_s": t_release - t_block,
                "cwnd_at_hold": float(before["cwnd"].iloc[-1]) if len(before) else math.nan,
                "t_exit": e["t_exit"], "cwnd_exit": e["cwnd_exit"], "bdp": e["bdp"],
                "exit_bdp": e["exit_bdp"], "reason": e["reason"],
                "exit_after_hold": bool(not (e["t_exit"] < t_block - t0))})
    return pd.DataFrame(rows)


def lab4_norm_diff(root=None, profile="geo") -> pd.DataFrame:
    """SEARCH's norm_diff over time (ss samples, cclab.analysis.events.search_norm_diff) of the
    search flows on `profile`: run, variant, flow, t (s since the flow's first sample), norm_diff."""
    out = []
    for r in runs("lab4", root):
        if profile_name(r) != profile:
            continue
        nd = events.search_norm_diff(r)
        if not len(nd):
            continue
        ss = r.table("ss")
        first = ss.groupby("flow")["t"].min()
        nd = nd.copy()
        nd["t"] = nd["t"] - nd["flow"].map(first)
        nd["run"], nd["variant"] = r.label, variant(r, "search")
        out.append(nd)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def lab4_download(sizes_by_profile: dict, root=None) -> pd.DataFrame:
    """Download time (s from the flow's first ACK) against size for every flow
    (cclab.analysis.metrics.download_curves): profile, variant, run, flow, size, time."""
    out = []
    for r in runs("lab4", root):
        prof = profile_name(r)
        sizes = sizes_by_profile.get(prof)
        if sizes is None:
            continue
        d = metrics.download_curves([r], sizes)
        if not len(d):
            continue
        d["profile"] = prof
        d["variant"] = [variant(r, c) for c in d["cca"]]
        out.append(d)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def lab3_share_samples(root=None) -> pd.DataFrame:
    """Per iperf3 interval while Spline and its competitor both ran (lab3-share): run,
    competitor, t, spline_mbps, other_mbps."""
    rows = []
    for r in runs("lab3", root):
        if r.experiment != "lab3-share":
            continue
        fl = metrics.flow_info(r)
        tput = metrics.throughput_series(r)
        for a, b in _pairs_of(fl):
            tp = tput[tput["flow"].isin([a, b])]
            lo, hi = metrics.overlap_window(None, tp)
            w = tp[(tp["t_start"] >= lo - 1e-6) & (tp["t_end"] <= hi + 1e-6)]
            # the two flows' intervals end a few ms apart (their iperf3 clients start one after
            # the other): pair each Spline interval with the competitor's nearest one
            x = w[w["flow"] == a][["t", "bps"]].sort_values("t")
            y = w[w["flow"] == b][["t", "bps"]].sort_values("t")
            if not len(x) or not len(y):
                continue
            step = float(np.median(np.diff(x["t"]))) if len(x) > 1 else 1.0
            m = pd.merge_asof(x, y, on="t", direction="nearest", tolerance=step / 2,
                              suffixes=("_s", "_o")).dropna()
            for row in m.itertuples():
                rows.append({"run": r.label, "competitor": fl.loc[b, "cca"], "t": row.t,
                             "spline_mbps": row.bps_s / 1e6, "other_mbps": row.bps_o / 1e6})
    return pd.DataFrame(rows, columns=["run", "competitor", "t", "spline_mbps", "other_mbps"])


# ---------------------------------------------------------------- lab 3: Spline taken apart

ABLATION_PREFIX = "lab3-ablate-"
MODEL = "none (the model)"
ABLATION_SCENARIOS = {"loss": "20 % data loss, alone", "share": "sharing with Cubic"}


def _change(run: RunData) -> str:
    """The Spline switches a run changed, as "param=value" (MODEL when none)."""
    ps = _params(run).get("tcp_spline") or {}
    return " ".join(f"{k}={v}" for k, v in sorted(ps.items())) or MODEL


def lab3_ablation_flows(root=None) -> pd.DataFrame:
    """One row per Spline observation of the ablation and of its baselines: scenario ("loss":
    Spline alone on lab3-loss-20's link; "share": Spline with Cubic on lab3-share's), change
    (the switches set, or MODEL), run, flow and value -- Spline's goodput in Mbit/s for "loss",
    Spline's fraction of the pair's goodput for "share"."""
    rows = []
    loaded = runs("lab3", root)
    f = flows("lab3", root, loaded)
    if not len(f):
        return pd.DataFrame(columns=["scenario", "change", "run", "flow", "value"])
    by_run = {r.label: r for r in loaded}
    for run_label, g in f.groupby("run"):
        r = by_run.get(run_label)
        if r is None:
            continue
        exp = r.experiment
        if exp == "lab3-loss-20" or exp.startswith(ABLATION_PREFIX + "loss-"):
            for row in g[g["cca"] == "spline"].itertuples():
                rows.append({"scenario": "loss", "change": _change(r), "run": run_label,
                             "flow": row.flow, "value": row.goodput_mbps})
        elif exp == "lab3-share" or exp.startswith(ABLATION_PREFIX + "share-"):
            fl = metrics.flow_info(r)
            gp = g.set_index("flow")["goodput_mbps"]
            for a, b in _pairs_of(fl):
                if fl.loc[b, "cca"] != "cubic" or a not in gp.index or b not in gp.index:
                    continue
                tot = float(gp[a] + gp[b])
                rows.append({"scenario": "share", "change": _change(r), "run": run_label,
                             "flow": a, "value": float(gp[a]) / tot if tot > 0 else math.nan})
    return pd.DataFrame(rows, columns=["scenario", "change", "run", "flow", "value"])


def lab3_ablation(root=None) -> pd.DataFrame:
    """Per (scenario, change): n, mean, ci_low, ci_high of lab3_ablation_flows' value, and
    gain: the mean over the model's mean in the same scenario."""
    f = lab3_ablation_flows(root)
    if not len(f):
        return pd.DataFrame(columns=["n", "mean", "ci_low", "ci_high", "gain"])
    t = ci_table(f, ["scenario", "change"], "value")
    base = {sc: t.loc[(sc, MODEL), "mean"] for sc in ABLATION_SCENARIOS if (sc, MODEL) in t.index}
    t["gain"] = [m / base[sc] if base.get(sc) else math.nan
                 for (sc, _), m in zip(t.index, t["mean"])]
    return t


def lab3_ablation_cause(root=None, table: pd.DataFrame | None = None) -> dict:
    """The change (one ablation file's switches) that raises each scenario's mean the most:
    {scenario: change}.  `table`: lab3_ablation(root), when the caller has it already."""
    t = lab3_ablation(root) if table is None else table
    out = {}
    for sc in ABLATION_SCENARIOS:
        if sc not in t.index.get_level_values(0):
            continue
        g = t.loc[sc].drop(index=MODEL, errors="ignore")
        if len(g) and g["mean"].notna().any():
            out[sc] = str(g["mean"].idxmax())
    return out


# ---------------------------------------------------------------- the seed's claims

def compare(a, b, confidence: float = 0.95) -> str:
    """"higher" if the t-interval of mean(a) lies wholly above that of mean(b), "lower" if wholly
    below, else "inconclusive" (also with fewer than two finite observations on a side)."""
    x, y = stats.mean_ci(list(a), confidence), stats.mean_ci(list(b), confidence)
    if x["n"] < 2 or y["n"] < 2:
        return "inconclusive"
    return stats.order((x["ci_low"], x["ci_high"]), (y["ci_low"], y["ci_high"]))


# claim -> (what the seed reports for Spline against the other, the seed's figures)
LAB3_CLAIMS = {
    "goodput_0": ("higher", "19.6 vs 16.0 MB/s (3 GB file), 19.8 vs 17.1 MB/s (6 GB file), Wi-Fi, no added loss"),
    "goodput_20_acks": ("higher", "13.2 vs 11.3 MB/s with \"netem loss 20% 5%\" on the receiver's egress (ACKs lost)"),
    "goodput_20": ("higher", "the same 20 % on the data path: the seed has no figure (its loss hit only ACKs)"),
    "retrans_0": ("lower", "12.6 vs 13.6 % and 1.1 vs 1.5 % retransmissions"),
    "goodput_vs_cubic": ("lower", "fairness_rat below 3 makes Spline yield to competitors (no figure)"),
    "goodput_vs_bbr": ("lower", "fairness_rat below 3 makes Spline yield to competitors (no figure)"),
}


def lab3_claims(root=None, compare_fn=None) -> pd.DataFrame:
    """One row per claim: seed (direction the seed reports), seed_figures, measured (compare() of
    Spline's observations against the other algorithm's), verdict: holds / contradicted /
    inconclusive, n_spline, n_other."""
    cmp_ = compare_fn or compare
    lf = lab3_loss_flows(root)
    sh = lab3_share_samples(root)
    obs = {}
    for loss, key in ((0.0, "goodput_0"), (20.0, "goodput_20")):
        g = lf[lf["loss"] == loss] if len(lf) else lf
        obs[key] = (g[g["cca"] == "spline"]["goodput_mbps"] if len(g) else [],
                    g[g["cca"] == "bbr"]["goodput_mbps"] if len(g) else [])
    af = lab3_ack_flows(root)
    obs["goodput_20_acks"] = (af[af["cca"] == "spline"]["goodput_mbps"] if len(af) else [],
                              af[af["cca"] == "bbr"]["goodput_mbps"] if len(af) else [])
    g = lf[lf["loss"] == 0.0] if len(lf) else lf
    obs["retrans_0"] = (g[g["cca"] == "spline"]["retrans_rate"] if len(g) else [],
                        g[g["cca"] == "bbr"]["retrans_rate"] if len(g) else [])
    for comp in ("cubic", "bbr"):
        s = sh[sh["competitor"] == comp]
        obs[f"goodput_vs_{comp}"] = (s["spline_mbps"], s["other_mbps"])
    rows = []
    for claim, (seed, figures) in LAB3_CLAIMS.items():
        a, b = obs[claim]
        m = cmp_(list(a), list(b))
        rows.append({"claim": claim, "seed": seed, "seed_figures": figures, "measured": m,
                     "verdict": "inconclusive" if m == "inconclusive" else
                     ("holds" if m == seed else "contradicted"),
                     "spline_mean": float(np.mean(a)) if len(a) else math.nan,
                     "other_mean": float(np.mean(b)) if len(b) else math.nan,
                     "n_spline": len(a), "n_other": len(b)})
    return pd.DataFrame(rows).set_index("claim")


# ---------------------------------------------------------------- fresh copies for the tests

def load_fresh():
    """labkit and this module loaded again from their files, so a notebook that redefined one of
    their functions does not change what a test checks."""
    import importlib.util

    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    here = Path(__file__).resolve().parent
    lk_path = next(p for p in (Path("labkit.py"), here / "labkit.py", Path(labkit.HERE) / "labkit.py")
                   if p.is_file())
    km_path = next(p for p in (Path("kmodlab.py"), here / "kmodlab.py") if p.is_file())
    saved = sys.modules.get("labkit")
    sys.modules["labkit"] = load("labkit", lk_path)
    try:
        return load("kmodlab_check", km_path)
    finally:
        if saved is not None:
            sys.modules["labkit"] = saved

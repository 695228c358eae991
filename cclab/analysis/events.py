"""The kit's modules' events as DataFrames: SEARCH's norm_diff and exits, Spline's modes.

Two sources, both optional:
  * ss's module_info column: both modules fill the BBR info block, which `ss -ti` prints as
    bbr:(bw:..,mrtt:..,pacing_gain:X,cwnd_gain:Y).  SEARCH: X = norm_diff (fraction; absent
    when 0), Y = state (0 not in slow start, 1 measuring, 2 left by SEARCH, 3 by HyStart, 4 by
    loss).  Spline: X = mode (1 START_PROBE, 2 PROBE_BW, 3 PROBE_RTT, 4 DRAIN_PROBE), Y = fairness.
  * the tracepoints, as the tables the runner wrote in the run folder (columns in
    data.EXTRA_TABLES; the engine's decoder is cclab.measure.parse_module_events):
      search:search_exit  sport dport reason cwnd norm_diff (per mille) elapsed_us bin_us
      spline:spline_mode  sport dport old new cwnd bw min_rtt_us fairness

The plots take the frames these functions return:
  norm_diff frame: t, flow, norm_diff (fraction), [state]     exits frame: t, flow, norm_diff, reason
  modes frame:     t, flow, mode (name)
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .data import RunData

SPLINE_MODES = {1: "START_PROBE", 2: "PROBE_BW", 3: "PROBE_RTT", 4: "DRAIN_PROBE"}
SEARCH_THRESH = 0.35

_BBR = re.compile(r"bbr:\(([^)]*)\)")
_RATE = {"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}


def parse_bbr_info(text) -> dict:
    """bbr:(bw:1.5Mbps,mrtt:20.1,pacing_gain:0.35,cwnd_gain:1) -> {bw_bps, mrtt_ms,
    pacing_gain, cwnd_gain}; gains ss leaves out (because they are 0) are 0."""
    out = {"bw_bps": np.nan, "mrtt_ms": np.nan, "pacing_gain": 0.0, "cwnd_gain": 0.0}
    if not isinstance(text, str):
        return {k: np.nan for k in out}
    m = _BBR.search(text)
    if not m:
        return {k: np.nan for k in out}
    for part in m.group(1).split(","):
        if ":" not in part:
            continue
        k, v = part.split(":", 1)
        if k == "bw":
            r = re.fullmatch(r"([\d.]+)([KMG]?bps)", v)
            out["bw_bps"] = float(r.group(1)) * _RATE[r.group(2).lower()] if r else np.nan
        elif k in ("mrtt", "pacing_gain", "cwnd_gain"):
            try:
                out["mrtt_ms" if k == "mrtt" else k] = float(v)
            except ValueError:
                pass
    return out


def module_info(run: RunData, cca: str | None = None) -> pd.DataFrame:
    """ss samples with the parsed bbr:(...) block: t, flow, local_port, cca, bw_bps, mrtt_ms,
    pacing_gain, cwnd_gain."""
    ss = run.table("ss")
    if not len(ss) or "module_info" not in ss:
        return pd.DataFrame(columns=["t", "flow", "local_port", "cca", "bw_bps", "mrtt_ms",
                                     "pacing_gain", "cwnd_gain"])
    if cca is not None:
        ss = ss[ss["cca"] == cca]
    if not len(ss):
        return pd.DataFrame(columns=["t", "flow", "local_port", "cca", "bw_bps", "mrtt_ms",
                                     "pacing_gain", "cwnd_gain"])
    info = pd.DataFrame([parse_bbr_info(x) for x in ss["module_info"]], index=ss.index,
                        columns=["bw_bps", "mrtt_ms", "pacing_gain", "cwnd_gain"])
    out = pd.concat([ss[["t", "flow", "local_port", "cca"]], info], axis=1)
    return out.dropna(subset=["pacing_gain"])


def search_norm_diff(run: RunData) -> pd.DataFrame:
    """SEARCH's norm_diff over time from ss samples: t, flow, norm_diff, state."""
    mi = module_info(run, "search")
    return pd.DataFrame({"t": mi["t"], "flow": mi["flow"], "norm_diff": mi["pacing_gain"],
                         "state": mi["cwnd_gain"]}).reset_index(drop=True)


def search_thresh(run: RunData) -> float:
    """THRESH as the run's tcp_search had it (its module parameters, in per mille), else the
    module's default SEARCH_THRESH."""
    th = ((run.manifest.get("module_params") or {}).get("tcp_search") or {}).get("thresh")
    try:
        return int(th) / 1000 if th is not None else SEARCH_THRESH
    except (TypeError, ValueError):
        return SEARCH_THRESH


def search_exits(run: RunData) -> pd.DataFrame:
    """search:search_exit events (search.csv) with norm_diff as a fraction."""
    ev = run.table("search").copy()
    if len(ev):
        nd = pd.to_numeric(ev["norm_diff"], errors="coerce")
        ev["norm_diff"] = nd / 1000.0          # the tracepoint reports per mille
    return ev


def spline_modes(run: RunData) -> pd.DataFrame:
    """Spline's mode over time: t, flow, mode.  Mode changes from spline.csv (the tracepoint)
    if recorded, else ss samples."""
    ev = run.table("spline")
    if len(ev):
        return pd.DataFrame({"t": pd.to_numeric(ev["t"], errors="coerce"), "flow": ev["flow"],
                             "mode": ev["new"].astype(str)})
    mi = module_info(run, "spline")
    mode = mi["pacing_gain"].round().astype(int).map(SPLINE_MODES)
    return pd.DataFrame({"t": mi["t"], "flow": mi["flow"], "mode": mode}).dropna().reset_index(drop=True)

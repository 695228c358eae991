"""Analysis of cclab runs: metrics, plots, a fidelity verdict and a report per experiment.

    python -m cclab.analysis verdict RUN_DIR...        check each run, write its fidelity.json
    python -m cclab.analysis report  RUN_DIR... [-o OUT] [--html]
    python -m cclab.analysis metrics RUN_DIR...        the metrics tables as CSV on stdout

In a notebook:

    from cclab import analysis as A
    runs = A.load_runs("results/cubic-vs-bbr")
    A.plots.timeseries(runs)                # goodput per 0.5 s bin (window=...), cwnd, RTT per flow
    A.metrics.throughput_binned(runs[0], window=0.5)    # the binned goodput as a table
    A.metrics.summarise(A.metrics.per_cca(runs), "cca", ["goodput_bps", "rtt_p95_ms"])

Tables read (all `t` in s since the run start):
  the engine's (cclab/results.py TABLES): flows, iperf, ss, probe, qdisc, ping, changes;
  optional extras, used when present in the run folder:
    cpu.csv      t, cpu, busy_frac          CPU load ("all" and cpu0, cpu1, ...; 0..1); without
                                            it the CPU-headroom check reports "not measured".
                                            cclab.cpu.CpuSampler writes it.
    search.csv   t, flow, sport, dport, reason, cwnd, norm_diff (per mille, as the
                 search:search_exit tracepoint prints it), elapsed_us, bin_us
    spline.csv   t, flow, sport, dport, old, new (mode names), cwnd, bw, min_rtt_us, fairness
                 (spline:spline_mode)
  The modules' state is also read from ss's module_info column (bbr:(...) block): SEARCH puts
  norm_diff in pacing_gain and its state in cwnd_gain, Spline its mode and fairness ratio.
"""

import importlib

# Loaded on first use, not on import: pandas (which the tables need) costs a third of a second
# to import on the host, more in the guest.
_LAZY = {"RunData": "data", "load_runs": "data"}
_SUBMODULES = ("data", "events", "fidelity", "metrics", "plots", "report", "stats",
               "synthetic", "tshark")


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

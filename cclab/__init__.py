"""cclab: emulated links and measured TCP flows for congestion-control labs.

    profiles    link profiles (topologies/<name>.toml)
    spec        experiments: a profile, flows, measurements (TOML or Python)
    tc          the qdisc commands for a profile (pure)
    dynamics    time-varying links: the schedule of in-place changes (pure)
    traces      mahimahi-format cellular traces and a generator
    topo        the Mininet dumbbell and its configuration plan
    measure     measurement commands and their parsers
    measurements  one class per measurement (start, settle, stop, tables), as a run drives them
    ccas        the congestion controls a run needs: loaded and allowed, or a one-line refusal
    provenance  module hashes, tool versions, the kit's commit (what each manifest records)
    runner      one run from start to cleanup; sweeps with progress
    state       what a run created, and `clean`
    results     run folders, manifest, CSV tables, pandas loaders
    plot        a quick time-series figure of a run
    cli         the `cclab` command
"""

__version__ = "0.1.0"

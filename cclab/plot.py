"""A quick look at one run: throughput, cwnd and RTT over time, saved as a PNG.

The caption carries the provenance (experiment, profile, kernel, kit commit, status) so a
figure pasted into a report still says where it came from.
"""

from __future__ import annotations

from pathlib import Path

from . import results


def caption(manifest: dict) -> str:
    kit = manifest.get("kit") or {}
    commit = (kit.get("commit") or "no commit")[:10] + (" (modified)" if kit.get("dirty") else "")
    prof = manifest.get("profile", {}).get("name", "?")
    return (f"{manifest.get('experiment')} rep {manifest.get('repetition')} | profile {prof} | "
            f"seed {manifest.get('seed')} | kernel {manifest.get('kernel')} | kit {commit} | "
            f"{manifest.get('start')} | {manifest.get('status')}")


def plot(run_dir, out: Path | None = None) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    m = results.read_manifest(run_dir)
    iperf = results.load(run_dir, "iperf")
    ss = results.load(run_dir, "ss")
    ping = results.load(run_dir, "ping")
    flows = results.load(run_dir, "flows")
    label = {r.flow: f"flow {r.flow} ({r.cca}, {r.direction})" for r in flows.itertuples()}

    fig, ax = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    if len(iperf):
        per = iperf.groupby(["flow", "t_end"], as_index=False)["bits_per_second"].sum()
        for flow, g in per.groupby("flow"):
            ax[0].plot(g.t_end, g.bits_per_second / 1e6, label=label.get(flow, f"flow {flow}"))
    ax[0].set_ylabel("throughput (Mbit/s)")
    if len(ss):
        for (flow, port), g in ss.groupby(["flow", "local_port"]):
            ax[1].plot(g.t, g.cwnd, lw=0.8, label=f"{label.get(flow, flow)} :{port}")
            ax[2].plot(g.t, g.rtt_ms, lw=0.8, label=f"socket rtt, flow {flow} :{port}")
    ax[1].set_ylabel("cwnd (packets)")
    if len(ping):
        ax[2].plot(ping.t, ping.rtt_ms, ".", ms=3, color="k", label="ping")
    ax[2].set_ylabel("RTT (ms)")
    ax[2].set_xlabel("time since start (s)")
    for a in ax:
        if a.lines:
            a.legend(fontsize=7, loc="upper right")
        a.grid(alpha=0.3)
    fig.suptitle(f"{m.get('experiment')}, run {run_dir.name}")
    fig.text(0.01, 0.005, caption(m), fontsize=6.5, family="monospace")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    out = Path(out) if out else run_dir / "timeseries.png"
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(out)
    return out

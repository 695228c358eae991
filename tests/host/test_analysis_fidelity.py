"""The fidelity verdict on synthetic runs: trustworthy, and each way of being untrustworthy."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cclab import results
from cclab.analysis import data, fidelity, synthetic

KIT = Path(__file__).resolve().parents[2]
if str(KIT / "notebooks") not in sys.path:     # labkit, which reads manifests without the engine
    sys.path.insert(0, str(KIT / "notebooks"))


def verdict(tmp_path, **kw):
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic", "bbr"), **kw)
    return d, fidelity.verdict(d)


def by_name(v):
    return {c["name"]: c for c in v["checks"]}


def test_normal_run_is_trustworthy(tmp_path):
    _, v = verdict(tmp_path)
    assert v["ok"] is True, v["reasons"]
    assert not v["failed"] and not v["unknown"]
    names = set(by_name(v))
    assert {"rate_ceiling", "rate_backlogged", "link_limited", "idle_rtt", "cpu_headroom",
            "queue_within_buffer", "packet_spacing", "run_complete"} <= names
    for c in v["checks"]:
        assert set(c) >= {"name", "ok", "measured", "expected", "reason"}


@pytest.mark.parametrize("kw,failed", [
    ({"achieved": 0.7}, "rate_backlogged"),          # emulator cannot serve its queue
    ({"over": 1.3}, "rate_ceiling"),                 # limiter leaks
    ({"idle_rtt_extra_ms": 10.0}, "idle_rtt"),       # processing delay
    ({"cpu_busy": 0.99}, "cpu_headroom"),            # CPU hog
    ({"queue_pkts": 60}, "queue_within_buffer"),     # queue beyond the buffer
    ({"status": "incomplete"}, "run_complete"),
])
def test_untrustworthy_runs_fail_with_the_right_reason(tmp_path, kw, failed):
    _, v = verdict(tmp_path, **kw)
    assert v["ok"] is False
    assert failed in v["failed"]
    assert any(r.startswith(failed) for r in v["reasons"])


def test_cpu_not_measured_is_unknown_not_ok(tmp_path):
    _, v = verdict(tmp_path, cpu_busy=None)
    c = by_name(v)["cpu_headroom"]
    assert c["ok"] is None and "not measured" in c["reason"] and "cpu.csv" in c["reason"]
    assert "cpu_headroom" in v["unknown"]
    assert v["ok"] is True          # other checks decide


def test_no_rate_evidence_is_not_ok(tmp_path):
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",))
    for t in ("qdisc", "iperf"):
        (d / f"{t}.csv").unlink()
    v = fidelity.verdict(d)
    assert v["ok"] is False and "no rate check" in v["reasons"][-1]


def test_write_verdict_beside_the_manifest_atomically(tmp_path):
    d, _ = verdict(tmp_path, achieved=0.7)
    before = (d / "manifest.json").read_bytes()
    v = fidelity.write_verdict(d)
    assert (d / "manifest.json").read_bytes() == before     # the runner's file, untouched
    on_disk = json.loads((d / "fidelity.json").read_text())
    assert on_disk["ok"] is False and on_disk["checks"] == json.loads(json.dumps(v["checks"]))
    m = results.read_manifest(d)                            # readers find it under "fidelity"
    assert m["beside"]["fidelity"] == "fidelity.json" and m["fidelity"] == on_disk
    assert not [p for p in d.iterdir() if p.name.startswith(".")]   # no temporary file left
    assert data.RunData(d).trusted is False


def test_manifest_readers_take_beside_files_and_old_inline_keys(tmp_path):
    """A run made before the verdict had its own file keeps it inside the manifest; labkit (no
    engine) and cclab.results read both layouts alike, and follow no "beside" name out of the
    run folder."""
    import labkit
    d = synthetic.make_run(tmp_path / "new", ccas=("cubic",))
    fidelity.write_verdict(d)
    old = tmp_path / "old"
    old.mkdir()
    m = json.loads((d / "manifest.json").read_text())
    m.pop("beside")
    m["fidelity"] = json.loads((d / "fidelity.json").read_text())
    (old / "manifest.json").write_text(json.dumps(m))
    for run in (d, old):
        assert results.read_manifest(run)["fidelity"] == labkit.read_manifest(run)["fidelity"]
        assert results.read_manifest(run)["fidelity"]["ok"] == fidelity.verdict(d)["ok"]
    (tmp_path / "elsewhere.json").write_text(json.dumps({"ok": True}))
    m = json.loads((d / "manifest.json").read_text())
    for name in ("../elsewhere.json", "/etc/hostname", "manifest.json", 7):
        m["beside"] = {"fidelity": name}
        (d / "manifest.json").write_text(json.dumps(m))
        for read in (results.read_manifest, labkit.read_manifest):
            assert "fidelity" not in read(d), name


def _htb_over_netem(rate, delay, arrivals, until, step=0.001, sample=0.1):
    """Root-qdisc samples of htb (the rate) over netem (the delay), packet by packet: netem
    releases a packet `delay` s after it arrived, htb then sends it when it has a token.
    `arrivals(t0, t1)` gives the packets that arrive in [t0, t1)."""
    pps = rate / (8 * 1514)
    line, tokens, sent, rows, owed = [], 0.0, 0, [], 0.0
    for k in range(int(round(until / step))):
        t = k * step
        owed += arrivals(t, t + step)
        while owed >= 1:
            line.append(t)
            owed -= 1
        tokens = min(tokens + pps * step, 2.0)
        while line and line[0] + delay <= t and tokens >= 1:
            line.pop(0)
            tokens -= 1
            sent += 1
        if k % int(round(sample / step)) == 0:
            rows.append({"t": round(t, 6), "packets": sent, "bytes": sent * 1514,
                         "backlog_packets": len(line), "backlog_bytes": len(line) * 1514})
    return rows


def test_a_burst_after_an_idle_spell_is_in_the_delay_line_before_it_is_a_queue(tmp_path):
    # Lab 4's ACK stall on the GEO path: the sender hears nothing for 2.4 s and sends nothing,
    # then the released ACKs let it send a burst of ~300 packets at once.  For the first 300 ms
    # all of them are in netem's delay line and nothing leaves; that is not a queue the link
    # fails to serve (rate x delay counted none of them and judged such a run "39.8 % of
    # 10 Mbit/s while backlogged").
    rate, delay = 10e6, 0.300
    pps = rate / (8 * 1514)
    d = synthetic.make_run(tmp_path / "r", ccas=("search",), rate=rate, delay=delay,
                           duration=10.0)
    flows = results.load(d, "flows")

    def arrivals(t0, t1):              # at the link rate, silent 3.0-5.4 s, a burst, then 90 %
        if t1 <= 3.0:
            return pps * (t1 - t0)
        if t0 < 5.4 <= t1:
            return 300.0
        return 0.9 * pps * (t1 - t0) if t0 >= 5.4 else 0.0

    q = results.load(d, "qdisc")
    template = q[(q.kind == "htb")].iloc[0].to_dict()
    rows = [template | r for r in _htb_over_netem(rate, delay, arrivals, float(flows.t_end.max()))]
    results.write_table(d, "qdisc", rows)
    v = by_name(fidelity.verdict(d))["rate_backlogged"]
    assert v["ok"] is True, v["reason"]
    assert v["measured"] >= 0.97, v["reason"]
    # the queue the burst left (about 300 packets, drained at a tenth of the rate) is judged
    assert v["backlogged_s"] > 2.0, v["reason"]


def test_a_stream_of_small_datagrams_on_the_wire_is_not_a_queue(tmp_path):
    # A bulk run followed by a 2 Mbit/s probe of 242-byte frames (what the VM's test_wired
    # sends): netem's delay line then holds ~10 small packets, which are not a queue and must
    # not count as backlog served at 2 Mbit/s (that once judged normal VM runs untrustworthy:
    # "79.7 % of 50 Mbit/s while backlogged" against a goodput of 98 % of the link).
    rate, delay, frame, probe_bps = 10e6, 0.010, 242, 2e6
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",), rate=rate, delay=delay)
    flows = results.load(d, "flows")
    probe = flows.iloc[0].to_dict() | {"flow": 2, "protocol": "udp", "port": 5202, "start": 6.5,
                                       "duration": 2.0, "t_start": 6.5, "t_end": 8.5}
    results.write_table(d, "flows", flows.to_dict("records") + [probe])
    q = results.load(d, "qdisc")
    rows = q[q.t <= 6.0].to_dict("records")
    last = {k: int(q[q.t <= 6.0][k].iloc[-1]) for k in ("bytes", "packets")}
    in_flight = probe_bps * delay / (8 * frame)
    for t in np.arange(6.1, 9.0, 0.1):
        sent = probe_bps / 8 * min(max(t - 6.5, 0.0), 2.0)
        on_wire = 6.5 <= t <= 8.5
        for r in rows[-2:]:
            rows.append(r | {"t": round(float(t), 6), "bytes": last["bytes"] + int(sent),
                             "packets": last["packets"] + int(sent / frame),
                             "backlog_bytes": int(in_flight * frame) if on_wire else 0,
                             "backlog_packets": round(in_flight) if on_wire else 0})
    results.write_table(d, "qdisc", rows)
    v = by_name(fidelity.verdict(d))
    for name in ("rate_backlogged", "packet_spacing"):
        assert v[name]["ok"] is True, v[name]["reason"]
    assert v["rate_backlogged"]["backlogged_s"] < 6.5          # the bulk flow's time only


def test_link_changes_late_are_named(tmp_path):
    """A time-varying link's changes: on time, or the verdict says they were not."""
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",))
    assert "link_changes" not in by_name(fidelity.verdict(d))       # a static link: no check
    rows = [{"t_planned": t, "t_applied": t + late, "direction": "down", "rate_bps": 5e7,
             "delay_s": 0.02, "loss_percent": 0.0, "why": "trace"}
            for t, late in ((1.0, 0.002), (2.0, 0.004), (3.0, 0.001))]
    results.write_table(d, "changes", rows)
    c = by_name(fidelity.verdict(d))["link_changes"]
    assert c["ok"] is True and c["measured"] == pytest.approx(0.004)
    rows[1]["t_applied"] = 2.4
    results.write_table(d, "changes", rows)
    v = fidelity.verdict(d)
    c = by_name(v)["link_changes"]
    assert c["ok"] is False and v["ok"] is False and "link_changes" in v["failed"]
    assert "400 ms at most (planned at 2.00 s)" in c["reason"], c["reason"]


@pytest.mark.parametrize("achieved", [1.0, 0.7])
def test_busy_link_reports_the_queue_time_and_the_rate_served_meanwhile(tmp_path, achieved):
    """What the VM tests ask when a flow falls short of its link: how long the bottleneck had a
    queue in a window and what it sent meanwhile; the same numbers the verdict judges."""
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",), achieved=achieved)
    a, b = fidelity.active_window(data.RunData(d), "down")
    q = fidelity.busy_link(d, "down", a, b)
    check = by_name(fidelity.verdict(d))["rate_backlogged"]
    assert 0 < q["busy_s"] <= q["sampled_s"] <= b - a + 1e-9
    assert q["busy_s"] == pytest.approx(check["backlogged_s"])
    assert q["busy_bps"] == pytest.approx(check["achieved_bps"])
    assert q["busy_bps"] == pytest.approx(achieved * data.RunData(d).rate("down"), rel=0.05)
    # no samples in the window: nothing sampled, no rate
    assert fidelity.busy_link(d, "down", b + 100, b + 200) == {"sampled_s": 0.0, "busy_s": 0.0,
                                                               "busy_bps": None}


def test_a_new_qdisc_table_is_not_judged_from_the_old_ones_intervals(tmp_path):
    """The root qdisc's sample intervals are worked out once per run and window, and kept in the
    run's cache: a table set afterwards (set_table) empties it, so the intervals come from the
    new table."""
    d = synthetic.make_run(tmp_path / "r", ccas=("cubic",))
    run = data.RunData(d)
    a, b = 1.0, 5.0
    before = fidelity._qdisc_intervals(run, "down", a, b)
    assert len(before) > 2
    assert fidelity._qdisc_intervals(run, "down", a, b) is before      # kept, not worked out again
    q = run.table("qdisc")
    run.set_table("qdisc", q[q["t"] <= a + (b - a) / 2])
    after = fidelity._qdisc_intervals(run, "down", a, b)
    assert 0 < len(after) < len(before), (len(after), len(before))

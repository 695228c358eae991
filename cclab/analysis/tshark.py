"""tshark captures as DataFrames (for time-sequence graphs and capture-based spacing).

    argv = tshark.command("raw/capture-cc-s1.pcap")     # run it, then:
    cap = tshark.parse(stdout)                           # or tshark.read(pcap) does both

Columns: time (s, relative to the first packet), epoch, src, dst, sport, dport, stream, seq,
ack (relative numbers), len (payload bytes), retrans (bool: tcp.analysis.retransmission or
fast_retransmission), ack_rtt (s), in_flight (bytes).

    ts = tshark.time_sequence(pcap, start_epoch)         # a lab's tsg.csv: see its docstring
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pandas as pd

FIELDS = ["frame.time_relative", "frame.time_epoch", "ip.src", "ip.dst", "tcp.srcport",
          "tcp.dstport", "tcp.stream", "tcp.seq", "tcp.ack", "tcp.len",
          "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
          "tcp.analysis.ack_rtt", "tcp.analysis.bytes_in_flight"]
COLUMNS = {"frame.time_relative": "time", "frame.time_epoch": "epoch", "ip.src": "src",
           "ip.dst": "dst", "tcp.srcport": "sport", "tcp.dstport": "dport", "tcp.stream": "stream",
           "tcp.seq": "seq", "tcp.ack": "ack", "tcp.len": "len",
           "tcp.analysis.retransmission": "retransmission",
           "tcp.analysis.fast_retransmission": "fast_retransmission",
           "tcp.analysis.ack_rtt": "ack_rtt", "tcp.analysis.bytes_in_flight": "in_flight",
           "tcp.analysis.duplicate_ack": "dupack", "tcp.analysis.out_of_order": "out_of_order"}
NUMERIC = ("time", "epoch", "sport", "dport", "stream", "seq", "ack", "len", "ack_rtt", "in_flight")


# TCP payloads are decoded as plain data.  No field read here depends on what a payload holds,
# and tshark tries each payload against its heuristic dissectors otherwise.  On a lab 1 loss
# run's capture (8.8 k packets) in the lab VM, three runs of each, alternating: 11.1 s on
# average, 8.7 s with this; the output line for line the same.
PAYLOAD_AS_DATA = ("-d", "tcp.port==1-65535,data")


def command(pcap, fields=FIELDS, display_filter: str = "tcp", options=()) -> list[str]:
    """tshark's argv for `fields` of each packet that passes `display_filter`; `options` are
    further arguments (preferences) put before the fields."""
    argv = ["tshark", "-r", str(pcap), "-n", "-T", "fields", "-E", "separator=/t",
            "-E", "header=y", "-E", "occurrence=f", *PAYLOAD_AS_DATA,
            "-o", "tcp.relative_sequence_numbers:TRUE", "-o", "tcp.analyze_sequence_numbers:TRUE",
            *options]
    if display_filter:
        argv += ["-Y", display_filter]
    for f in fields:
        argv += ["-e", f]
    return argv


def flagged(df: pd.DataFrame, col: str):
    """Rows where tshark printed anything for an analysis flag (its fields are empty or a
    value); False throughout when the column is absent."""
    return df[col].fillna("").astype(str).str.len() > 0 if col in df else False


def parse(text: str, fields=None) -> pd.DataFrame:
    """tshark -T fields output (tab separated; with a header line, or in the order `fields`)."""
    lines = [l for l in text.splitlines() if l.strip()]
    if lines and lines[0].split("\t")[0] in COLUMNS:
        header, lines = lines[0].split("\t"), lines[1:]
    else:
        header = list(fields or FIELDS)
    rows = []
    for l in lines:
        parts = l.split("\t")
        parts += [""] * (len(header) - len(parts))
        rows.append([p.split(",")[0] for p in parts[:len(header)]])
    df = pd.DataFrame(rows, columns=[COLUMNS.get(h, h) for h in header])
    for c in NUMERIC:
        if c in df:
            df[c] = pd.to_numeric(df[c].replace("", np.nan), errors="coerce")
    flags = [c for c in ("retransmission", "fast_retransmission") if c in df]
    df["retrans"] = False
    for c in flags:
        df["retrans"] |= flagged(df, c)
        df = df.drop(columns=c)
    if "len" in df:
        df["len"] = df["len"].fillna(0)
    return df


def read(pcap, display_filter: str = "tcp", fields=FIELDS, timeout: float | None = None,
         options=()) -> pd.DataFrame:
    if shutil.which("tshark") is None:
        raise RuntimeError("tshark is not installed (the lab VM has it)")
    r = subprocess.run(command(pcap, fields, display_filter, options), capture_output=True,
                       text=True, check=True, timeout=timeout)
    return parse(r.stdout, fields)


# A time-sequence graph's columns (a lab run's tsg.csv), and what tshark is asked for them
TSG_COLUMNS = ["t", "sport", "dport", "seq", "ack", "len", "retrans", "dupack"]
TSG_FIELDS = ["frame.time_epoch", "tcp.srcport", "tcp.dstport", "tcp.seq", "tcp.ack", "tcp.len",
              "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
              "tcp.analysis.duplicate_ack", "tcp.analysis.out_of_order"]
TSHARK_TIMEOUT_S = 600
# A time-sequence graph reads neither bytes in flight nor TCP's conversation timestamps, so tshark
# need not compute them (the lab 1 capture above: 7.9 s on average with these and the payloads
# as data; the same output).
TSG_OPTIONS = ("-o", "tcp.calculate_timestamps:FALSE", "-o", "tcp.track_bytes_in_flight:FALSE")


def time_sequence(pcap, start_epoch: float, options=TSG_OPTIONS) -> pd.DataFrame:
    """A capture taken at the sender as a time-sequence graph: per TCP segment, t (s since the
    run's start_epoch), ports, relative seq and ack, payload len, retrans and dupack (0/1).

    At the sender's interface a data segment below the highest sequence already sent is a
    retransmission, whichever name tshark gives it: tshark calls one "out-of-order" when it
    follows the previous segment within the initial RTT, as a busy sender's fast
    retransmissions do (a run in the lab VM: 73 retransmissions, none flagged
    tcp.analysis.retransmission), so those count as retransmissions here too."""
    cap = read(pcap, fields=TSG_FIELDS, timeout=TSHARK_TIMEOUT_S, options=options)
    cap = cap[cap["epoch"].notna()]
    out = pd.DataFrame({"t": (cap["epoch"] - start_epoch).round(6)})
    for c in ("sport", "dport", "seq", "ack", "len"):
        out[c] = cap[c].fillna(0).astype("int64")
    out["retrans"] = cap["retrans"] | flagged(cap, "out_of_order")
    out["dupack"] = flagged(cap, "dupack")
    out[["retrans", "dupack"]] = out[["retrans", "dupack"]].astype(int)
    return out[TSG_COLUMNS]


def sender_side(cap: pd.DataFrame, stream=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(data segments, ACKs) of one TCP stream (the busiest if not given): data is what the
    side that sent the most payload sent; ACKs are what the other side sent."""
    if stream is None and "stream" in cap and cap["stream"].notna().any():
        stream = cap.groupby("stream")["len"].sum().idxmax()
    s = cap[cap["stream"] == stream] if stream is not None else cap
    by = s.groupby(["src", "sport"])["len"].sum()
    src, sport = by.idxmax()
    mine = (s["src"] == src) & (s["sport"] == sport)
    return s[mine & (s["len"] > 0)], s[~mine]

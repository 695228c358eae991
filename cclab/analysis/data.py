"""One run's data as the analysis sees it: manifest, tables, link parameters, provenance.

Built on the engine's loaders (`cclab.results`).  Tables the engine does not define yet are read
from `<run>/<name>.csv` if present (see EXTRA_TABLES); a missing table is an empty DataFrame with
its documented columns, so every metric and plot degrades to "not measured" instead of failing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from cclab import results
from cclab.schema import MTU

INFINITE_SSTHRESH = 2147483647     # what tcp_probe prints while ssthresh is "infinite"

# Tables this package reads that the engine may record (documented columns, `t` in s since
# the run start like every engine table).  See cclab/analysis/__init__.py for the contract.
EXTRA_TABLES = {
    # CPU load during the run, one row per sample and CPU ("all" = the whole machine).
    "cpu": ["t", "cpu", "busy_frac"],
    # search:search_exit tracepoint, one row per flow leaving slow start.
    "search": ["t", "flow", "sport", "dport", "reason", "cwnd", "norm_diff", "elapsed_us",
               "bin_us"],
    # spline:spline_mode tracepoint, one row per mode change.
    "spline": ["t", "flow", "sport", "dport", "old", "new", "cwnd", "bw", "min_rtt_us",
               "fairness"],
}


class RunData:
    """A run folder, loaded lazily.  `run.table("ss")`, `run.manifest`, `run.rate("down")`."""

    def __init__(self, path):
        self.path = Path(path)
        self.manifest = results.read_manifest(self.path)
        self._tables: dict[str, pd.DataFrame] = {}
        self.cache: dict = {}           # derived frames (metrics), dropped when a table changes
        self.own_tables = False         # a table was attached by hand (set_table)

    # ------------------------------------------------------------ tables
    def table(self, name: str) -> pd.DataFrame:
        if name not in self._tables:
            if name in results.TABLES:
                df = results.load(self.path, name)
            else:
                p = self.path / f"{name}.csv"
                cols = EXTRA_TABLES.get(name, [])
                df = pd.read_csv(p, low_memory=False) if p.exists() and p.stat().st_size else pd.DataFrame(columns=cols)
            self._tables[name] = df
        return self._tables[name]

    def set_table(self, name: str, df: pd.DataFrame) -> None:
        """Attach a table computed elsewhere (e.g. a parsed capture) for this session only."""
        self._tables[name] = df
        self.own_tables = True
        self.cache.clear()

    def derived(self, key, make):
        """What make() works out from this run's tables, made once for `key` and kept in
        self.cache (which set_table empties); callers that hand out a frame copy it."""
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    @property
    def tables_loaded(self) -> bool:
        """Whether any table has been read (and handed out) yet."""
        return bool(self._tables)

    # ------------------------------------------------------------ identity
    @property
    def experiment(self) -> str:
        return str(self.manifest.get("experiment") or self.path.parent.name)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def repetition(self):
        return self.manifest.get("repetition")

    @property
    def label(self) -> str:
        return f"{self.experiment}/{self.name}"

    @property
    def fidelity(self) -> dict | None:
        return self.manifest.get("fidelity")

    @property
    def trusted(self) -> bool | None:
        """True/False from the fidelity verdict, None when the run was never checked."""
        f = self.fidelity
        return None if not f else bool(f.get("ok"))

    # ------------------------------------------------------------ the link
    @property
    def profile(self) -> dict:
        return self.manifest.get("profile") or {}

    def direction(self, name: str) -> dict:
        return self.profile.get(name) or {}

    def rate(self, direction: str = "down") -> float:
        """Configured bottleneck rate in bit/s (NaN if unknown)."""
        r = self.direction(direction).get("rate")
        return float(r) if r is not None else math.nan

    def base_rtt(self) -> float:
        """Configured round-trip propagation delay in s (one-way down + up)."""
        return float(self.direction("down").get("delay") or 0) + float(self.direction("up").get("delay") or 0)

    def bdp_bytes(self, direction: str = "down") -> float:
        return self.rate(direction) * self.base_rtt() / 8

    def buffer_packets(self, direction: str = "down") -> float:
        """The bottleneck buffer in packets, as the engine sizes it (int, or k x BDP)."""
        d = self.direction(direction)
        b = d.get("buffer", "1bdp")
        if isinstance(b, str) and b.strip().lower().endswith("bdp"):
            k = float(b.strip()[:-3] or 1)
            return max(2, math.ceil(k * self.rate(direction) * self.base_rtt() / (8 * MTU)))
        try:
            return float(b)
        except (TypeError, ValueError):
            return math.nan

    def delay_line_packets(self, direction: str, rate=None, packet_bytes=MTU):
        """Packets netem holds while they are 'on the wire' (rate x one-way delay), for packets
        of packet_bytes (a stream of small datagrams keeps many more of them on the wire).  rate
        and packet_bytes may be numbers or pandas Series of the same length (an answer each)."""
        d = self.direction(direction)
        r = self.rate(direction) if rate is None else rate
        if isinstance(packet_bytes, pd.Series):
            size = packet_bytes.where(packet_bytes > 0, MTU)
        else:
            size = packet_bytes if packet_bytes > 0 else MTU
        return r * (float(d.get("delay") or 0) + float(d.get("jitter") or 0)) / (8 * size)

    def data_directions(self) -> list[str]:
        fl = self.table("flows")
        if len(fl) and "direction" in fl:
            return sorted(set(fl["direction"].dropna().astype(str)))
        spec = self.manifest.get("spec") or {}
        return sorted({f.get("direction", "down") for f in spec.get("flows", [])}) or ["down"]

    def rate_changes(self, direction: str) -> pd.DataFrame:
        """The run's link changes (changes.csv) that set this direction's rate, in time order."""
        ch = self.table("changes")
        if not len(ch) or "direction" not in ch:
            return ch.iloc[0:0]
        return ch[(ch["direction"] == direction) & ch["rate_bps"].notna()].sort_values("t_applied")

    def _rate_steps(self, direction: str) -> tuple[list, list]:
        """(times, rates) of expected_rate: rates[k] holds from times[k] to times[k + 1].
        Worked out once per direction (the fidelity checks ask for a rate per sample pair)."""
        def steps():
            ch = self.rate_changes(direction)
            return ([-math.inf] + list(ch["t_applied"].astype(float)) + [math.inf],
                    [self.rate(direction)] + list(ch["rate_bps"].astype(float)))
        return self.derived(("rate_steps", direction), steps)

    def expected_rate(self, direction: str, t0: float, t1: float) -> float:
        """Mean configured rate over [t0, t1], following link changes (changes.csv)."""
        times, rates = self._rate_steps(direction)
        if len(rates) == 1:
            return rates[0]
        if t1 <= t0:
            i = max(k for k in range(len(rates)) if times[k] <= t0)
            return rates[i]
        total = 0.0
        for k, r in enumerate(rates):
            a, b = max(t0, times[k]), min(t1, times[k + 1])
            if b > a:
                total += r * (b - a)
        return total / (t1 - t0)

    # ------------------------------------------------------------ provenance
    def provenance(self) -> dict:
        m = self.manifest
        kit = m.get("kit") or {}
        commit = kit.get("commit")
        commit_s = (commit[:10] + ("+dirty" if kit.get("dirty") else "")) if commit else "unknown"
        down, up = self.direction("down"), self.direction("up")

        def link(d):
            if not d:
                return "not shaped"
            parts = [_fmt_rate(d.get("rate")), f"{float(d.get('delay') or 0) * 1e3:g} ms"]
            if d.get("loss"):
                parts.append(f"loss {d['loss']}%")
            buf = d.get("buffer")
            parts.append(f"buf {buf}" + (" pkts" if isinstance(buf, (int, float)) else ""))
            parts.append(d.get("shaper", "?"))
            return " ".join(parts)

        ccas = sorted({str(c) for c in self.table("flows").get("cca", pd.Series(dtype=str)).dropna()}) \
            or sorted({f.get("cca") for f in (m.get("spec") or {}).get("flows", []) if f.get("cca")})
        return {
            "run": self.label,
            "repetition": m.get("repetition"),
            "status": m.get("status"),
            "start": m.get("start"),
            "kernel": m.get("kernel"),
            "kit": commit_s,
            "profile": self.profile.get("name"),
            "down": link(down), "up": link(up),
            "qdisc": self.qdisc_kinds(),
            "ccas": ", ".join(c for c in ccas if c),
            "seed": m.get("seed"),
        }

    def qdisc_kinds(self) -> str:
        """The bottleneck qdisc chain as the kernel reported it (manifest "tc"), e.g. htb>netem."""
        kinds = []
        for node, devs in (self.manifest.get("tc") or {}).items():
            if not str(node).startswith("cc-r"):
                continue
            for dev, qds in (devs or {}).items():
                if isinstance(qds, dict):          # {"qdisc": [...], "class": [...]} per device
                    qds = qds.get("qdisc") or []
                chain = [q.get("kind") for q in qds if q.get("kind") not in (None, "noqueue")]
                if chain and any(k != "pfifo_fast" for k in chain):
                    kinds.append(f"{dev}: {'>'.join(chain)}")
        if kinds:
            return "; ".join(kinds)
        d = self.direction("down")
        return d.get("shaper", "?") + ("+netem" if d.get("delay") or d.get("loss") else "")

    def provenance_line(self) -> str:
        p = self.provenance()
        status = "" if p["status"] in (None, "complete") else f" | status {p['status']}"
        return (f"{p['run']} (rep {p['repetition']}) | kernel {p['kernel']} | kit {p['kit']} | "
                f"{p['profile']}: down {p['down']}, up {p['up']} | qdisc {p['qdisc']} | "
                f"cca {p['ccas']} | {p['start']}{status}")


def _fmt_rate(r) -> str:
    if r is None:
        return "?"
    r = float(r)
    for unit, k in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if r >= k:
            return f"{r / k:g} {unit}"
    return f"{r:g} bit/s"


def load_runs(paths) -> list[RunData]:
    """Every run under the given folders (run, experiment or results folders), oldest first."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out = []
    for p in paths:
        out += [RunData(r) for r in results.runs(p)]
    return out


def as_runs(runs) -> list[RunData]:
    """Accept a RunData, a path, or a list of either."""
    if isinstance(runs, RunData):
        return [runs]
    if isinstance(runs, (str, Path)):
        return load_runs(runs)
    out = []
    for r in runs:
        out += as_runs(r)
    return out




def dumps(obj) -> str:
    return json.dumps(obj, indent=2, default=str)

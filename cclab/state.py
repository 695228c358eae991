"""What a run has created, kept in /run/cclab/state.json, and how to remove it.

A run records every namespace (by the pid of its Mininet shell and the namespace's inode),
every process it starts and its tracing instance, before it creates the next thing.  On any
exit the runner removes them; after a run that was killed outright, `cclab clean` reads the file
and removes what is left.  `clean` also finds kit namespaces without the file: every Mininet
shell of the kit runs as "bash ... mininet:cc-<name>", and every kit interface is named "cc-...".

Removal is provable: a namespace disappears when no process is left in it, so clean kills
every process whose /proc/<pid>/ns/net is one of the kit's namespaces, then deletes any "cc-"
interface still in the root namespace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .results import write_json

STATE_DIR = Path(os.environ.get("CCLAB_STATE_DIR", "/run/cclab"))
PREFIX = "cc-"
TRACE_INSTANCE = "cclab"


def state_file() -> Path:
    return STATE_DIR / "state.json"


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int, started: int | None = None) -> bool:
    """Running (not a zombie), and the same process if its start time is given."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X") and (started is None or int(fields[19]) == started)


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def kit_shells() -> dict[int, str]:
    """Mininet shells of kit nodes still running: pid -> node name."""
    out = {}
    for pid in all_pids():
        cmd = cmdline(pid)
        if " mininet:" + PREFIX in cmd and "bash" in cmd:
            out[pid] = cmd.rsplit("mininet:", 1)[1].split()[0]
    return out


class RunState:
    """The state file of the run in progress (one at a time on a machine)."""

    def __init__(self, run_dir: Path):
        self.data = {"pid": os.getpid(), "started": start_time(os.getpid()),
                     "run_dir": str(run_dir), "nodes": {}, "procs": [], "trace_instance": None}

    def acquire(self) -> list[str]:
        """Claim the machine; clean up after a dead earlier run.  Returns what was cleaned."""
        cleaned = []
        old = read()
        if old is not None:
            if old.get("pid") != os.getpid() and alive(old.get("pid", -1), old.get("started")):
                raise RuntimeError(f"another cclab run is in progress (pid {old['pid']}, "
                                   f"{old.get('run_dir')}); wait for it or stop it first")
        if old is not None or kit_shells() or leftover_interfaces():
            cleaned = clean(force=False)
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.save()
        return cleaned

    def save(self) -> None:
        write_json(state_file(), self.data)

    def add_node(self, name: str, pid: int) -> None:
        self.data["nodes"][name] = {"pid": pid, "started": start_time(pid),
                                    "netns": netns_inode(pid)}
        self.save()

    def add_proc(self, pid: int, what: str) -> None:
        self.data["procs"].append({"pid": pid, "started": start_time(pid), "what": what})
        self.save()

    def set_trace_instance(self, path: str | None) -> None:
        self.data["trace_instance"] = path
        self.save()

    def namespaces(self) -> set[int]:
        return {n["netns"] for n in self.data["nodes"].values() if n.get("netns")}

    def release(self) -> None:
        try:
            state_file().unlink()
        except FileNotFoundError:
            pass

    def next_run(self, run_dir: Path) -> None:
        """Hand this record, and the network it lists, to the next run of the same process
        (runner.keep_network): the machine stays claimed from one run to the next."""
        self.data.update(run_dir=str(run_dir), procs=[], trace_instance=None)
        self.save()

    def quiet(self, shells: set[int]) -> list[int]:
        """Between two runs on a kept network: kill every process in its namespaces but the
        nodes' shells.  Returns the pids still there besides them."""
        inodes = self.namespaces()
        kill_in_namespaces(inodes, spare=shells)
        return [pid for pid in all_pids()
                if pid not in shells and netns_inode(pid) in inodes and alive(pid)]

    def tear_down(self, stop_network=None) -> list[int]:
        """The last step of a run or a shell: stop its network (`stop_network`, when it was
        built), kill whatever is still in its namespaces, and forget the record.  Returns the
        pids still left in them; the record is then kept, for `cclab clean`."""
        inodes = self.namespaces()
        if stop_network is not None:
            stop_network()
        kill_in_namespaces(inodes)                 # anything the network's own stop missed
        left = [pid for pid in all_pids() if netns_inode(pid) in inodes]
        if not left:
            self.release()
        return left


def read() -> dict | None:
    try:
        with open(state_file()) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def kill_in_namespaces(inodes: set[int], spare: set[int] = frozenset(),
                       grace: float = 2.0) -> list[str]:
    """TERM, then KILL, every process in one of these network namespaces."""
    me = os.getpid()
    root_ns = netns_inode(1)
    inodes = {i for i in inodes if i and i != root_ns}
    if not inodes:
        return []

    def members():
        return [p for p in all_pids()
                if p != me and p not in spare and netns_inode(p) in inodes and alive(p)]

    def signal_all(sig):
        for pid in members():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while members() and time.monotonic() < deadline:
            time.sleep(0.05)

    report = [f"killed {pid} ({cmdline(pid)[:60]})" for pid in members()]
    signal_all(signal.SIGTERM)
    signal_all(signal.SIGKILL)
    return report


def leftover_interfaces() -> list[str]:
    """Kit interfaces in the root namespace (there should be none)."""
    try:
        out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True,
                             timeout=10).stdout
        return [l["ifname"] for l in json.loads(out or "[]")
                if l.get("ifname", "").startswith(PREFIX)]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def remove_trace_instance(path: str | None = None) -> bool:
    from . import measure
    for p in ([path] if path else []) + measure.trace_instance_candidates():
        if p and os.path.isdir(p):
            measure.stop_trace_instance(p)
            return True
    return False


def clean(force: bool = True) -> list[str]:
    """Remove every namespace, process, interface and tracing instance a kit run left.
    Returns a line per thing removed."""
    report = []
    old = read() or {}
    if force is True and old and old.get("pid") != os.getpid() \
            and alive(old.get("pid", -1), old.get("started")):
        raise RuntimeError(f"a cclab run is in progress (pid {old['pid']}); stop it first")
    inodes = {n.get("netns") for n in old.get("nodes", {}).values()}
    shells = kit_shells()
    inodes |= {netns_inode(pid) for pid in shells}
    for p in old.get("procs", []):
        if alive(p["pid"], p.get("started")):
            inodes.add(netns_inode(p["pid"]))
    report += kill_in_namespaces(inodes)
    for p in old.get("procs", []):          # a recorded process that left the namespaces
        if alive(p["pid"], p.get("started")):
            try:
                os.kill(p["pid"], signal.SIGKILL)
                report.append(f"killed {p['pid']} ({p.get('what')})")
            except ProcessLookupError:
                pass
    for name in leftover_interfaces():
        subprocess.run(["ip", "link", "del", name], capture_output=True)
        report.append(f"deleted interface {name}")
    if remove_trace_instance(old.get("trace_instance")):
        report.append("removed tracing instance")
    if old:
        try:
            state_file().unlink()
            report.append(f"removed {state_file()}")
        except FileNotFoundError:
            pass
        run_dir = old.get("run_dir")
        if run_dir:
            report.append(f"partial results (incomplete) stay in {run_dir}")
    return report

"""Running an experiment: check, build, measure, run the flows, clean up, write the results.

One run, in order:
  1. preflight: root, the tools, Mininet; every congestion control available (modprobe
     tcp_<name>, or insmod a .ko the experiment names) -- or a clear error before any flow;
  2. the run folder and a manifest marked "incomplete";
  3. the Mininet dumbbell with its qdiscs and sysctls (topo.plan()), recorded as applied;
  4. measurements start (CPU load, sockets, qdiscs, tracepoints, ping), then iperf3 servers;
     flows and link changes follow the timeline;
  5. whatever happens (end, exception, Ctrl-C, SIGTERM): every process is stopped, every
     namespace removed, the raw output turned into tables, and the manifest finished --
     "complete" only if every flow ran, with the congestion control it asked for.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from . import (ccas, dynamics, interrupts, measure, measurements, provenance, results, state,
               tc, topo)
from .spec import Experiment

# iperf3's connection timeout (s), for the control and data connections.  On a path whose queue
# is full a SYN waits for the queue to drain, or is dropped and sent again 1 s, 3 s, 7 s later: a
# saturated GEO path (600 ms, an 8-BDP queue draining for 4.8 s) needs more than the default.
# Both limits grow to SLOW_PATH_RTTS times the path's worst RTT (Profile.worst_rtt).
CONNECT_TIMEOUT_S = 5.0
SLOW_PATH_RTTS = 3
# On a lossy path a handshake (or a last control message) may need several tries: Linux resends
# a SYN after 1 s, then 2 s, 4 s, ... later.  The limits leave room for as many tries as make a
# failure for want of them less likely than GIVE_UP_CHANCE, and give the last try until the
# next would have gone out (20 % loss: six tries, the sixth at 31 s, 63 s in all).  One RTT after
# the last try was not enough in the software-emulated lab VM: on a busy host, iperf3 gave up
# on lab 3's 10 % loss path 7.04 s after its fourth SYN went out at 7 s.
GIVE_UP_CHANCE = 1e-4


def patience(link) -> float:
    """Seconds to wait for a connection or a server's last message on this path: enough for a
    saturated queue (SLOW_PATH_RTTS worst RTTs) and for the SYN retries its loss calls for."""
    wait = max(CONNECT_TIMEOUT_S, SLOW_PATH_RTTS * link.worst_rtt)
    p = link.handshake_loss
    if p > 0:
        tries = math.ceil(math.log(GIVE_UP_CHANCE) / math.log(p)) if p < 1 else 1
        wait = max(wait, float(2 ** tries - 1), float(2 ** (tries - 1) - 1) + link.worst_rtt)
    return wait


# Slack (s) for a busy guest beyond a client's own deadline (Runner._deadline).  A fixed slack
# after the planned end of the whole schedule was too little on lab 4's GEO path in full mode:
# a flow whose handshake waited 6 s behind an earlier flow's 8-BDP queue, and whose own slow
# start then overflowed that queue, reached its timer with 3-4 s of queue ahead of its results
# exchange, and was stopped 10 s after its timer.
CLIENT_GRACE_S = 15.0

TOOLS = ("iperf3", "tc", "ss", "ip", "ethtool", "ping", "sysctl", "mnexec")


class RunError(RuntimeError):
    """A run could not start or did not do what it was asked (exit status 1)."""


class UdpHandshakeLost(RunError):
    """A UDP flow never started: the link dropped iperf3's one handshake datagram (or the
    reply).  Nothing is wrong with the spec; another run draws other losses."""


# ---------------------------------------------------------------- preflight

def preflight(exp: Experiment, command: str = "cclab run") -> None:
    if os.geteuid() != 0:
        raise RunError(f"{command} needs root (namespaces and qdiscs): try sudo")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if exp.measure.capture and shutil.which("tcpdump") is None:
        missing.append("tcpdump")
    if missing:
        raise RunError(f"missing tools: {', '.join(missing)} (the lab VM has them all)")
    try:
        import mininet.net  # noqa: F401
    except ImportError as e:
        raise RunError(f"Mininet does not import ({e}); install Debian's mininet package") from None


def ensure_ccas(exp: Experiment) -> dict:
    """ccas.ensure, its refusal as a RunError: {cca: module record}."""
    try:
        return ccas.ensure(exp)
    except ccas.Unavailable as e:
        raise RunError(str(e)) from None


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------- a network kept between runs

def _tear_down(rec, net) -> list[int]:
    """Take down a run's network (when it was built) and the tracing instance kept with it."""
    measure.drop_kept_instances()
    return rec.tear_down(net.stop if net is not None else None)


class _Kept:
    """The network the last run of this process left up for the next, with the state record
    that lists it (topo.shape_key says which runs can take it), and the run's tracing instance
    (measure.ProbeTracer.stop(keep=True)), which goes down with it."""

    def __init__(self):
        self.depth = 0                  # keep_network() blocks open
        self.net = None
        self.state = None

    def take(self, exp: Experiment):
        """(network, record) kept for a run of this shape, or (None, None); a kept network of
        another shape is taken down first."""
        net, rec, self.net, self.state = self.net, self.state, None, None
        if net is not None and net.key is not None and net.key == topo.shape_key(exp):
            return net, rec
        if net is not None:
            _tear_down(rec, net)
        return None, None

    def put(self, net, rec) -> bool:
        """Keep a run's network for the next run, if runs are kept and nothing else is left
        in its namespaces; False: the caller takes it down."""
        if self.depth == 0 or net.key is None or rec.quiet(net.shells()):
            return False
        self.net, self.state = net, rec
        return True

    def drop(self) -> None:
        net, rec, self.net, self.state = self.net, self.state, None, None
        if net is not None:
            _tear_down(rec, net)


_kept = _Kept()


@contextmanager
def keep_network():
    """Runs made inside share their network where its shape allows (topo.shape_key): the
    repetitions of an experiment, a lab's experiments on the same link.  Each run still gets
    its own qdiscs and sysctls (topo.settings_scripts); a run that fails or is interrupted
    takes its network down, and the last one goes when the outermost block ends, however it
    ends.  The machine stays claimed (state.RunState) from the first run to the end."""
    with interrupts.interruptible():
        _kept.depth += 1
        try:
            yield
        finally:
            _kept.depth -= 1
            if _kept.depth == 0:
                with interrupts.held():
                    _kept.drop()


# ---------------------------------------------------------------- one run

class Run:
    def __init__(self, exp: Experiment, repetition: int, out: Path, stamp: str):
        self.exp = exp
        self.rep = repetition                       # 1-based
        self.dir = Path(out) / exp.name / f"{stamp}-{repetition}"
        self.raw = self.dir / "raw"
        self.seed = exp.seed + repetition - 1
        # (what, Popen, how it is stopped: a signal, or None for "close its stdin")
        self.procs: list[tuple[str, object, object]] = []
        self.measurements = measurements.chosen(exp)
        self.iperf = self.measurements[-1]          # the flows (measurements.Iperf)
        self.changes: list[dict] = []
        self.holds: list[dict] = []                 # plug steps of the spec's [[hold]]s, as applied
        self.errors: list[str] = []               # any of these: the run is incomplete
        self.warnings: list[str] = []
        self.net = None
        self.batch = {}                             # node -> tc -batch Popen
        self.stopping = threading.Event()           # ends the link-change thread
        self.dyn_thread = None
        # worked out once: the run's loop asks for each client's deadline every 50 ms, and the
        # path's worst RTT cost the guest 0.4 s of CPU a run during the flows when recomputed
        self.patience = patience(exp.link)

    # -- helpers
    def popen(self, node, argv, what, stdout=None, stop=signal.SIGTERM, **kw):
        """A process of the run in `node`; the cleanup stops it with `stop` (SIGINT for those
        that write what they have on it, after the flows have settled; SIGTERM after those;
        None: its stdin is closed and it ends by itself)."""
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = node.popen(argv, stdout=stdout or subprocess.DEVNULL, **kw)
        self.procs.append((what, p, stop))
        self.state.add_proc(p.pid, what)
        return p

    @property
    def clients(self) -> dict:
        return self.iperf.clients

    @property
    def handshake_lost(self) -> list[int]:
        return self.iperf.handshake_lost

    def flows_done(self) -> bool:
        """Every flow's client has started and ended."""
        return self.iperf.done(len(self.exp.flows))

    def now(self) -> float:
        return time.monotonic() - self.mono0

    def sleep_until(self, t: float) -> None:
        while True:
            left = t - self.now()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    # -- the run
    def execute(self, modules: dict) -> Path:
        """The run, from claiming the machine to the finished manifest.  The first signal
        (interrupts.interruptible) stops it; its clean-up runs to the end whatever comes after.
        A signal during the set-up, before the clean-up is in place, waits for it."""
        with interrupts.interruptible():
            with interrupts.held(pending="keep"):
                self._set_up(modules)
            try:
                interrupts.check()
                self._run()
                self.manifest["status"] = "complete"
            except KeyboardInterrupt as e:
                self.errors.append(f"interrupted ({e.args[0] if e.args else 'SIGINT'})")
                raise
            except Exception as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                raise
            finally:
                with interrupts.held():
                    self.asking.join()
                    self.manifest["kit"] = (self.kit[0] if self.kit
                                            else {"commit": None, "note": "git failed"})
                    self._cleanup()
                    self._tables()
                    if self.errors:
                        self.manifest["status"] = "incomplete"
                        self.manifest["error"] = "; ".join(self.errors)
                    self.manifest["warnings"] = self.warnings
                    self.manifest["end"] = iso(time.time())
                    results.write_json(self.dir / "manifest.json", self.manifest)
        return self.dir

    def _set_up(self, modules: dict) -> None:
        """Claim the machine (or take the kept network), make the run folder and write the
        manifest marked incomplete."""
        exp = self.exp
        kept, record = _kept.take(exp)
        if kept is not None:
            self.net, self.state, cleaned = kept, record, []
            self.state.next_run(self.dir)
        else:
            self.state = state.RunState(self.dir)
            try:
                cleaned = self.state.acquire()
            except RuntimeError as e:
                raise RunError(str(e)) from None
        try:
            self.raw.mkdir(parents=True, exist_ok=False)
        except OSError:
            if kept is not None:
                _tear_down(record, kept)
            raise
        # git answers while the network is built (0.7 s of the software-emulated VM's time)
        self.kit = []
        self.asking = threading.Thread(target=lambda: self.kit.append(provenance.kit_commit()),
                                       daemon=True)
        self.asking.start()
        self.t0 = time.time()
        self.mono0 = time.monotonic()
        self.manifest = {
            "experiment": exp.name, "repetition": self.rep, "repetitions": exp.repetitions,
            "status": "incomplete", "error": None,
            "spec": getattr(exp, "given", None) or exp.as_given(),
            "profile": exp.link.to_dict(), "seed": self.seed,
            "start": iso(self.t0), "start_epoch": self.t0, "end": None,
            "kernel": platform.release(), "uname": " ".join(platform.uname()),
            "tools": provenance.tool_versions(), "kit": None, "ccas": modules,
            "modules": provenance.loaded_modules(), "plan": [[n] + c for n, c in topo.plan(exp)],
            "tc": {}, "sysctls": {}, "flows": [], "cleaned_before": cleaned,
            "network": "kept" if kept is not None else "built",
            "beside": dict(results.BESIDE),
        }
        results.write_json(self.dir / "manifest.json", self.manifest)

    def _run(self) -> None:
        exp = self.exp
        early = [m for m in self.measurements if m.before_network]
        for m in early:
            m.start(self)
        if self.net is None:
            self.net = topo.Network(exp, on_node=self.state.add_node)
            self.net.start()
        else:                                   # kept from the last run (keep_network)
            self.net.reconfigure(exp)
        self.manifest["node_socket_buckets"] = self.net.socket_buckets
        self._snapshot()
        try:
            for m in self.measurements:         # the iperf3 servers last: each listens then
                if m not in early:
                    m.start(self)
        except measurements.MeasurementError as e:
            raise RunError(str(e)) from None
        if exp.link.dynamics is not None:
            for node in sorted({s.node for s in topo.shaped(exp.link)}):
                self._tc_batch(node)                # started now, not on the timeline
        for node, _ in topo.hold_devs(exp):
            self._tc_batch(node)
        limit = exp.planned_length()
        if any(f.bytes is not None for f in exp.flows):
            limit = exp.time_limit
        # The link changes are worked out before t = 0: reading a trace takes a quarter of a
        # second in the software-emulated VM, and a trace's first changes are due 0.1 s in.
        changes = dynamics.schedule(exp.link, self.seed, time.time(), limit)
        # the timeline starts now: t = 0
        self.mono0 = time.monotonic()
        self.t0 = time.time()
        self.manifest["start_epoch"] = self.t0
        self.manifest["start"] = iso(self.t0)
        if dynamics.on_wall_clock(exp.link):       # placed again on the real start (cheap)
            changes = dynamics.schedule(exp.link, self.seed, self.t0, limit)
        changes = sorted(changes + dynamics.hold_steps(exp.hold), key=lambda c: c.t)
        if changes:
            # Link changes (and holds) run on their own thread: starting a flow (a process) takes long
            # enough in the VM to make a change late if both shared this loop.
            self.dyn_thread = threading.Thread(target=self._dynamics, args=(changes,),
                                               daemon=True)
            self.dyn_thread.start()
        pending = sorted((f.start, i) for i, f in enumerate(exp.flows))
        end = exp.planned_length()
        sized = any(f.bytes is not None for f in exp.flows)
        extended = False
        while True:
            now = self.now()
            if pending and pending[0][0] <= now:
                self.iperf.start_client(self, pending.pop(0)[1], self.patience)
                continue
            done = self.flows_done()
            if done and sized and not extended:
                end, extended = max(end, now + exp.tail), True   # the tail after the last flow
            if done and now >= end:
                break                                  # later link changes are not needed
            late = [k for k, (p, t) in self.clients.items()
                    if p.poll() is None and now > self._deadline(k, t, limit)]
            if late:
                running = [k for k, (p, _) in self.clients.items() if p.poll() is None]
                for k in running:                  # iperf3 writes its JSON on SIGINT
                    self.clients[k][0].send_signal(signal.SIGINT)
                self._stalled(running, "; ".join(
                    f"flow {k} did not finish within "
                    f"{self._deadline(k, self.clients[k][1], limit):.0f} s" for k in late))
            self.sleep_until(min(pending[0][0] if pending else now + 0.05, now + 0.05))
        failed = [i for i, (p, _) in self.clients.items() if p.returncode not in (0, None)]
        if failed:
            self._stalled(failed, f"iperf3 failed for flow(s) {', '.join(map(str, failed))} "
                                  f"(see {self.raw}/iperf-*.json)")

    def _deadline(self, k: int, spawned: float, limit: float) -> float:
        """When flow k's iperf3 client is given up on (s on the timeline).  A timed flow has its
        duration from the moment its client started, plus the time iperf3 may spend around it:
        the connection and parameter exchange before (up to patience), the results exchange
        after (three messages through the same path, each perhaps resent once), and
        CLIENT_GRACE_S for a busy guest.  A sized flow has the experiment's time limit."""
        f = self.exp.flows[k - 1]
        if f.duration is None:
            return limit + CLIENT_GRACE_S
        return spawned + f.duration + 2 * self.patience + CLIENT_GRACE_S

    def _stalled(self, flows: list[int], message: str) -> None:
        """Raise the RunError for flows that did not end well, naming the UDP flows among
        them that never sent a datagram: iperf3 (3.12) opens a UDP stream by sending one
        datagram and waiting up to 30 s for the reply, without sending it again, so a lossy
        link can stall the flow before it starts."""
        silent = []
        for k in flows:
            if self.exp.flows[k - 1].protocol != "udp":
                continue
            try:
                self.clients[k][0].wait(timeout=3)     # until its JSON is written
            except subprocess.TimeoutExpired:
                continue
            if measure.udp_never_started(measure.read_json(self.raw / f"iperf-{k}.json")):
                silent.append(str(k))
        if silent:
            raise UdpHandshakeLost(
                f"{message}; UDP flow(s) {', '.join(silent)} never sent data: the link lost "
                f"iperf3's handshake datagram or its reply, which iperf3 does not resend; "
                f"run the experiment again")
        raise RunError(message)

    def _dynamics(self, changes: list) -> None:
        """Apply each link change at its instant, until the run stops."""
        for c in changes:
            while not self.stopping.is_set():
                left = c.t - self.now()
                if left <= 0:
                    break
                self.stopping.wait(min(left, 0.05))
            if self.stopping.is_set():
                return
            try:
                if isinstance(c, dynamics.HoldStep):
                    self._hold(c)
                else:
                    self._apply(c)
            except (OSError, ValueError) as e:      # tc -batch went away
                self.errors.append(f"link change at {c.t:g} s not applied: {e}")
                return

    def _hold(self, step: dynamics.HoldStep) -> None:
        t = self.now()
        for node, dev in topo.hold_devs(self.exp, step.direction):
            batch = self._tc_batch(node)
            batch.stdin.write(" ".join(topo.plug(dev, step.action)[1:]) + "\n")
            batch.stdin.flush()
        self.holds.append({"t_planned": step.t, "t_applied": round(t, 6),
                           "direction": step.direction, "action": step.action})

    def _apply(self, c: dynamics.Change) -> None:
        exp = self.exp
        buf = topo.buffers(exp.link)
        d = getattr(exp.link, c.direction)
        t = self.now()
        for s in topo.shaped(exp.link):
            if s.direction != c.direction:
                continue
            for argv in tc.change(d, s.dev, buf[c.direction], c.state, c.rate_changed):
                self._tc_batch(s.node).stdin.write(" ".join(argv[1:]) + "\n")
                self._tc_batch(s.node).stdin.flush()
        self.changes.append({"t_planned": c.t, "t_applied": round(t, 6), "direction": c.direction,
                             "rate_bps": c.state.rate, "delay_s": c.state.delay,
                             "loss_percent": c.state.loss, "why": c.why})

    def _tc_batch(self, node_name: str):
        """A long-lived `tc -batch -` per node: a change costs one line, not a process."""
        if node_name not in self.batch:
            with open(self.raw / f"tc-batch-{node_name}.log", "w") as log:
                self.batch[node_name] = self.popen(
                    self.net.node(node_name), ["tc", "-force", "-batch", "-"],
                    f"tc batch {node_name}", stdout=log, stop=None, stdin=subprocess.PIPE,
                    stderr=log, text=True)
        return self.batch[node_name]

    def _snapshot(self) -> None:
        """The qdiscs and sysctls as the kernel reports them, per node and interface: each node's
        setup script ends with these queries (topo.snapshot_queries), so this reads their
        answers."""
        snap = self.net.snapshot
        for node, devs in topo.interfaces(self.exp.link).items():
            answers = snap[node]
            self.manifest["tc"][node] = {
                d: {"qdisc": topo.qdiscs_of(answers, d),
                    # tc has no JSON for classes: keep its text, one line per class
                    "class": answers.get(("class", d), "").splitlines()}
                for d in devs}
            out = answers.get(("sysctl", ""), "")
            self.manifest["sysctls"][node] = dict(
                (l.split(" = ", 1)[0], l.split(" = ", 1)[1]) for l in out.splitlines() if " = " in l)
        results.write_json(self.dir / "manifest.json", self.manifest)

    # -- the end
    def _cleanup(self) -> None:
        """End everything the run started, whatever stopped it: the link changes; then each
        measurement settles (what is on its way arrives); the processes that write what they
        have on SIGINT get it, the tc batches their end of input, the rest SIGTERM; once every
        process has ended, the measurements' threads stop; then the namespaces go."""
        self.stopping.set()
        if self.dyn_thread is not None:
            self.dyn_thread.join(timeout=5)
        for m in self.measurements:
            m.settle(self)
        for what, p, stop in self.procs:
            if p.poll() is None and stop == signal.SIGINT:
                p.send_signal(signal.SIGINT)
        for what, p, stop in self.procs:
            if stop is None:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        deadline = time.monotonic() + 3
        for what, p, stop in self.procs:
            if p.poll() is None and stop not in (None, signal.SIGINT):
                p.send_signal(stop)
        for what, p, _ in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self.errors.append(f"{what} (pid {p.pid}) would not stop")
        for m in self.measurements:
            m.stop(self)
        if self.net is not None and not self.errors and _kept.put(self.net, self.state):
            return
        left = _tear_down(self.state, self.net)
        if left:
            self.errors.append(f"processes still in the run's namespaces: {left}")

    def keeping_network(self) -> bool:
        """Whether this run's network may be left up for the next (asked while it ends: the
        tracer then keeps its instance too; _cleanup takes both down if the keeping fails)."""
        return (_kept.depth > 0 and self.net is not None and self.net.key is not None
                and not self.errors)

    def _tables(self) -> None:
        """Raw output -> CSV tables (whatever exists, also after an interruption)."""
        try:
            found = measurements.Found(self.t0, self.mono0, self.iperf.flow_lookup(self))
            for m in self.measurements:         # Iperf last: its tables need the sockets'
                found.rows.update(m.tables(self, found))
            for name in ALWAYS_TABLES:
                results.write_table(self.dir, name, found.rows.get(name, []))
            for name, rows in found.rows.items():
                if name not in ALWAYS_TABLES:   # cpu, the enabled tracepoints'
                    results.write_table(self.dir, name, rows)
            results.write_table(self.dir, "changes", self.changes)
            if self.exp.hold:
                results.write_table(self.dir, "holds", self.holds)
            self.manifest["flows"] = found.rows["flows"]
        except Exception as e:                  # a parser bug must not hide the run's data
            self.errors.append(f"tables: {type(e).__name__}: {e}")


# Written for every run, empty when the measurement was off.
ALWAYS_TABLES = ("flows", "iperf", "ss", "probe", "qdisc", "ping")


# ---------------------------------------------------------------- many runs

def fmt_secs(s: float) -> str:
    s = int(round(max(0, s)))
    return f"{s // 60}:{s % 60:02d}"


# A run its caller does not trust (judge(run folder) names why: the lab commands pass the
# fidelity verdict) is made again with the same seed, at most RERUNS more times.  The run it
# replaces is kept beside it, renamed <folder>.superseded-<k>, with the reason in its manifest:
# nothing a run wrote is deleted, and the last attempt is kept as the run whatever its verdict.
RERUNS = 2


def supersede(d: Path, k: int, why: str) -> Path:
    """Move run folder d aside as d.superseded-k, noting why in its manifest."""
    # the manifest as the runner wrote it: results.read_manifest would add the files beside it
    # (the fidelity verdict that judged the run, module parameters), which stay their own files
    m = json.loads((d / "manifest.json").read_text())
    m["superseded"] = {"attempt": k, "why": why}
    results.write_json(d / "manifest.json", m)
    kept = d.with_name(f"{d.name}{results.SUPERSEDED}{k}")
    d.rename(kept)
    return kept


def run(exp: Experiment, out="results", quick: bool = False, progress=None, judge=None,
        reruns: int = RERUNS) -> list[Path]:
    """Run every repetition of an experiment; returns the run folders.  Raises RunError,
    KeyboardInterrupt (after cleaning up) or the error that stopped a run.  judge(folder), if
    given, returns None for a run to keep or a one-line reason to make it again (see RERUNS)."""
    if quick:
        exp = exp.quick()
    preflight(exp)
    modules = ensure_ccas(exp)
    missing = measure.missing_events(exp.measure.events)
    if missing:
        raise RunError(f"measure.events: tracepoint(s) {', '.join(missing)} not available "
                       f"(load the module: modprobe tcp_{missing[0].split(':')[0]}); "
                       f"no flow was started")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    n = exp.repetitions
    began = time.monotonic()
    dirs = []
    with keep_network():
        for rep in range(1, n + 1):
            dirs.append(_repetition(exp, rep, n, began, out, stamp, modules, progress, judge,
                                    reruns))
    if progress:
        progress(f"done: {n} run(s) in {fmt_secs(time.monotonic() - began)}")
    return dirs


def _repetition(exp, rep, n, began, out, stamp, modules, progress, judge, reruns) -> Path:
    """One repetition, made again while its judge does not trust it; returns its folder."""
    if progress:
        elapsed = time.monotonic() - began
        per_run = elapsed / (rep - 1) if rep > 1 else exp.planned_length() + 10
        progress(f"[run {rep}/{n}] {exp.name} (seed {exp.seed + rep - 1}): elapsed "
                 f"{fmt_secs(elapsed)}, about {fmt_secs(per_run * (n - rep + 1))} left")
    for attempt in range(1, reruns + 2):
        r = Run(exp, rep, Path(out), stamp)
        d = r.execute(modules)
        for w in r.warnings if progress else ():
            progress(f"[run {rep}/{n}] warning: {w}")
        if r.handshake_lost:
            raise UdpHandshakeLost(
                f"run {rep}/{n} incomplete: {'; '.join(r.errors)}; UDP flow(s) "
                f"{', '.join(map(str, r.handshake_lost))} never sent data: the link lost "
                f"iperf3's handshake datagram or its reply; run the experiment again ({r.dir})")
        if r.errors:
            raise RunError(f"run {rep}/{n} incomplete: {'; '.join(r.errors)} ({r.dir})")
        why = judge(d) if judge else None
        if why is None or attempt > reruns:
            break
        kept = supersede(d, attempt, why)
        if progress:
            progress(f"[run {rep}/{n}] not trusted ({why}); running it again, attempt "
                     f"{attempt + 1} of {reruns + 1} (this one is kept as {kept.name})")
    return d

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

from . import ccas, dynamics, measure, netlink, provenance, results, state, tc, topo
from .spec import MODULE_EVENTS, Experiment

# How long the cleanup waits, once every client has finished, for the iperf3 servers to receive
# their clients' last control message and write their results (see _let_servers_finish).  A lost
# message costs an RTO, doubling on each retry: from 0.2 s on the labs' 40 ms paths (8 s covers
# five retries) and about 1 s on GEO's 600 ms path (three).  Servers that are done cost nothing.
SERVER_GRACE_S = 8.0
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

# A packet capture is stopped once its file has not grown for CAPTURE_SETTLE_S (tcpdump has
# read what the kernel buffered), waiting at most CAPTURE_WAIT_S.
CAPTURE_SETTLE_S = 0.5
CAPTURE_WAIT_S = 10.0
TOOLS = ("iperf3", "tc", "ss", "ip", "ethtool", "ping", "sysctl", "mnexec")


class RunError(RuntimeError):
    """A run could not start or did not do what it was asked (exit status 1)."""


class UdpHandshakeLost(RunError):
    """A UDP flow never started: the link dropped iperf3's one handshake datagram (or the
    reply).  Nothing is wrong with the spec; another run draws other losses."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C."""


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


# ---------------------------------------------------------------- signals

@contextmanager
def signals_raise(raising=None):
    """SIGTERM and SIGHUP interrupt the run like Ctrl-C does (or raise `raising(signal name)`)."""
    def handler(signum, frame):
        raise (raising or Interrupted)(signal.Signals(signum).name)
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_held():
    """Cleanup must finish: hold off Ctrl-C and SIGTERM while it runs."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# ---------------------------------------------------------------- one run

def listening_ports(ss_output: str) -> set[int]:
    """The local ports in `ss -ltnH` output (its fourth column: 0.0.0.0:5201, *:5201, [::]:5201)."""
    ports = set()
    for line in ss_output.splitlines():
        fields = line.split()
        port = fields[3].rsplit(":", 1)[-1] if len(fields) >= 4 else ""
        if port.isdigit():
            ports.add(int(port))
    return ports


class Run:
    def __init__(self, exp: Experiment, repetition: int, out: Path, stamp: str):
        self.exp = exp
        self.rep = repetition                       # 1-based
        self.dir = Path(out) / exp.name / f"{stamp}-{repetition}"
        self.raw = self.dir / "raw"
        self.seed = exp.seed + repetition - 1
        self.procs: list[tuple[str, object]] = []   # (what, Popen)
        self.clients: dict[int, tuple[object, float]] = {}   # flow -> (Popen, t_spawn)
        self.changes: list[dict] = []
        self.holds: list[dict] = []                 # plug steps of the spec's [[hold]]s, as applied
        self.errors: list[str] = []               # any of these: the run is incomplete
        self.handshake_lost: list[int] = []       # UDP flows whose iperf3 gave up unstarted
        self.warnings: list[str] = []
        self.net = None
        self.tracer = None
        self.recorder = None
        self.cpu = None
        self.ifindex = {}                           # node -> {ifindex: (dev, direction)}
        self.batch = {}                             # node -> tc -batch Popen
        self.stopping = threading.Event()           # ends the link-change thread
        self.dyn_thread = None
        # worked out once: the run's loop asks for each client's deadline every 50 ms, and the
        # path's worst RTT cost the guest 0.4 s of CPU a run during the flows when recomputed
        self.patience = patience(exp.link)

    # -- helpers
    def popen(self, node, argv, what, stdout=None, env=None):
        p = node.popen(argv, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env)
        self.procs.append((what, p))
        self.state.add_proc(p.pid, what)
        return p

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
        exp = self.exp
        self.state = state.RunState(self.dir)
        try:
            cleaned = self.state.acquire()
        except RuntimeError as e:
            raise RunError(str(e)) from None
        self.raw.mkdir(parents=True, exist_ok=False)
        # git answers while the network is built (0.7 s of the software-emulated VM's time)
        kit = []
        asking = threading.Thread(target=lambda: kit.append(provenance.kit_commit()),
                                  daemon=True)
        asking.start()
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
            "beside": dict(results.BESIDE),
        }
        results.write_json(self.dir / "manifest.json", self.manifest)
        try:
            with signals_raise():
                self._run()
            self.manifest["status"] = "complete"
        except KeyboardInterrupt as e:
            self.errors.append(f"interrupted ({e.args[0] if e.args else 'SIGINT'})")
            raise
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            raise
        finally:
            with signals_held():
                asking.join()
                self.manifest["kit"] = kit[0] if kit else {"commit": None, "note": "git failed"}
                self._cleanup()
                self._tables()
                if self.errors:
                    self.manifest["status"] = "incomplete"
                    self.manifest["error"] = "; ".join(self.errors)
                self.manifest["warnings"] = self.warnings
                self.manifest["end"] = iso(time.time())
                results.write_json(self.dir / "manifest.json", self.manifest)
        return self.dir

    def _run(self) -> None:
        exp = self.exp
        m = exp.measure
        if m.cpu:
            from .cpu import CpuSampler
            self.cpu = CpuSampler(hz=m.cpu_hz).start()
        self.net = topo.Network(exp, on_node=self.state.add_node)
        self.net.start()
        self.manifest["node_socket_buckets"] = self.net.socket_buckets
        self._snapshot()
        ports = [exp.port(i) for i in range(len(exp.flows))]
        # measurements
        events = (["tcp:tcp_probe"] if m.tcp_probe else []) + list(m.events)
        if events:
            # one tracing instance for tcp_probe and the modules' tracepoints
            self.tracer = measure.ProbeTracer(ports, self.raw / "tcp_probe.txt", events)
            try:
                self.tracer.start(self.state.set_trace_instance)
            except (OSError, RuntimeError) as e:
                if m.events:
                    raise RunError(f"measure.events: cannot trace {', '.join(events)}: {e}") from None
                self.warnings.append(f"tcp_probe unavailable: {e}")
                self.tracer = None
        senders = sorted({topo.endpoints(f.direction, f.pair)[0] for f in exp.flows})
        if m.ss or m.qdisc:
            self.recorder = netlink.Recorder()
            if m.ss:
                for h in senders:
                    self.recorder.add(self.net.node(h).pid, "sockets", m.ss_hz,
                                      self.raw / f"sockets-{h}.bin")
            if m.qdisc:
                for node in sorted({s.node for s in topo.shaped(exp.link)}):
                    self.recorder.add(self.net.node(node).pid, "qdiscs", m.qdisc_hz,
                                      self.raw / f"qdiscs-{node}.bin")
            self.recorder.start()
        if m.capture:
            for h in senders:
                self.popen(self.net.node(h), measure.capture(topo.host_dev(h),
                           str(self.raw / f"capture-{h}.pcap"), m.snaplen), f"tcpdump {h}")
        if m.ping:
            src, dst = topo.client(1), topo.server(1)
            f = open(self.raw / f"ping-{src}.txt", "w")
            self.popen(self.net.node(src), measure.ping(topo.address(dst), m.ping_interval),
                       "ping", stdout=f)
            f.close()
        # iperf3 servers, each waited for until it listens
        for i, f in enumerate(exp.flows):
            receiver = topo.endpoints(f.direction, f.pair)[1]
            out = open(self.raw / f"iperf-server-{i + 1}.json", "w")
            self.popen(self.net.node(receiver), measure.iperf_server(exp.port(i), m.iperf_interval),
                       f"iperf3 server {i + 1}", stdout=out)
            out.close()
        servers: dict[str, set[int]] = {}
        for i, f in enumerate(exp.flows):
            servers.setdefault(topo.endpoints(f.direction, f.pair)[1], set()).add(exp.port(i))
        self._wait_listening(servers)
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
        if self.tracer is not None:
            self.manifest["probe_clock"] = "mono"
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
                self._start_flow(pending.pop(0)[1])
                continue
            done = self._clients_done()
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

    def _clients_done(self) -> bool:
        return len(self.clients) == len(self.exp.flows) and \
            all(p.poll() is not None for p, _ in self.clients.values())

    def _wait_listening(self, servers: dict[str, set[int]], timeout: float = 10.0) -> None:
        """Until every iperf3 server listens (servers: receiving node -> ports): each round asks
        each node that still waits for its listening TCP ports once, the nodes side by side."""
        waiting = {host: set(ports) for host, ports in servers.items()}
        deadline = time.monotonic() + timeout
        while True:
            hosts = sorted(waiting)
            outs = topo.run_in_all([(self.net.node(h), ["ss", "-ltnH"], None, False) for h in hosts])
            for host, out in zip(hosts, outs):
                waiting[host] -= listening_ports(out)
                if not waiting[host]:
                    del waiting[host]
            if not waiting:
                return
            if time.monotonic() >= deadline:
                host = sorted(waiting)[0]
                raise RunError(f"iperf3 server on {host}:{min(waiting[host])} did not start")
            time.sleep(0.05)

    def _start_flow(self, i: int) -> None:
        exp = self.exp
        f = exp.flows[i]
        sender, receiver = topo.endpoints(f.direction, f.pair)
        out = open(self.raw / f"iperf-{i + 1}.json", "w")
        t = self.now()
        p = self.popen(self.net.node(sender), measure.iperf_client(
            f, topo.address(receiver), exp.port(i), exp.measure.iperf_interval,
            connect_timeout=self.patience),
            f"iperf3 client {i + 1}", stdout=out)
        out.close()
        self.clients[i + 1] = (p, t)

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
            log = open(self.raw / f"tc-batch-{node_name}.log", "w")
            p = self.net.node(node_name).popen(["tc", "-force", "-batch", "-"],
                                               stdin=subprocess.PIPE, stdout=log, stderr=log,
                                               text=True)
            log.close()
            self.procs.append((f"tc batch {node_name}", p))
            self.state.add_proc(p.pid, f"tc batch {node_name}")
            self.batch[node_name] = p
        return self.batch[node_name]

    def _snapshot(self) -> None:
        """The qdiscs and sysctls as the kernel reports them, per node and interface: each node's
        setup script ends with these queries (topo.snapshot_queries), so this reads their
        answers."""
        snap = self.net.snapshot
        for s in topo.shaped(self.exp.link):
            self.ifindex.setdefault(s.node, {})[topo.ifindex_of(snap[s.node], s.dev)] = (
                s.dev, s.direction)
        for node, devs in topo.interfaces(self.exp.link).items():
            answers = snap[node]
            self.manifest["tc"][node] = {
                d: {"qdisc": topo.qdiscs_of(answers, d),
                    # tc has no JSON for classes: keep its text, one line per class
                    "class": answers[("class", d)].splitlines()}
                for d in devs}
            out = answers.get(("sysctl", ""), "")
            self.manifest["sysctls"][node] = dict(
                (l.split(" = ", 1)[0], l.split(" = ", 1)[1]) for l in out.splitlines() if " = " in l)
        results.write_json(self.dir / "manifest.json", self.manifest)

    # -- the end
    def _cleanup(self) -> None:
        self.stopping.set()
        if self.dyn_thread is not None:
            self.dyn_thread.join(timeout=5)
        self._let_servers_finish()
        self._let_captures_catch_up()
        for what, p in self.procs:
            if p.poll() is None and what.startswith(("iperf3 client", "tcpdump", "ping")):
                p.send_signal(signal.SIGINT)       # iperf3 and tcpdump write what they have
        for p in self.batch.values():
            try:
                p.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + 3
        for what, p in self.procs:
            if p.poll() is None:
                if not what.startswith(("iperf3 client", "tcpdump", "ping", "tc batch")):
                    p.terminate()
        for what, p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self.errors.append(f"{what} (pid {p.pid}) would not stop")
        if self.cpu is not None:
            self.cpu.stop()
        if self.recorder is not None:
            self.recorder.stop()                   # its sockets hold the namespaces open
        if self.tracer is not None:
            try:
                self.tracer.stop()
            except OSError as e:
                self.errors.append(f"tcp_probe: {e}")
            self.state.set_trace_instance(None)
        left = self.state.tear_down(self.net.stop if self.net is not None else None)
        if left:
            self.errors.append(f"processes still in the run's namespaces: {left}")

    def _let_servers_finish(self) -> None:
        """An iperf3 server (-1) writes its JSON -- the receiver's intervals -- and exits once its
        client's final control message arrives, which loss on the link can hold back by an RTO
        or more after the client is done.  When every client has finished, wait up to
        SERVER_GRACE_S for the servers; one still running then is killed by the cleanup, which
        loses its intervals, so that is an error of the run."""
        if not self._clients_done():
            return                                 # interrupted or failed: no waiting
        # a server whose client failed never hears from it: no waiting for that one (the
        # client's failure is the run's error)
        ok = {i for i, (p, _) in self.clients.items() if p.returncode == 0}
        servers = [(what, p) for what, p in self.procs
                   if what.startswith("iperf3 server") and int(what.rsplit(" ", 1)[1]) in ok]
        grace = max(SERVER_GRACE_S, self.patience)
        deadline = time.monotonic() + grace
        while any(p.poll() is None for _, p in servers) and time.monotonic() < deadline:
            time.sleep(0.05)
        late = [what for what, p in servers if p.poll() is None]
        if late:
            self.errors.append(f"{', '.join(late)} still waiting for the client's last message "
                               f"{grace:.1f} s after every client finished; killed, so the "
                               "receiver's intervals of those flows are lost (a longer `tail` helps)")

    def _let_captures_catch_up(self) -> None:
        """tcpdump reads the kernel's capture buffer behind the traffic, the more so under
        software emulation, and what it has not read when it is stopped is lost (a capture in
        the VM ended 0.5 MB short of its flow).  Before stopping it, wait until each capture
        file (written packet by packet, -U) has stopped growing for CAPTURE_SETTLE_S, at most
        CAPTURE_WAIT_S."""
        if not self._clients_done():
            return                                 # interrupted: the traffic may still flow
        files = [self.raw / f"capture-{what.split(' ', 1)[1]}.pcap" for what, p in self.procs
                 if what.startswith("tcpdump") and p.poll() is None]
        if not files:
            return

        def sizes():
            return [f.stat().st_size if f.exists() else 0 for f in files]
        deadline = time.monotonic() + CAPTURE_WAIT_S
        last, still_since = sizes(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = sizes()
            if now != last:
                last, still_since = now, time.monotonic()
            elif time.monotonic() - still_since >= CAPTURE_SETTLE_S:
                return
        self.warnings.append(f"packet capture still growing {CAPTURE_WAIT_S:g} s after the flows; "
                             "it may miss the last packets")

    def _tables(self) -> None:
        """Raw output -> CSV tables (whatever exists, also after an interruption)."""
        exp = self.exp
        try:
            self._tables_inner(exp)
        except Exception as e:              # a parser bug must not hide the run's data
            self.errors.append(f"tables: {type(e).__name__}: {e}")

    def _tables_inner(self, exp: Experiment) -> None:
        t0, mono0 = self.t0, self.mono0
        parsed, local_ports = {}, {}
        for i in range(1, len(exp.flows) + 1):
            client = measure.parse_iperf(measure.read_json(self.raw / f"iperf-{i}.json"), i, 0.0)
            server, _ = measure.parse_iperf(measure.read_json(self.raw / f"iperf-server-{i}.json"), i, 0.0)
            parsed[i] = client, [r for r in server if r["side"] == "receiver"]
            local_ports[i] = [p for p in client[1].pop("local_ports") if p]
        flow_of = measure.flow_lookup(exp, local_ports)
        ss_rows = []
        for path in sorted(self.raw.glob("sockets-*.bin")):
            ss_rows += measure.parse_sockets(path, path.stem[len("sockets-"):], t0, flow_of)
        flows, iperf_rows = [], []
        period = 1 / exp.measure.ss_hz if exp.measure.ss_hz else 0.0
        for i, f in enumerate(exp.flows, 1):
            sender, receiver = topo.endpoints(f.direction, f.pair)
            proc, t_spawn = self.clients.get(i, (None, None))
            (rows, summ), server_rows = parsed[i]
            # iperf3's intervals count from its test start, which comes after every connection
            # is up: place them there, not at the client's spawn (measure.test_start)
            start = None if t_spawn is None else measure.test_start(ss_rows, i, t_spawn, period)
            ran = max((r["t_end"] for r in rows), default=0.0)     # the client's own intervals
            iperf_rows += [dict(r, t_start=round(r["t_start"] + (start or 0.0), 6),
                                t_end=round(r["t_end"] + (start or 0.0), 6)) for r in rows + server_rows]
            err = summ.pop("error")
            if err:
                self.errors.append(f"flow {i}: iperf3: {err}")
                if f.protocol == "udp" and measure.udp_never_started(
                        measure.read_json(self.raw / f"iperf-{i}.json")):
                    self.handshake_lost.append(i)
            flows.append({"flow": i, "cca": f.cca, "direction": f.direction, "pair": f.pair,
                          "sender": sender, "receiver": receiver, "port": exp.port(i - 1),
                          "protocol": f.protocol, "streams": f.streams, "start": f.start,
                          "duration": f.duration, "bytes_requested": f.bytes,
                          "t_spawn": None if t_spawn is None else round(t_spawn, 6),
                          "t_start": None if start is None else round(start, 6),
                          "t_end": None if start is None else round(start + ran, 6),
                          "exit_code": proc.returncode if proc else None, **summ})
        self.warnings += measure.overlaps(flows)
        for fl in flows:
            # The congestion control that carried the flow's data: iperf3 -C sets it once the
            # connection is up and its cookie written, so a sample taken before then may show
            # the host's default; such a socket has sent no more than the cookie and does not
            # count (a sample between the cookie and the switch failed a VM test once).
            ccs = {r.get("cca") for r in ss_rows if r["flow"] == fl["flow"] and r.get("cca")
                   and (r.get("data_segs_out") or 0) > measure.COOKIE_SEGMENTS}
            fl["cca_ss"] = ",".join(sorted(ccs)) if ccs else None
        probe_rows, module_rows = [], {}
        if (self.raw / "tcp_probe.txt").exists():
            text = (self.raw / "tcp_probe.txt").read_text()
            probe_rows = measure.parse_probe(text, mono0, flow_of)
            module_rows = measure.parse_module_events(text, mono0, flow_of)
        qdisc_rows = []
        for node, devs in self.ifindex.items():
            p = self.raw / f"qdiscs-{node}.bin"
            if p.exists():
                qdisc_rows += measure.parse_qdiscs(p, node, devs, t0)
        ping_rows = []
        for p in sorted(self.raw.glob("ping-*.txt")):
            ping_rows += measure.parse_ping(p.read_text(), topo.client(1), topo.server(1), t0,
                                            exp.measure.ping_interval)
        for name, rows in (("flows", flows), ("iperf", iperf_rows), ("ss", ss_rows),
                           ("probe", probe_rows), ("qdisc", qdisc_rows), ("ping", ping_rows),
                           ("changes", self.changes)):
            results.write_table(self.dir, name, rows)
        if exp.hold:
            results.write_table(self.dir, "holds", self.holds)
        for event in exp.measure.events:           # only the tracepoints the spec enabled
            table = MODULE_EVENTS[event]
            results.write_table(self.dir, table, module_rows.get(table, []))
        if self.cpu is not None:
            results.write_table(self.dir, "cpu", [
                {"t": round(e - t0, 3), "cpu": k, "busy_frac": round(v, 4)}
                for e, k, v in list(self.cpu.rows)])
        self.manifest["flows"] = flows
        # did each flow run the congestion control it asked for?
        for fl in flows:
            if fl["protocol"] != "tcp" or fl["t_start"] is None:
                continue
            seen = {c for c in (fl.get("cca_iperf"), *(fl.get("cca_ss") or "").split(",")) if c}
            if not seen:
                self.errors.append(f"flow {fl['flow']}: could not tell which congestion control ran")
            elif seen != {fl["cca"]}:
                self.errors.append(f"flow {fl['flow']} asked for {fl['cca']} but ran "
                                   f"{', '.join(sorted(seen))}")


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
    m = results.read_manifest(d)
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
    for rep in range(1, n + 1):
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
        dirs.append(d)
    if progress:
        progress(f"done: {n} run(s) in {fmt_secs(time.monotonic() - began)}")
    return dirs

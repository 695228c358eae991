"""A run's measurements, one class each.  The runner starts them before its timeline, lets them
settle once the flows are done, stops them once every process has ended, and asks each for its
tables; cclab.measure has the commands they run and the parsers their tables come from.

    Cpu       /proc/stat, the whole guest          cpu.csv
    Sockets   sock_diag inside each sender         ss.csv
    Qdiscs    rtnetlink inside each shaping node   qdisc.csv
    Tracer    tcp:tcp_probe and the modules'       probe.csv, spline.csv, search.csv
              tracepoints, one tracing instance
    Capture   tcpdump at each sender               raw/capture-<host>.pcap (no table)
    Ping      ping from client 1 to server 1       ping.csv
    Iperf     iperf3 servers, and a client per     flows.csv, iperf.csv
              flow when the timeline starts it

The life of one, as the runner drives it:
    start(run)          before t = 0 (Cpu: before the network is built, to see it built)
    settle(run)         the flows are done: wait for what is still on its way (a server's last
                        message, a capture's buffered packets); nothing is stopped yet
    stop(run)           every process has ended: threads stopped, files closed
    tables(run, found)  rows by table name from the raw files; `found` has the clocks, the
                        flow lookup and the tables made before (Iperf's need the sockets')

A measurement's processes are the run's (run.popen, which records how each is stopped: SIGINT
for those that write what they have on it, SIGTERM for the rest); the runner ends them all
between settle and stop.  Problems go to run.errors (the run is incomplete) or run.warnings.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

from . import measure, netlink, topo
from .spec import MODULE_EVENTS, Experiment

# How long Iperf.settle waits, once every client has finished, for the iperf3 servers to receive
# their clients' last control message and write their results.  A lost message costs an RTO,
# doubling on each retry: from 0.2 s on the labs' 40 ms paths (8 s covers five retries) and about
# 1 s on GEO's 600 ms path (three).  Servers that are done cost nothing.
SERVER_GRACE_S = 8.0
# A packet capture is stopped once its file has not grown for CAPTURE_SETTLE_S (tcpdump has
# read what the kernel buffered), waiting at most CAPTURE_WAIT_S.
CAPTURE_SETTLE_S = 0.5
CAPTURE_WAIT_S = 10.0


class MeasurementError(RuntimeError):
    """A measurement the experiment asks for cannot be taken (one line; no flow has started)."""


@dataclass
class Found:
    """What tables() has to go on: the run's clocks, the flow of a socket, earlier tables."""
    t0: float                                   # the timeline's start, epoch seconds
    mono0: float                                # ... on CLOCK_MONOTONIC (the tracer's clock)
    flow_of: object                             # (local port, peer port) -> flow number or None
    rows: dict = field(default_factory=dict)    # table name -> rows, as they are made


class Measurement:
    before_network = False                      # started before the network is built

    def start(self, run) -> None:
        pass

    def settle(self, run) -> None:
        pass

    def stop(self, run) -> None:
        pass

    def tables(self, run, found: Found) -> dict[str, list[dict]]:
        return {}


def senders(exp: Experiment) -> list[str]:
    return sorted({topo.endpoints(f.direction, f.pair)[0] for f in exp.flows})


class Cpu(Measurement):
    """The guest's CPU load, per CPU and "all": the fidelity verdict's headroom check."""
    before_network = True

    def __init__(self, hz: float):
        self.hz = hz
        self.sampler = None

    def start(self, run) -> None:
        from .cpu import CpuSampler
        self.sampler = CpuSampler(hz=self.hz).start()

    def stop(self, run) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def tables(self, run, found: Found) -> dict[str, list[dict]]:
        if self.sampler is None:
            return {}
        return {"cpu": [{"t": round(e - found.t0, 3), "cpu": k, "busy_frac": round(v, 4)}
                        for e, k, v in list(self.sampler.rows)]}


class Tracer(Measurement):
    """tcp_probe and the modules' tracepoints in one private tracing instance.  Without
    tcp_probe the run goes on with a warning; without a module tracepoint it asked for, it
    does not start."""

    def __init__(self, probe: bool, events: list[str]):
        self.probe = probe
        self.events = list(events)
        self.tracer = None

    def start(self, run) -> None:
        exp = run.exp
        asked = (["tcp:tcp_probe"] if self.probe else []) + self.events
        ports = [exp.port(i) for i in range(len(exp.flows))]
        tracer = measure.ProbeTracer(ports, run.raw / "tcp_probe.txt", asked)
        try:
            tracer.start(run.state.set_trace_instance)
        except (OSError, RuntimeError) as e:
            if self.events:
                raise MeasurementError(
                    f"measure.events: cannot trace {', '.join(asked)}: {e}") from None
            run.warnings.append(f"tcp_probe unavailable: {e}")
            return
        self.tracer = tracer
        run.manifest["probe_clock"] = "mono"

    def stop(self, run) -> None:
        if self.tracer is None:
            return
        keep = run.keeping_network()
        try:
            self.tracer.stop(keep=keep)
        except OSError as e:
            run.errors.append(f"tcp_probe: {e}")
            keep = False
        if not keep:
            run.state.set_trace_instance(None)

    def tables(self, run, found: Found) -> dict[str, list[dict]]:
        path = run.raw / "tcp_probe.txt"
        text = path.read_text() if path.exists() else ""
        out = {"probe": measure.parse_probe(text, found.mono0, found.flow_of) if text else []}
        events = measure.parse_module_events(text, found.mono0, found.flow_of) if text else {}
        for event in self.events:               # only the tracepoints the spec enabled
            out[MODULE_EVENTS[event]] = events.get(MODULE_EVENTS[event], [])
        return out


class _Sampler(Measurement):
    """netlink dumps from inside namespaces at a fixed rate, by a thread (netlink.Recorder)."""
    what = ""

    def __init__(self, hz: float):
        self.hz = hz
        self.recorder = None

    def nodes(self, run) -> list[str]:
        raise NotImplementedError

    def start(self, run) -> None:
        self.recorder = netlink.Recorder()
        for node in self.nodes(run):
            self.recorder.add(run.net.node(node).pid, self.what, self.hz,
                              run.raw / f"{self.what}-{node}.bin")
        self.recorder.start()

    def stop(self, run) -> None:
        if self.recorder is not None:
            self.recorder.stop()                # its sockets hold the namespaces open


class Sockets(_Sampler):
    """What `ss -ti` shows of every sending socket (cwnd, RTT, pacing, the modules' info)."""
    what = "sockets"

    def nodes(self, run) -> list[str]:
        return senders(run.exp)

    def tables(self, run, found: Found) -> dict[str, list[dict]]:
        rows = []
        for path in sorted(run.raw.glob("sockets-*.bin")):
            rows += measure.parse_sockets(path, path.stem[len("sockets-"):], found.t0,
                                          found.flow_of)
        return {"ss": rows}


class Qdiscs(_Sampler):
    """What `tc -s qdisc` shows of every shaped interface (backlog, drops), by interface."""
    what = "qdiscs"

    def __init__(self, hz: float):
        super().__init__(hz)
        self.ifindex: dict[str, dict[int, tuple[str, str]]] = {}   # node -> {ifindex: (dev, dir)}

    def nodes(self, run) -> list[str]:
        snap = run.net.snapshot
        for s in topo.shaped(run.exp.link):
            self.ifindex.setdefault(s.node, {})[topo.ifindex_of(snap[s.node], s.dev)] = (
                s.dev, s.direction)
        return sorted(self.ifindex)

    def tables(self, run, found: Found) -> dict[str, list[dict]]:
        rows = []
        for node, devs in self.ifindex.items():
            path = run.raw / f"qdiscs-{node}.bin"
            if path.exists():
                rows += measure.parse_qdiscs(path, node, devs, found.t0)
        return {"qdisc": rows}


class Capture(Measurement):
    """tcpdump at each sender's interface, into raw/capture-<host>.pcap."""

    def __init__(self, snaplen: int):
        self.snaplen = snaplen
        self.files: list[tuple[object, object]] = []      # (pcap path, tcpdump Popen)

    def start(self, run) -> None:
        for h in senders(run.exp):
            path = run.raw / f"capture-{h}.pcap"
            p = run.popen(run.net.node(h), measure.capture(topo.host_dev(h), str(path),
                                                           self.snaplen),
                          f"tcpdump {h}", stop=signal.SIGINT)
            self.files.append((path, p))

    def settle(self, run) -> None:
        """tcpdump reads the kernel's capture buffer behind the traffic, the more so under
        software emulation, and what it has not read when it is stopped is lost (a capture in
        the VM ended 0.5 MB short of its flow).  Before it is stopped, wait until each capture
        file (written packet by packet, -U) has stopped growing for CAPTURE_SETTLE_S, at most
        CAPTURE_WAIT_S."""
        if not run.flows_done():
            return                              # interrupted: the traffic may still flow
        files = [path for path, p in self.files if p.poll() is None]
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
        run.warnings.append(f"packet capture still growing {CAPTURE_WAIT_S:g} s after the flows; "
                            "it may miss the last packets")


class Ping(Measurement):
    """ping from the first client to the first server: the idle RTT, then under load."""

    def __init__(self, interval: float):
        self.interval = interval

    def start(self, run) -> None:
        src, dst = topo.client(1), topo.server(1)
        with open(run.raw / f"ping-{src}.txt", "w") as out:
            run.popen(run.net.node(src), measure.ping(topo.address(dst), self.interval),
                      "ping", stdout=out, stop=signal.SIGINT)

    def tables(self, run, found: Found) -> dict[str, list[dict]]:
        rows = []
        for p in sorted(run.raw.glob("ping-*.txt")):
            rows += measure.parse_ping(p.read_text(), topo.client(1), topo.server(1), found.t0,
                                       self.interval)
        return {"ping": rows}


TCP_LISTEN = "0A"          # the LISTEN state in /proc/net/tcp's st column


def listening_ports(pid: int) -> set[int]:
    """The TCP ports listening in the network namespace of process `pid`, read from
    /proc/<pid>/net/tcp and tcp6 (a node's own tables; reading them starts no process)."""
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == TCP_LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class Iperf(Measurement):
    """The flows themselves: an iperf3 server per flow, listening before t = 0, and a client
    per flow that the timeline starts (start_client).  Its tables say what each flow asked
    for, what ran and what it achieved, and whether it ran the congestion control it asked for."""

    def __init__(self, interval: float):
        self.interval = interval
        self.servers: dict[int, object] = {}                  # flow -> server Popen
        self.clients: dict[int, tuple[object, float]] = {}    # flow -> (client Popen, t_spawn)
        self.handshake_lost: list[int] = []     # UDP flows whose iperf3 gave up unstarted
        # flow -> (the client's (rows, summary), the server's receiver rows), from their JSON
        self.parsed: dict[int, tuple] = {}

    def start(self, run, listen_timeout: float = 10.0) -> None:
        exp = run.exp
        waiting: dict[str, set[int]] = {}
        for i, f in enumerate(exp.flows):
            receiver = topo.endpoints(f.direction, f.pair)[1]
            with open(run.raw / f"iperf-server-{i + 1}.json", "w") as out:
                self.servers[i + 1] = run.popen(
                    run.net.node(receiver), measure.iperf_server(exp.port(i), self.interval),
                    f"iperf3 server {i + 1}", stdout=out)
            waiting.setdefault(receiver, set()).add(exp.port(i))
        # until every server listens: each round reads the listening ports of each node that
        # still waits from its own socket tables (an `ss` per node and round cost about 0.4 s a
        # run under software emulation; the files cost no process)
        deadline = time.monotonic() + listen_timeout
        while waiting:
            for host in sorted(waiting):
                waiting[host] -= listening_ports(run.net.node(host).pid)
                if not waiting[host]:
                    del waiting[host]
            if not waiting:
                return
            if time.monotonic() >= deadline:
                host = sorted(waiting)[0]
                raise MeasurementError(f"iperf3 server on {host}:{min(waiting[host])} did not start")
            time.sleep(0.02)

    def start_client(self, run, i: int, connect_timeout: float) -> None:
        """Flow i's client (0-based), now."""
        exp = run.exp
        f = exp.flows[i]
        sender, receiver = topo.endpoints(f.direction, f.pair)
        t = run.now()
        with open(run.raw / f"iperf-{i + 1}.json", "w") as out:
            p = run.popen(run.net.node(sender), measure.iperf_client(
                f, topo.address(receiver), exp.port(i), self.interval,
                connect_timeout=connect_timeout), f"iperf3 client {i + 1}", stdout=out,
                stop=signal.SIGINT)             # iperf3 writes its JSON on SIGINT
        self.clients[i + 1] = (p, t)

    def done(self, flows: int) -> bool:
        """Every one of `flows` clients started and ended."""
        return len(self.clients) == flows and \
            all(p.poll() is not None for p, _ in self.clients.values())

    def settle(self, run) -> None:
        """An iperf3 server (-1) writes its JSON -- the receiver's intervals -- and exits once its
        client's final control message arrives, which loss on the link can hold back by an RTO
        or more after the client is done.  When every client has finished, wait up to
        SERVER_GRACE_S (or the path's patience) for the servers; one still running then is
        killed, which loses its intervals, so that is an error of the run."""
        if not run.flows_done():
            return                              # interrupted or failed: no waiting
        # a server whose client failed never hears from it: no waiting for that one (the
        # client's failure is the run's error)
        waited = [(i, p) for i, p in sorted(self.servers.items())
                  if i in self.clients and self.clients[i][0].returncode == 0]
        grace = max(SERVER_GRACE_S, run.patience)
        deadline = time.monotonic() + grace
        while any(p.poll() is None for _, p in waited) and time.monotonic() < deadline:
            time.sleep(0.05)
        late = [f"iperf3 server {i}" for i, p in waited if p.poll() is None]
        if late:
            run.errors.append(f"{', '.join(late)} still waiting for the client's last message "
                              f"{grace:.1f} s after every client finished; killed, so the "
                              "receiver's intervals of those flows are lost (a longer `tail` helps)")

    def flow_lookup(self, run):
        """Read each client's JSON for its sockets' local ports: (local, peer) -> flow."""
        local_ports = {}
        for i in range(1, len(run.exp.flows) + 1):
            client = measure.parse_iperf(measure.read_json(run.raw / f"iperf-{i}.json"), i, 0.0)
            server, _ = measure.parse_iperf(
                measure.read_json(run.raw / f"iperf-server-{i}.json"), i, 0.0)
            self.parsed[i] = client, [r for r in server if r["side"] == "receiver"]
            local_ports[i] = [p for p in client[1].pop("local_ports") if p]
        return measure.flow_lookup(run.exp, local_ports)

    def tables(self, run, found: Found) -> dict[str, list[dict]]:
        exp = run.exp
        ss_rows = found.rows.get("ss", [])
        period = 1 / exp.measure.ss_hz if exp.measure.ss_hz else 0.0
        flows, iperf_rows = [], []
        for i, f in enumerate(exp.flows, 1):
            sender, receiver = topo.endpoints(f.direction, f.pair)
            proc, t_spawn = self.clients.get(i, (None, None))
            (rows, summ), server_rows = self.parsed[i]
            # iperf3's intervals count from its test start, which comes after every connection
            # is up: place them there, not at the client's spawn (measure.test_start)
            start = None if t_spawn is None else measure.test_start(ss_rows, i, t_spawn, period)
            ran = max((r["t_end"] for r in rows), default=0.0)     # the client's own intervals
            iperf_rows += [dict(r, t_start=round(r["t_start"] + (start or 0.0), 6),
                                t_end=round(r["t_end"] + (start or 0.0), 6))
                           for r in rows + server_rows]
            err = summ.pop("error")
            if err:
                run.errors.append(f"flow {i}: iperf3: {err}")
                if f.protocol == "udp" and measure.udp_never_started(
                        measure.read_json(run.raw / f"iperf-{i}.json")):
                    self.handshake_lost.append(i)
            flows.append({"flow": i, "cca": f.cca, "direction": f.direction, "pair": f.pair,
                          "sender": sender, "receiver": receiver, "port": exp.port(i - 1),
                          "protocol": f.protocol, "streams": f.streams, "start": f.start,
                          "duration": f.duration, "bytes_requested": f.bytes,
                          "t_spawn": None if t_spawn is None else round(t_spawn, 6),
                          "t_start": None if start is None else round(start, 6),
                          "t_end": None if start is None else round(start + ran, 6),
                          "exit_code": proc.returncode if proc else None, **summ})
        run.warnings += measure.overlaps(flows)
        for fl in flows:
            # The congestion control that carried the flow's data: iperf3 -C sets it once the
            # connection is up and its cookie written, so a sample taken before then may show
            # the host's default; such a socket has sent no more than the cookie and does not
            # count (a sample between the cookie and the switch failed a VM test once).
            ccs = {r.get("cca") for r in ss_rows if r["flow"] == fl["flow"] and r.get("cca")
                   and measure.sent_payload(r)}
            fl["cca_ss"] = ",".join(sorted(ccs)) if ccs else None
        # did each flow run the congestion control it asked for?
        for fl in flows:
            if fl["protocol"] != "tcp" or fl["t_start"] is None:
                continue
            seen = {c for c in (fl.get("cca_iperf"), *(fl.get("cca_ss") or "").split(",")) if c}
            if not seen:
                run.errors.append(f"flow {fl['flow']}: could not tell which congestion control ran")
            elif seen != {fl["cca"]}:
                run.errors.append(f"flow {fl['flow']} asked for {fl['cca']} but ran "
                                  f"{', '.join(sorted(seen))}")
        return {"flows": flows, "iperf": iperf_rows}


def chosen(exp: Experiment) -> list[Measurement]:
    """The experiment's measurements, in the order they start (and are stopped), Iperf last."""
    m = exp.measure
    out: list[Measurement] = []
    if m.cpu:
        out.append(Cpu(m.cpu_hz))
    if m.ss:
        out.append(Sockets(m.ss_hz))
    if m.qdisc:
        out.append(Qdiscs(m.qdisc_hz))
    # after the samplers: its stop formats the whole run's events, which may take a while, and
    # the samplers are stopped before that, with the flows' processes
    if m.tcp_probe or m.events:
        out.append(Tracer(m.tcp_probe, list(m.events)))
    if m.capture:
        out.append(Capture(m.snaplen))
    if m.ping:
        out.append(Ping(m.ping_interval))
    out.append(Iperf(m.iperf_interval))
    return out

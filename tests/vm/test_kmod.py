"""The kit's kernel modules (kmod/) on the lab VM: build, load, choose per socket, behave.

Runs inside the lab VM as root (vm/run.sh -- pytest tests/vm/test_kmod.py), on the image's
default kernel (6.1, make vm-test) and on its second one (6.12, make vm-test-kernel2, which boots
vm/run.sh --kernel 6.12): every test asks the running kernel (uname -r), none assumes a series.

1. kmod/ builds with W=1 and no warning against the running kernel's headers (the host's build
   for this release when make kmod-build kept one from the same sources), DKMS has
   installed both modules for the running kernel, and both load (modprobe, or insmod of the
   fresh build).
2. Both appear in tcp_available_congestion_control, their parameters refuse bad values (and
   a Spline switch set before a connection changes it), their tracepoints exist, and iperf3 -C picks them per socket: ss shows the name and the
   BBR-style info block of each module on the data socket.
3. Flows over 10 Mbit/s, 50 ms one way and 2 % loss on the data direction.
4. GEO: 50 Mbit/s, 300 ms each way (600 ms RTT), a deep buffer. SEARCH must leave slow start
   (search:search_exit with reason=search) before its first retransmission in at least 4 of
   5 runs; Cubic without HyStart runs into loss. Exit times and retransmissions are printed.
   ACK stall: 50 Mbit/s x 200 ms, the ACK path held for 4 RTT in mid slow start; with
   stall_bins=0 (the paper) at least one of 2 runs leaves slow start by SEARCH below the BDP,
   with stall_bins=3 every run leaves it by SEARCH at or above the BDP.
   Both are marked nightly: make test-guest leaves them out on either kernel, and make test's
   student's journey checks the same two behaviours in lab 4's runs, made in the browser as the lab user
   on the default kernel (tests/student: test_lab4s_geo_runs_show_search_leaving_before_loss,
   test_lab4s_ack_stall_shows_both_rules).  make test-nightly runs them here on both kernels
   (make vm-test-long on 6.1, make vm-test-kernel2-long on 6.12): 218 s of the in-VM suite's
   1,123 s in the 2026-11-30 CI run.
5. Stress: 5 s RTT (a flow of each module, side by side), 50 % loss, 20 parallel flows, rmmod refused while a flow uses a module,
   rmmod of idle modules; afterwards dmesg has gained no WARN, BUG, oops or UBSAN line. One
   emulator artefact is reported apart and does not fail: see emulator_artefact().
   The three stress tests are marked stress: make test-guest runs them on the default kernel, the one
   the student's VM boots, and leaves them out on 6.12 (make vm-test-kernel2), where the other
   module tests and the dmesg check still run; make vm-test-kernel2-long runs them there.
"""
import contextlib
import glob
import os
import re
import shutil
import subprocess
import threading
import time
from warnings import warn

import pytest

import netns
from netns import ns, sh

KIT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KMOD_SRC = os.path.join(KIT, "kmod")
MODULES = {"tcp_spline": "spline", "tcp_search": "search"}
TRACEFS = "/sys/kernel/tracing"
AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"
BAD_DMESG = re.compile(r"WARNING:|\bBUG\b|Oops|UBSAN|general protection|Call Trace|refcount_t")
# A finding's trace: its line and those after it, up to the kernel's end-of-trace line (a 6.12
# warning taken in an exception prints two stacks, the exception's and the task's: 50-60 lines).
TRACE_LINES = 80
END_OF_TRACE = "---[ end trace"


def _module_functions():
    """The functions our modules define (kmod/tcp_*.c and the cores they include)."""
    names = set()
    for f in glob.glob(os.path.join(KMOD_SRC, "tcp_*.c")) + glob.glob(os.path.join(KMOD_SRC, "*_core.h")):
        with open(f) as fh:
            names |= set(re.findall(r"^(?:static\b[^;=(]*?\b)?([a-z_]\w*)\([^;]*$", fh.read(), re.M))
    return frozenset(names)


OUR_NAMES = _module_functions() | set(MODULES)
# 6.12's exc_debug_kernel() warns on a single-step #DB taken in the kernel (DR6.BS) when the
# kernel set no trap flag; its own comment names QEMU leaking a #DB into the guest as a cause,
# and QEMU 7.2's software emulation (TCG) of TF/RF single-stepping had several later fixes.
# One 6.12 run in four under TCG, with no kprobes, ptrace or debugger in the kit, met it.
DB_ARTEFACT = re.compile(r"\bWARNING: CPU: \d+ PID: \d+ at arch/x86/kernel/traps\.c:1120 "
                         r"exc_debug_kernel\+0x[0-9a-f]+/0x[0-9a-f]+$")


def trace_of(lines):
    """A finding's lines (the finding first) up to and with the kernel's end-of-trace line."""
    for n, line in enumerate(lines[:TRACE_LINES]):
        if n and END_OF_TRACE in line:
            return lines[:n + 1]
    return lines[:TRACE_LINES]


def emulator_artefact(finding_lines, release, accel):
    """Why the dmesg finding `finding_lines` (its line, then the lines after it) is QEMU's and
    not the kernel's or our modules', or None: only 6.12's warning on a stray single-step #DB
    (DB_ARTEFACT, exactly), on a 6.12 kernel, in a guest under TCG (`accel`, vm/run.sh's
    CCLAB_VM_ACCEL), with its whole trace in view, no other report inside it, and no line of
    it naming our modules or their functions (but the list of loaded modules, which always
    names them: a frame in a module says [tcp_spline] or [tcp_search])."""
    if accel != "tcg" or not release.startswith("6.12.") or not finding_lines:
        return None
    if not DB_ARTEFACT.search(finding_lines[0].rstrip()):
        return None
    trace = trace_of(finding_lines)
    if END_OF_TRACE not in trace[-1] or len(trace) < 2:
        return None
    for line in trace[1:]:
        if BAD_DMESG.search(line) and not line.rstrip().endswith("Call Trace:"):
            return None
    for line in trace:
        if "Modules linked in:" in line:
            continue
        ours = OUR_NAMES.intersection(re.findall(r"[A-Za-z_]\w*", line))
        if ours:
            return None
    return (f"a single-step #DB the kernel did not ask for (traps.c:1120, exc_debug_kernel) on "
            f"{release} under QEMU's software emulation (TCG), no line of its trace in "
            f"{', '.join(sorted(MODULES))}: QEMU's TF/RF single-step emulation, not our modules")

# GEO link: 50 Mbit/s, 300 ms each way.  One BDP is 3.75 MB = 2590 segments.  SEARCH judges
# delivery over 3.5 initial RTTs, so with an unpaced slow start it fires once the queue holds
# several BDPs (the kit's host harness and the paper's GEO runs agree); the buffer is 8 BDPs,
# which a slow start without an exit test still overflows.
GEO_RATE = "50mbit"
GEO_DELAY = "300ms"
GEO_BDP_PKTS = 2590
GEO_BUF_PKTS = 8 * GEO_BDP_PKTS
GEO_RUNS = 5
GEO_SECONDS = 12
CUBIC_GEO_SECONDS = 32


def loaded(mod):
    return os.path.isdir(f"/sys/module/{mod}")


def available():
    with open(AVAILABLE) as f:
        return set(f.read().split())


def dmesg_lines():
    return sh("dmesg").stdout.splitlines()


class Path(netns.Path):
    """Sender (10.77.1.1) - router - receiver (10.77.2.1), each in its own namespace, with an
    iperf3 server on the receiver.  Data leaves the router on 'r-rcv', ACKs on 'r-snd'."""

    PREFIX = "kmod"
    NET = "10.77"
    # 256 MiB maxima (>= 64 MiB): a GEO slow start into a 9-BDP pipe needs a 34 MB window,
    # i.e. a send buffer of twice that; a large default receive buffer so the receive window
    # never limits it; no cached ssthresh
    RMEM = "4096 134217728 268435456"
    WMEM = "4096 16384 268435456"
    EXTRA_SYSCTLS = ("net.ipv4.tcp_no_metrics_save=1",)
    SINGLE_RX_CPU = True

    def _build(self):
        super()._build()
        self.spawn(self.rcv, "iperf3", "-s")
        self.listening()

    def data_sockets(self, port=5201):
        """The sender's sockets towards iperf3 on the receiver: (head, info) line pairs."""
        return [(s["head"], " ".join(s["info"])) for s in self.sockets(self.snd, port)
                if s["info"] and f"{self.rcv_ip}:{port}" in s["head"]]


class SsWatcher:
    """Samples ss on the sender every 0.3 s (its sockets towards the receiver's `port`);
    remembers, per socket, its cc tokens and info."""

    def __init__(self, path, names, port=5201):
        self.path, self.names, self.port = path, set(names), port
        self.seen = {}          # local port -> dict(ccs=set, bytes_acked=int, info=str)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for head, info in self.path.data_sockets(self.port):
                lport = head.split()[3].rsplit(":", 1)[-1]
                rec = self.seen.setdefault(lport, {"ccs": set(), "bytes_acked": 0, "info": ""})
                m = re.search(r"bytes_acked:(\d+)", info)
                if not m and not rec["bytes_acked"]:
                    rec["ccs"] = {t for t in info.split() if t in self.names}
                # Only an open socket carries the module's info block: the kernel asks the
                # module for it below TIME-WAIT, and once the receiver has closed (the test's
                # end) the sender's socket is in CLOSE-WAIT with the same bytes_acked.
                if m and head.split()[0] == "ESTAB" and int(m.group(1)) >= rec["bytes_acked"]:
                    # the algorithm the socket runs now (iperf3 may switch it
                    # only after connect(), so early samples can name the default)
                    rec["bytes_acked"] = int(m.group(1))
                    rec["info"] = info
                    rec["ccs"] = {t for t in info.split() if t in self.names}
            time.sleep(0.3)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        return False

    def busiest(self):
        """The socket that carried the most data (iperf3's data connection)."""
        if not self.seen:
            return {"ccs": set(), "bytes_acked": 0, "info": ""}
        # a snapshot: the sampling thread may add sockets meanwhile
        return max(list(self.seen.values()), key=lambda r: r["bytes_acked"])


def tracing_on(events):
    if not os.path.isdir(os.path.join(TRACEFS, "events")):
        sh("mount", "-t", "tracefs", "nodev", TRACEFS, check=False)
    for ev in events:
        with open(os.path.join(TRACEFS, "events", ev, "enable"), "w") as f:
            f.write("1")
    with open(os.path.join(TRACEFS, "trace"), "w") as f:
        f.write("")             # clear the buffer


def trace_lines(event):
    with open(os.path.join(TRACEFS, "trace")) as f:
        return [line for line in f if f" {event}:" in line]


def parse_kv(line):
    return dict(re.findall(r"(\w+)=(-?\w+)", line.split(": ", 2)[-1]))


def load_modules(build_dir=None):
    """Load both modules: from DKMS via modprobe, or from @build_dir via insmod."""
    for mod in MODULES:
        if loaded(mod):
            continue
        if build_dir:
            sh("insmod", os.path.join(build_dir, f"{mod}.ko"))
        else:
            sh("modprobe", mod)


def unload(mod, tries=60):
    """rmmod, retrying while sockets that just closed still hold a reference."""
    r = None
    for _ in range(tries):
        r = sh("rmmod", mod, check=False)
        if r.returncode == 0 or not loaded(mod):
            return True
        time.sleep(0.5)
    return False


def sources_sha256():
    """`sha256sum Kbuild *.c *.h` of kmod/ (C collation), as kmod/Makefile's KEEP writes it."""
    import hashlib
    names = ["Kbuild"] + sorted(os.path.basename(f) for f in glob.glob(os.path.join(KMOD_SRC, "*.c")))
    names += sorted(os.path.basename(f) for f in glob.glob(os.path.join(KMOD_SRC, "*.h")))
    lines = []
    for n in names:
        with open(os.path.join(KMOD_SRC, n), "rb") as f:
            lines.append(f"{hashlib.sha256(f.read()).hexdigest()}  {n}\n")
    return "".join(lines)


def host_built(release):
    """The host's W=1 objects for this kernel (make kmod-build keeps them in build/kmod/<release>/)
    when they were built from the sources in this checkout, else None."""
    kept = os.path.join(KIT, "build", "kmod", release)
    try:
        with open(os.path.join(kept, "sources.sha256")) as f:
            same = f.read() == sources_sha256()
    except OSError:
        return None
    if not same or not all(os.path.exists(os.path.join(kept, f"{m}.ko")) for m in MODULES):
        return None
    return kept


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory, dmesg_start):
    """Both modules built with W=1 and no warning against this kernel's headers, in a copy (the
    checkout stays clean): the host's build for this very release from the same sources when
    `make kmod-build` kept one (the guest's headers are the same package, and compiling again
    under software emulation takes 1.5-2.5 min), else a fresh build here."""
    work = tmp_path_factory.mktemp("kmod")
    release = os.uname().release
    kept = host_built(release)
    if kept is not None:
        with open(os.path.join(kept, "build.log")) as f:
            log = f.read()
        warnings = [line for line in log.splitlines() if "warning:" in line]
        assert not warnings, "\n".join(warnings)
        for m in MODULES:
            shutil.copy(os.path.join(kept, f"{m}.ko"), work)
            info = sh("modinfo", "-F", "vermagic", os.path.join(work, f"{m}.ko")).stdout
            assert info.split()[0] == release, f"{m}.ko vermagic {info.strip()!r}, kernel {release}"
        print(f"\n[kmod] the host's W=1 build for {release} from these sources: {kept}")
        return str(work)
    for f in glob.glob(os.path.join(KMOD_SRC, "*.[ch]")) + [os.path.join(KMOD_SRC, "Kbuild")]:
        shutil.copy(f, work)
    kdir = f"/lib/modules/{release}/build"
    r = sh("make", "-C", kdir, f"M={work}", "W=1", "modules", check=False, timeout=900)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-3000:]
    warnings = [line for line in log.splitlines() if "warning:" in line]
    assert not warnings, "\n".join(warnings)
    return str(work)


@pytest.fixture(scope="module")
def dmesg_start():
    return len(dmesg_lines())


@pytest.fixture
def mods(build_dir, dmesg_start):
    """Both modules loaded (DKMS ones if installed, else the fresh build)."""
    try:
        load_modules()
    except subprocess.CalledProcessError:
        load_modules(build_dir)
    assert {"spline", "search"} <= available()
    return build_dir


@pytest.fixture
def path():
    with Path() as p:
        yield p


# ---------------------------------------------------------------------------------------------


def test_build_is_warning_free(build_dir):
    for mod in MODULES:
        assert os.path.exists(os.path.join(build_dir, f"{mod}.ko"))


def test_dkms_installed_both_modules():
    release = os.uname().release
    status = sh("dkms", "status", "cclab-tcp", check=False).stdout
    # one line per kernel: "cclab-tcp/0.1, <release>, x86_64: installed"
    mine = [line for line in status.splitlines() if f", {release}," in line]
    assert mine and all(": installed" in line for line in mine), \
        f"dkms status for {release}: {status!r}"
    for mod in MODULES:
        where = sh("modinfo", "-n", mod).stdout.strip()
        assert f"/modules/{release}/updates/dkms/" in where, where


def test_provisioning_keeps_modules_built_from_the_same_sources_and_rebuilds_edited_ones(tmp_path):
    """vm/provision.sh builds the modules with DKMS only when kmod_current says DKMS lacks the
    checkout's sources built and installed for the kernel (test-vagrant sees vagrant up keep the
    box's modules).  The check, run here against the image's DKMS: current for this checkout's
    sources, not current for a copy with one line changed."""
    release = os.uname().release
    # the package's name and version from the checkout's dkms.conf, as provisioning takes them
    check = ('. "$KIT/vm/kmod-dkms.sh"; set -e; pkg=$(kmod_package "$KIT/kmod/dkms.conf"); '
             'name=${pkg% *}; ver=${pkg#* }; '
             'kmod_current "$2/kmod" "$name" "$ver" "$1" "/usr/src/$name-$ver"')

    def current(kit):
        return subprocess.run(["bash", "-c", check, "-", release, kit], capture_output=True,
                              text=True, env={**os.environ, "KIT": KIT}, timeout=120).returncode
    assert current(KIT) == 0
    edited = tmp_path / "kit"
    shutil.copytree(os.path.join(KIT, "kmod"), edited / "kmod")
    with open(edited / "kmod" / "tcp_search.c", "a") as f:
        f.write("/* edited */\n")
    assert current(str(edited)) == 1


def test_fresh_build_loads_and_registers(build_dir, dmesg_start):
    for mod in MODULES:
        if loaded(mod):
            assert unload(mod), f"{mod} busy"
    load_modules(build_dir)
    names = available()
    for mod, name in MODULES.items():
        assert loaded(mod)
        assert name in names
    # modprobe (DKMS) path again, for the rest of the tests
    for mod in MODULES:
        assert unload(mod)
    try:
        load_modules()
    except subprocess.CalledProcessError:
        load_modules(build_dir)
    assert {"spline", "search"} <= available()


def test_search_parameters_are_validated(mods):
    base = "/sys/module/tcp_search/parameters"
    cases = {"window_bins": ("0", "1000000", "12", "10"),
             "extra_bins": ("0", "99", "14", "15"),
             "window_factor": ("0", "4294967295", "40", "35"),
             "thresh": ("0", "1001", "250", "350")}
    for param, (zero, huge, good, default) in cases.items():
        p = os.path.join(base, param)
        with open(p) as f:
            assert f.read().strip() == default
        for bad in (zero, huge, "abc"):
            with pytest.raises(OSError):
                with open(p, "w") as f:
                    f.write(bad)
            with open(p) as f:
                assert f.read().strip() == default, f"{param} changed by {bad!r}"
        with open(p, "w") as f:
            f.write(good)
        with open(p) as f:
            assert f.read().strip() == good
        with open(p, "w") as f:
            f.write(default)
    with open(os.path.join(base, "hystart")) as f:
        assert f.read().strip() == "N"
    # The SEARCH values are also checked as a set: each of these is inside its own range but
    # makes an invalid set with the defaults (search_params_check() in search_core.h).
    with open(os.path.join(base, "stall_bins")) as f:
        assert f.read().strip() == "0"
    for param, bad in (("window_bins", "24"), ("extra_bins", "4"), ("thresh", "99"),
                       ("window_factor", "5"), ("stall_bins", "2"), ("stall_bins", "64")):
        p = os.path.join(base, param)
        with open(p) as f:
            before = f.read().strip()
        with pytest.raises(OSError):
            with open(p, "w") as f:
                f.write(bad)
        with open(p) as f:
            assert f.read().strip() == before, f"{param} changed by {bad!r}"
    p = os.path.join(base, "stall_bins")
    for v in ("3", "0"):
        with open(p, "w") as f:
            f.write(v)
        with open(p) as f:
            assert f.read().strip() == v


SPLINE_SWITCHES = {"recovery_growth": "N", "loss_cut": "Y", "drain_test": "Y", "fairness_yield": "Y",
                   "queue_probe_rtt": "Y", "published_floor": "N", "pacing_up_only": "N"}


def _spline_param(name, value=None):
    p = os.path.join("/sys/module/tcp_spline/parameters", name)
    if value is not None:
        with open(p, "w") as f:
            f.write(value)
    with open(p) as f:
        return f.read().strip()


def test_spline_switches_are_validated_and_reach_new_connections(mods, path):
    """Lab 3's ablation switches: defaults are the model, the kernel refuses a non-boolean, and
    a switch set before a connection changes that connection (the published floor: no window
    the mode tracepoint reports falls below 10 segments, where the model's falls to its 4)."""
    for name, default in SPLINE_SWITCHES.items():
        assert _spline_param(name) == default, name
        for bad in ("maybe", "2", "-1"):
            with pytest.raises(OSError):
                _spline_param(name, bad)
            assert _spline_param(name) == default, f"{name} changed by {bad!r}"
    path.shape(["rate", "20mbit", "delay", "20ms", "loss", "20%", "limit", "1000"])
    lowest = {}
    for floor in ("N", "Y"):
        try:
            assert _spline_param("published_floor", floor) == floor
            tracing_on(["spline/spline_mode"])
            data = path.iperf3("-C", "spline", "-t", "6")
        finally:
            _spline_param("published_floor", "N")
        assert "error" not in data, data.get("error")
        # this run's data connection only: the one before it may still be closing through the
        # 20 % loss, emitting events with its own (other) floor (6.12 in ci30: floor=Y read 4)
        port = str(data["start"]["connected"][0]["local_port"])
        events = [parse_kv(line) for line in trace_lines("spline_mode")]
        cwnds = [int(e["cwnd"]) for e in events if e.get("sport") == port]
        others = len(events) - len(cwnds)
        assert cwnds, f"no spline:spline_mode event of port {port} ({others} of other ports)"
        lowest[floor] = min(cwnds)
        print(f"\n  published_floor={floor}: {len(cwnds)} mode changes of port {port}, lowest cwnd "
              f"{lowest[floor]} ({others} events of other connections left out)")
    assert lowest["Y"] >= 10 and lowest["N"] < 10, lowest


def test_tracepoints_exist(mods):
    tracing_on([])
    for ev in ("spline/spline_mode", "search/search_exit"):
        assert os.path.isdir(os.path.join(TRACEFS, "events", ev)), ev


@pytest.mark.parametrize("cca", ["spline", "search"])
def test_lossy_10mbit(mods, path, cca):
    path.shape(["rate", "10mbit", "delay", "50ms", "loss", "2%", "limit", "1000"])
    tracing_on(["spline/spline_mode", "search/search_exit"])
    with SsWatcher(path, available()) as w:
        data = path.iperf3("-C", cca, "-t", "8")
    assert "error" not in data, data.get("error")
    sock = w.busiest()
    assert sock["ccs"] == {cca}, sock
    mbps = data["end"]["sum_received"]["bits_per_second"] / 1e6
    retrans = data["end"]["sum_sent"].get("retransmits", 0)
    print(f"\n  {cca} 10mbit/50ms/2%: {mbps:.2f} Mbit/s, {retrans} retransmissions")
    print(f"  ss: {sock['info'][:300]}")
    assert mbps > 0.5
    assert retrans > 0          # the loss really is on the data direction
    m = re.search(r"bbr:\(bw:\S+?,mrtt:([\d.]+)(?:,pacing_gain:([\d.]+))?(?:,cwnd_gain:([\d.]+))?\)",
                  sock["info"])
    assert m, "ss shows no module info block"
    assert float(m.group(1)) >= 45      # min RTT ~ 50 ms (delay on the data direction)
    if cca == "spline":
        assert m.group(2) and int(float(m.group(2))) in (1, 2, 3, 4), "mode"
        modes = trace_lines("spline_mode")
        assert modes, "no spline:spline_mode event"
        print(f"  {len(modes)} mode changes, first: {modes[0].strip()[:200]}")
    else:
        assert m.group(3) and int(float(m.group(3))) in (1, 2, 3, 4), "state"


def test_rmmod_refused_while_in_use_then_idle_works(mods, path):
    path.shape(["rate", "10mbit", "delay", "10ms", "limit", "1000"])
    path.spawn(path.rcv, "iperf3", "-s", "-p", "5202")     # one server per flow
    path.listening(5202)                                   # 5201's: Path._build waits for it
    flows = {mod: path.spawn(path.snd, "iperf3", "-c", path.rcv_ip, "-p", str(port),
                             "-C", name, "-t", "60")
             for port, (mod, name) in zip((5201, 5202), MODULES.items())}
    try:
        deadline = time.time() + 20
        tokens = []
        while time.time() < deadline:
            tokens = " ".join(info for port in (5201, 5202)
                              for _, info in path.data_sockets(port)).split()
            if "spline" in tokens and "search" in tokens:
                break
            time.sleep(0.3)
        assert "spline" in tokens and "search" in tokens, "flows did not start"
        for mod in MODULES:
            r = sh("rmmod", mod, check=False)
            assert r.returncode != 0, f"rmmod {mod} succeeded while a flow used it"
            assert loaded(mod)
    finally:
        for p in flows.values():
            p.kill()
            p.wait()
    # the flows are gone: both modules unload, then load again
    for mod in MODULES:
        assert unload(mod, tries=40), f"rmmod {mod} failed when idle"
        assert not loaded(mod)
    assert not {"spline", "search"} & available()
    try:
        load_modules()
    except subprocess.CalledProcessError:
        load_modules(mods)
    assert {"spline", "search"} <= available()


def _geo_path(p):
    p.shape(["delay", GEO_DELAY, "rate", GEO_RATE,
             "limit", str(GEO_BUF_PKTS + GEO_BDP_PKTS // 2 + 1000)],
            ["delay", GEO_DELAY, "limit", "100000"])


def _first_retrans_time(data):
    """Start of the first iperf3 interval with a retransmission, or None."""
    for iv in data.get("intervals", []):
        s = iv["sum"]
        if s.get("retransmits", 0) > 0:
            return s["start"]
    return None


@pytest.mark.nightly
def test_geo_search_exits_before_loss_cubic_does_not(mods):
    with open("/sys/module/tcp_cubic/parameters/hystart") as f:
        hystart_before = f.read().strip()
    results = []
    try:
        with Path() as p:
            _geo_path(p)
            for run in range(GEO_RUNS):
                tracing_on(["search/search_exit"])
                data = p.iperf3("-C", "search", "-t", str(GEO_SECONDS), "-i", "0.5",
                                timeout=GEO_SECONDS + 60)
                assert "error" not in data, data.get("error")
                exits = [parse_kv(x) for x in trace_lines("search_exit")]
                exits = [e for e in exits if e.get("dport") == "5201" and int(e["cwnd"]) > 100]
                first_rtx = _first_retrans_time(data)
                retrans = data["end"]["sum_sent"].get("retransmits", 0)
                ex = exits[0] if exits else {}
                t_exit = int(ex.get("elapsed_us", 0)) / 1e6 if ex else None
                ok = (ex.get("reason") == "search" and
                      (first_rtx is None or t_exit is None or t_exit <= first_rtx + 0.5))
                results.append(ok)
                print(f"\n  search run {run + 1}: exit reason={ex.get('reason')} "
                      f"t={t_exit} s cwnd={ex.get('cwnd')} norm_diff={ex.get('norm_diff')} "
                      f"first retransmission at {first_rtx} s, {retrans} retransmissions "
                      f"-> {'before loss' if ok else 'NOT before loss'}")
            with open("/sys/module/tcp_cubic/parameters/hystart", "w") as f:
                f.write("0")
            # With an 8-BDP buffer the queueing delay reaches seconds before the buffer
            # overflows, and the loss is seen only one (inflated) RTT later: Cubic needs
            # about 25 s on this path before its first retransmission.
            data = p.iperf3("-C", "cubic", "-t", str(CUBIC_GEO_SECONDS), "-i", "0.5",
                            timeout=CUBIC_GEO_SECONDS + 60)
            assert "error" not in data, data.get("error")
            cubic_rtx = data["end"]["sum_sent"].get("retransmits", 0)
            print(f"  cubic (hystart=0): first retransmission at {_first_retrans_time(data)} s, "
                  f"{cubic_rtx} retransmissions")
    finally:
        with open("/sys/module/tcp_cubic/parameters/hystart", "w") as f:
            f.write(hystart_before)
    assert sum(results) >= 4, f"SEARCH exited before loss in only {sum(results)} of {GEO_RUNS}"
    assert cubic_rtx > 0, "Cubic without HyStart did not overshoot"


# ACK-stall experiment: 50 Mbit/s, 100 ms each way (BDP 863 segments), a deep buffer.  Once the
# data socket's cwnd reaches STALL_TRIGGER_CWND (about 4.5 RTT into slow start, when SEARCH has
# history), the receiver's egress (ACKs only) is held for STALL_SECONDS (4 RTT) by a plug qdisc
# and then released at once.  With stall_bins=0 (the paper: no reset) the first check after the
# stall compares a window holding the released burst with one that mostly does not, and SEARCH
# leaves slow start far below the BDP (the host harness's packet model, search_pk_vm_stall:
# 0.19-0.28 BDP for stalls that start at cwnd 160-245, none outside that range; in the VM,
# where the stall starts when ss first shows the trigger, 0.57-0.74 BDP).  With
# stall_bins=3 the measurement restarts after the stall and SEARCH exits only once the BDP is
# reached.  The sender's route sets rto_min above the stall: a 4-RTT silence is longer than
# Linux's RTO on a steady 200 ms path (about 2 RTT), and a retransmission timeout during the
# stall would end slow start by loss (reason=loss) before SEARCH sees the released ACKs, so
# the run would say nothing about SEARCH (without it, 2 of 3 runs with stall_bins=0 and 1 of 3
# with stall_bins=3 ended so in one check).
STALL_RATE = "50mbit"
STALL_DELAY = "100ms"
STALL_BDP_PKTS = 863
STALL_TRIGGER_CWND = 180
STALL_SECONDS = 0.8
STALL_RUNS = 2
STALL_TRIES_PAPER = 4
# A late-seen stall still shows the paper's rule leaving early against the reset rule's exit
# (runs in the lab VM: 1.48 against 9.22 BDP, 2.18 against 6.4; the reset rule's lowest exit
# in every run so far: 6.15 BDP).
STALL_EARLY_RATIO = 0.5
STALL_RTO_MIN = "3s"


def _plug(p, action):
    ns(p.rcv, "tc", "qdisc", "change", "dev", "c0", "root", "plug", action)


def _stall_run(p, stall_bins):
    """One iperf3 flow with an ACK stall; returns (exit reason, exit cwnd) of its data socket."""
    with open("/sys/module/tcp_search/parameters/stall_bins", "w") as f:
        f.write(str(stall_bins))
    tracing_on(["search/search_exit"])
    result = {}
    t = threading.Thread(target=lambda: result.update(
        data=p.iperf3("-C", "search", "-t", "6", timeout=60)))
    t.start()
    lport, deadline = None, time.monotonic() + 10
    try:
        while time.monotonic() < deadline and t.is_alive():
            best = (0, None)
            for head, info in p.data_sockets():
                m = re.search(r"\bcwnd:(\d+)", info)
                if m and int(m.group(1)) > best[0]:
                    best = (int(m.group(1)), head.split()[3].rsplit(":", 1)[-1])
            if best[0] >= STALL_TRIGGER_CWND:
                lport = best[1]
                _plug(p, "block")
                time.sleep(STALL_SECONDS)
                break
            time.sleep(0.01)
    finally:
        _plug(p, "release_indefinite")
        t.join()
    assert "error" not in result.get("data", {}), result
    assert lport, "the data socket never reached the trigger window"
    exits = [parse_kv(x) for x in trace_lines("search_exit")]
    exits = [e for e in exits if e.get("sport") == lport]
    assert exits, f"no search_exit for port {lport}"
    return exits[0].get("reason"), int(exits[0]["cwnd"])


# The host harness's search_pk_vm_stall and search_pk_stalls_rule cover the rule packet by
# packet; this is the same experiment on the real kernel.
@pytest.mark.nightly
def test_search_ack_stall(mods):
    try:
        with Path() as p:
            p.shape(["delay", STALL_DELAY, "rate", STALL_RATE, "limit", "20000"],
                    ["delay", STALL_DELAY, "limit", "100000"])
            ns(p.rcv, "tc", "qdisc", "replace", "dev", "c0", "root", "plug", "limit", "10000000")
            _plug(p, "release_indefinite")
            ns(p.snd, "ip", "route", "change", "default", "via", f"{p.NET}.1.2",
               "rto_min", STALL_RTO_MIN)
            runs = {0: [], 3: []}
            for rule in (0, 3):
                # the paper's rule fires early only for a stall that starts in a range of windows
                # (see above), and the stall starts when ss first shows the trigger, which a busy
                # guest can see late: up to STALL_TRIES_PAPER stalls, until one exits early
                for _ in range(STALL_TRIES_PAPER if rule == 0 else STALL_RUNS):
                    reason, cwnd = _stall_run(p, rule)
                    runs[rule].append((reason, cwnd))
                    print(f"\n  stall_bins={rule}: exit reason={reason} cwnd={cwnd} "
                          f"({cwnd / STALL_BDP_PKTS:.2f} BDP)")
                    if rule == 0 and reason == "search" and cwnd < STALL_BDP_PKTS:
                        break
    finally:
        with open("/sys/module/tcp_search/parameters/stall_bins", "w") as f:
            f.write("0")
    for reason, cwnd in runs[3]:
        assert reason == "search" and cwnd >= STALL_BDP_PKTS, runs[3]
    # The paper's rule must leave slow start early after a stall: below the BDP, or (a stall
    # that ss saw late, outside the windows where the rule fires below the BDP) at under
    # STALL_EARLY_RATIO of the lowest window the reset rule reached after the same stall.
    paper = [c for r, c in runs[0] if r == "search"]
    lowest_reset = min(c for _, c in runs[3])
    print(f"\n  lowest exits: stall_bins=0 {min(paper, default=0) / STALL_BDP_PKTS:.2f} BDP, "
          f"stall_bins=3 {lowest_reset / STALL_BDP_PKTS:.2f} BDP")
    assert any(c < STALL_BDP_PKTS or c < STALL_EARLY_RATIO * lowest_reset for c in paper), \
        f"the paper's rule never left slow start early: {runs[0]} (reset rule: {runs[3]})"


# --- stress matrix -----------------------------------------------------------------------------


@pytest.mark.stress
def test_stress_rtt_5s(mods, path):
    """Each module carries a flow across a 5 s RTT, the two flows side by side (iperf3 spends
    about four RTTs before its data moves and three after: one wait serves both)."""
    path.shape(["delay", "2500ms", "rate", "10mbit", "limit", "20000"],
               ["delay", "2500ms", "limit", "20000"])
    path.spawn(path.rcv, "iperf3", "-s", "-p", "5202")     # one server per flow
    path.listening(5202)
    ports = dict(zip(MODULES.values(), (5201, 5202)))
    data = {}

    def client(cca):
        data[cca] = path.iperf3("-p", str(ports[cca]), "-C", cca, "-t", "12", timeout=90)

    with contextlib.ExitStack() as stack:
        watchers = {cca: stack.enter_context(SsWatcher(path, available(), port))
                    for cca, port in ports.items()}
        threads = [threading.Thread(target=client, args=(cca,)) for cca in ports]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for cca in ports:
        assert "error" not in data[cca], (cca, data[cca].get("error"))
        assert watchers[cca].busiest()["ccs"] == {cca}, (cca, watchers[cca].seen)
        print(f"\n  {cca} RTT 5 s, beside the other module's flow: "
              f"{data[cca]['end']['sum_received']['bits_per_second'] / 1e6:.2f} Mbit/s")


@pytest.mark.stress
@pytest.mark.parametrize("cca", ["spline", "search"])
def test_stress_loss_50(mods, path, cca):
    # Half of all data packets lost: iperf3 may give up, the kernel must not. The loss
    # starts once the data connection runs the module (a handshake at 50 % loss may
    # never complete, and then only iperf3's control connection would be seen).
    path.shape(["rate", "10mbit", "delay", "20ms", "limit", "1000"])
    result = {}

    def client():
        try:
            result["data"] = path.iperf3("-C", cca, "-t", "8", timeout=90)
        except subprocess.TimeoutExpired:
            result["data"] = {"error": "timeout"}

    with SsWatcher(path, available()) as w:
        t = threading.Thread(target=client)
        t.start()
        deadline = time.monotonic() + 30         # a bound on a flow that never starts
        while time.monotonic() < deadline and not (
                w.busiest()["bytes_acked"] > 0 and cca in w.busiest()["ccs"]):
            time.sleep(0.1)
        path.shape(["rate", "10mbit", "delay", "20ms", "loss", "50%", "limit", "1000"])
        lossy_from = w.busiest()["bytes_acked"]
        t.join()
    assert cca in w.busiest()["ccs"], w.seen
    assert lossy_from > 0, "the data connection never started before the loss was applied"
    data = result.get("data", {})
    print(f"\n  {cca} 50% loss: {data.get('error') or 'completed'}, "
          f"{w.busiest()['bytes_acked'] - lossy_from} bytes acked under loss")


@pytest.mark.stress
@pytest.mark.parametrize("cca", ["spline", "search"])
def test_stress_20_flows(mods, path, cca):
    path.shape(["rate", "10mbit", "delay", "25ms", "limit", "1000"])
    with SsWatcher(path, available()) as w:
        data = path.iperf3("-C", cca, "-P", "20", "-t", "8", timeout=90)
    assert "error" not in data, data.get("error")
    used = [r for r in w.seen.values() if r["bytes_acked"] > 0]
    assert len(used) >= 20
    assert all(r["ccs"] == {cca} for r in used if r["bytes_acked"] > 100000)
    print(f"\n  {cca} x20: {data['end']['sum_received']['bits_per_second'] / 1e6:.2f} Mbit/s")


def test_dmesg_clean_after_matrix(dmesg_start):
    new = dmesg_lines()[dmesg_start:]
    release, accel = os.uname().release, os.environ.get("CCLAB_VM_ACCEL", "")
    bad, seen = [], set()
    for i, line in enumerate(new):
        if i in seen or not BAD_DMESG.search(line):
            continue
        why = emulator_artefact(new[i:i + TRACE_LINES], release, accel)
        if why is None:
            bad.append(i)
            continue
        trace = trace_of(new[i:i + TRACE_LINES])
        seen.update(range(i, i + len(trace)))       # its Call Trace: line is no finding of its own
        # a warning: pytest shows it in its summary of a run that passed, where a print is not
        warn("\n" + "!" * 100 + f"\n[kmod] emulator artefact, not failed: {why}\n" +
             "\n".join(trace) + "\n" + "!" * 100)
    # each of the first findings with the lines after it: the modules linked in, the process
    # (Comm:) and its call trace, to tell our modules' lines from the kernel's or the emulator's
    assert not bad, "\n".join("\n".join(trace_of(new[i:i + TRACE_LINES])) for i in bad[:3])

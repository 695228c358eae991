"""`cclab shell EXPERIMENT` in the lab VM: Mininet's CLI on the experiment's live dumbbell.  A
ping typed into it crosses the shaped link (its RTT is the profile's), tc shows the profile's
qdisc on the router, and on exit, end of input or SIGTERM nothing of the network is left."""
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from cclab import spec, state
from cclab.profiles import KIT_DIR

ENV = dict(os.environ, PYTHONPATH=str(KIT_DIR))
SPEC = ('name = "shell-try"\nprofile = "wired"\n[override]\ndown.delay = "30ms"\nup.delay = "10ms"\n'
        '[[flow]]\ncca = "cubic"\nduration = "5s"\n')


def nothing_left():
    assert state.kit_shells() == {}
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout)
    assert not [ln["ifname"] for ln in links if ln["ifname"].startswith("cc-")]
    assert not state.state_file().exists()


def test_a_ping_in_the_shell_crosses_the_shaped_link_and_exit_removes_everything(tmp_path):
    f = tmp_path / "shell.toml"
    f.write_text(SPEC)
    rtt = spec.load(f).link.base_rtt                       # 40 ms: 30 down, 10 up
    typed = ("nodes\n"
             "cc-c1 ping -c 5 -i 0.2 cc-s1\n"
             "cc-r1 tc -s qdisc show dev cc-r1-core\n")
    p = subprocess.run([sys.executable, "-m", "cclab", "shell", str(f)], input=typed, env=ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    print(p.stdout[-3000:])
    assert p.returncode == 0, p.stdout[-2000:]
    assert "cclab shell: shell-try on profile wired" in p.stdout
    assert "cc-s1 10.0.1.2" in p.stdout and "cc-c1 10.1.1.2" in p.stdout
    assert re.search(r"available nodes are:\s*cc-c1 cc-r1 cc-r2 cc-s1", p.stdout), "nodes"
    m = re.search(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/", p.stdout)
    assert m, "no ping summary"
    assert "5 received" in p.stdout
    low = float(m.group(1)) / 1e3
    # the fastest of five: the shaped path's delay, which a stalled guest can only lengthen
    # (an average over five pings moves with one stall)
    assert rtt * 0.95 <= low <= rtt * 1.5, (low, rtt)
    assert re.search(r"qdisc (htb|netem|tbf) ", p.stdout), "the router's shaping qdisc"
    nothing_left()


def test_sigterm_while_the_shell_waits_removes_everything(tmp_path):
    f = tmp_path / "shell.toml"
    f.write_text(SPEC)
    p = subprocess.Popen([sys.executable, "-m", "cclab", "shell", str(f)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    seen, deadline = b"", time.monotonic() + 120
    while b"try:" not in seen:
        assert time.monotonic() < deadline and p.poll() is None, seen[-2000:]
        if select.select([p.stdout], [], [], 1)[0]:
            seen += os.read(p.stdout.fileno(), 65536)
    assert state.kit_shells(), "the shell's network is up"
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=60)
    assert rc == 128 + signal.SIGTERM, (rc, p.stderr.read()[-2000:])
    nothing_left()


def test_the_shell_needs_root_and_says_so(tmp_path):
    f = Path(f"/tmp/cclab-shell-{os.getpid()}.toml")       # readable by nobody
    f.write_text(SPEC)
    f.chmod(0o644)
    p = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-m", "cclab", "shell", str(f)],
                       env=ENV, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 1
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    f.unlink()
    assert len(lines) == 1 and "cclab shell needs root" in lines[0], p.stderr
    nothing_left()

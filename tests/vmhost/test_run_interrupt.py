"""vm/run.sh on the host, with the real image: exit status, output, and nothing left behind.

Run by `make test-guest` (make vm-test) after the image is built (these boot the guest, so they
are not in `make check`).
"""
import os
import signal
import subprocess
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]


def qemu_pids():
    r = subprocess.run(["pgrep", "-f", "qemu-system-x86_64.*cclab-guest-init"], capture_output=True, text=True)
    return set(r.stdout.split())


def test_exit_status_and_output_come_back():
    r = subprocess.run([str(KIT / "vm/run.sh"), "--", "sh", "-c",
                        "echo kernel=$(uname -r); test -d /kit/vm && exit 7"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 7, r.stderr[-2000:]
    assert "kernel=6." in r.stdout
    assert "booted to the command in" in r.stderr


def test_sigint_leaves_no_qemu_and_no_control_dir():
    before = qemu_pids()
    ctl_before = set(Path("/tmp").glob("cclab-vm.*"))
    # As from a terminal: SIGINT at its default disposition, even where this suite runs in the
    # background (a shell started with SIGINT ignored cannot trap it).
    p = subprocess.Popen([str(KIT / "vm/run.sh"), "--", "sleep", "600"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 180
    while time.time() < deadline and not (qemu_pids() - before):
        time.sleep(0.5)
    assert qemu_pids() - before, "the guest never started"
    time.sleep(5)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        for pid in qemu_pids() - before:
            subprocess.run(["kill", "-9", pid])
        raise
    assert p.returncode == 130, err
    assert "interrupted" in err
    time.sleep(1)
    assert not (qemu_pids() - before), "a qemu process was left behind"
    assert set(Path("/tmp").glob("cclab-vm.*")) <= ctl_before, "the control directory was left behind"


def test_a_guest_that_stops_answering_is_taken_apart():
    """The guest writes a heartbeat into the control folder; once it is older than
    CCLAB_VM_STALL seconds, run.sh sends the guest an NMI (its stacks go to the console, as a
    panic) and exits 125 with one line naming the stall.  Here the command stops the heartbeat."""
    before = qemu_pids()
    r = subprocess.run([str(KIT / "vm/run.sh"), "--", "sh", "-c",
                        "kill -STOP $(cat /run/cclab-heartbeat.pid) && echo heartbeat-stopped; "
                        "sleep 600"],
                       env=dict(os.environ, CCLAB_VM_STALL="15"),
                       capture_output=True, text=True, timeout=400)
    assert "heartbeat-stopped" in r.stdout, r.stderr[-2000:]
    assert r.returncode == 125, r.stderr[-2000:]
    stall = [line for line in r.stderr.splitlines() if "stopped answering" in line]
    assert stall and "NMI" in stall[0], r.stderr[-2000:]
    assert "Kernel panic" in r.stdout and "NMI" in r.stdout, r.stdout[-3000:]
    assert not (qemu_pids() - before), "a qemu process was left behind"

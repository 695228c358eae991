"""What provisioning promised the lab user: JupyterLab with token auth in the lab user's own
notebooks folder, packet capture, and the one root command (the lab command), which refuses a
folder the caller may not write and stops cleanly when the notebook is interrupted.

The test guest boots without systemd, so the service is checked as configured (enabled, its
unit's commands) and then started by hand as the unit would start it.  (tests/student boots the
guest under systemd and drives the service from a browser.)
"""
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from lab_notebooks import in_other_netns, lab_user, namespaces, scratch_for

UNIT = "/etc/systemd/system/cclab-jupyter.service"
TOKEN_FILE = "/etc/cclab/jupyter-token"


def unit_fields(name, unit=UNIT):
    """Every value the unit file gives `name`, in order."""
    with open(unit) as f:
        return re.findall(rf"^{name}=(.*)$", f.read(), re.M)


def unit_field(name, unit=UNIT):
    return unit_fields(name, unit)[0]


def api(port, token, path, method="GET", body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}?token={token}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


WARM_UNIT = "/etc/systemd/system/cclab-warm.service"


def test_the_warm_up_unit_is_enabled_and_its_imports_run_as_the_lab_user():
    """cclab-warm.service loads the labs' libraries and tshark once after boot, after
    JupyterLab, as the lab user at the lowest priority, then leaves its mark in its runtime
    folder; its commands, run here in order as that user, succeed."""
    enabled = subprocess.run(["systemctl", "is-enabled", "cclab-warm.service"],
                             capture_output=True, text=True)
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr
    def field(name):
        return unit_field(name, WARM_UNIT)
    assert field("User") == unit_field("User")
    assert field("After") == "cclab-jupyter.service"
    assert field("Nice") == "19" and field("IOSchedulingClass") == "idle"
    assert field("RemainAfterExit") == "yes"          # one run a boot, however often started
    commands = unit_fields("ExecStart", WARM_UNIT)
    assert len(commands) == 2 and "import pandas, matplotlib.pyplot, otter" in commands[0]
    assert commands[1].split()[0].endswith("/tshark"), commands
    assert field("RuntimeDirectory") == "cclab-warm"
    assert field("ExecStartPost") == "/usr/bin/touch /run/cclab-warm/done"
    user = pwd.getpwnam(field("User"))
    for command in commands:
        r = subprocess.run(["/usr/sbin/runuser", "-u", user.pw_name, "--", "sh", "-c", command],
                           cwd=user.pw_dir, capture_output=True, text=True, timeout=600,
                           env={"PATH": "/usr/bin:/bin", "HOME": user.pw_dir, "MPLBACKEND": "Agg"})
        assert r.returncode == 0, (command, r.stderr[-2000:])
    # tshark listed its dissectors (full name, short name, filter name), TCP's among them
    assert any(line.split("\t")[2:] == ["tcp"] for line in r.stdout.splitlines()), r.stdout[:300]


def test_jupyter_service_enabled_with_token_auth():
    enabled = subprocess.run(["systemctl", "is-enabled", "cclab-jupyter.service"],
                             capture_output=True, text=True)
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr
    user = unit_field("User")
    assert user != "vagrant" and user != "root", user
    # the lab user's sudo is the lab command and nothing else
    rules = subprocess.run(["sudo", "-l", "-U", user], capture_output=True, text=True).stdout
    commands = [l.strip() for l in rules.splitlines() if "NOPASSWD" in l or l.startswith("    (")]
    assert commands and all(c.endswith("/usr/local/sbin/cclab-lab-run") for c in commands), rules
    token = open(TOKEN_FILE).read().strip()
    assert len(token) >= 32
    home = pwd.getpwnam(user).pw_dir
    notebooks = Path(home) / "notebooks"
    had = notebooks.exists()
    env = {"PATH": "/opt/cclab/venv/bin:/usr/bin:/bin", "HOME": home}

    def seed():
        r = subprocess.run(["/usr/sbin/runuser", "-u", user, "--", unit_field("ExecStartPre")],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr

    # the unit's first step copies the lab notebooks into the lab user's ~/notebooks ...
    seed()
    kit_nbs = sorted(p.name for p in Path("/kit/notebooks").glob("*.ipynb"))
    assert kit_nbs and all((notebooks / n).is_file() for n in kit_nbs), kit_nbs
    assert all((notebooks / n).stat().st_uid == pwd.getpwnam(user).pw_uid for n in kit_nbs)
    assert os.path.realpath(notebooks / "labkit.py") == os.path.realpath("/kit/notebooks/labkit.py")
    # ... and never replaces one the student has (the next boot runs it again)
    mine = notebooks / kit_nbs[0]
    subprocess.run(["/usr/sbin/runuser", "-u", user, "--", "sh", "-c",
                    f"echo '{{\"mine\": 1}}' > {mine}"], check=True)
    seed()
    assert json.loads(mine.read_text()) == {"mine": 1}

    port = "8899"
    cmd = unit_field("ExecStart").replace("--port=8888", f"--port={port}").replace("\\$", "$")
    argv = re.match(r"/bin/sh -c '(.*)'$", cmd).group(1)
    env = {"PATH": "/opt/cclab/venv/bin:/usr/bin:/bin", "HOME": f"/home/{user}"}
    p = subprocess.Popen(["/usr/sbin/runuser", "-u", user, "--", "/bin/sh", "-c", argv], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}/api/status"
        # a bound on a server that never answers, not a budget: its start under software
        # emulation takes tens of seconds on a quiet host, longer on a busy one
        deadline, status = time.time() + 600, None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{base}?token={token}", timeout=30) as r:
                    status = json.load(r)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert p.poll() is None, "JupyterLab exited"
                time.sleep(1)
        assert status is not None and "started" in status, "JupyterLab never answered"
        try:
            urllib.request.urlopen(base, timeout=30)
            raise AssertionError("JupyterLab answered without the token")
        except urllib.error.HTTPError as e:
            assert e.code == 403
        # JupyterLab serves the lab user's home: the notebooks are there, and what the student
        # saves lands in ~/notebooks as the lab user's file
        listing = {e["name"] for e in api(port, token, "/api/contents/notebooks")["content"]}
        assert set(kit_nbs) <= listing, listing
        api(port, token, "/api/contents/notebooks/saved-by-test.ipynb", "PUT",
            {"type": "notebook", "format": "json", "content": {
                "cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}})
        saved = notebooks / "saved-by-test.ipynb"
        assert saved.is_file() and saved.stat().st_uid == pwd.getpwnam(user).pw_uid
    finally:
        os.killpg(p.pid, 15)
        p.wait(timeout=30)
        if not had:
            shutil.rmtree(notebooks, ignore_errors=True)


def test_a_notebooks_first_cell_builds_no_parser(tmp_path):
    """Otter's cell that opens every lab notebook, in the lab VM's Python: it imports nbformat,
    and so jsonschema, whose format checkers must not build a grammar parser at import (lark:
    rfc3987-syntax's Earley parser took 10 s of the cell's 20 under emulation).  The time is
    printed, a figure and not a test."""
    script = ("import sys, time; t = time.monotonic(); import otter; otter.Notebook('lab1.ipynb'); "
              "print(time.monotonic() - t, ' '.join(sorted(m for m in ('lark', 'rfc3987_syntax') "
              "if m in sys.modules)))")
    shutil.copy("/kit/notebooks/lab1.ipynb", tmp_path)      # otter logs beside it: not in the kit
    r = subprocess.run(["/opt/cclab/venv/bin/python3", "-c", script], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    took, *parsers = r.stdout.split()
    print(f"\n  import otter and otter.Notebook(): {float(took):.1f} s")
    assert not parsers, f"importing otter built a grammar parser: {parsers} imported"


def test_lab_user_can_capture(tmp_path):
    user = unit_field("User")
    out = f"/tmp/cclab-capture-{os.getpid()}.pcap"
    # The ping runs until the capture has ended: dumpcap takes seconds to start in the
    # software-emulated VM (a ping of a fixed count was over before it listened, once).
    ping = subprocess.Popen(["ping", "-i", "0.2", "127.0.0.1"], stdout=subprocess.DEVNULL)
    try:
        r = subprocess.run(["runuser", "-u", user, "--", "dumpcap", "-q", "-i", "lo",
                            "-a", "duration:2", "-w", out], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        n = subprocess.run(["tshark", "-r", out, "-Y", "icmp"], capture_output=True, text=True)
        assert n.stdout.count("\n") > 0, "the lab user's capture holds no packets"
    finally:
        ping.terminate()
        ping.wait(timeout=30)
        if os.path.exists(out):
            os.unlink(out)


def test_the_lab_command_refuses_a_folder_the_caller_may_not_write_before_it_runs():
    """A run started by the lab user cannot write into another user's folders: the lab command
    says so in one line, before any experiment, and makes nothing there."""
    user = unit_field("User")
    dest = f"/root/cclab-not-{user}s-{os.getpid()}"
    r = subprocess.run(["runuser", "-u", user, "--", "sudo", "-n", "/usr/local/sbin/cclab-lab-run",
                        "lab1", "quick", dest], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"cclab-lab-run: cannot write results in {dest} as {user}: "), r.stderr
    assert "lab1-" not in r.stdout, f"it ran experiments first: {r.stdout}"
    assert not os.path.exists(dest)


def test_interrupting_the_notebooks_run_stops_it_cleans_up_and_keeps_earlier_results():
    """A kernel interrupt (SIGINT to the notebook's Python, as JupyterLab's stop button sends it)
    during a lab 1 run through the lab command: the run stops, the command says it kept nothing,
    no namespace, staging folder or process of the run is left, and the student's earlier
    results are as they were."""
    user = lab_user()
    dest = scratch_for(user, "interrupt")
    earlier = dest / "lab1"
    earlier.mkdir()
    (earlier / "earlier.txt").write_text("mine\n")
    for p in (earlier, earlier / "earlier.txt"):
        os.chown(p, user.pw_uid, user.pw_gid)
    before = namespaces()
    held_before = set(in_other_netns())
    staged_before = set(Path("/var/tmp").glob("cclab-lab1-*"))
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import labkit; "
              "labkit.run_lab('lab1', 'quick', root=sys.argv[2])")
    env = {"PATH": "/opt/cclab/venv/bin:/usr/bin:/bin", "HOME": user.pw_dir, "LANG": "C.UTF-8",
           "CCLAB_KIT": "/kit", "MPLBACKEND": "Agg",
           "PYTHONUNBUFFERED": "1"}        # each progress line as it comes, as a kernel sends it
    p = subprocess.Popen(["/opt/cclab/venv/bin/python3", "-c", script, "/kit/notebooks", str(dest)],
                         user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd=dest,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True,
                         # a kernel turns SIGINT into KeyboardInterrupt; Python does so only if
                         # SIGINT is not ignored when it starts (the guest's own command runs
                         # with it ignored)
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out = []
    try:
        for line in p.stdout:
            out.append(line)
            if line.startswith("[run 1/"):
                break
        assert any(l.startswith("[run 1/") for l in out), "".join(out)
        time.sleep(8)                       # the run is under way: namespaces, flows
        p.send_signal(signal.SIGINT)
        out += p.stdout.readlines()
        p.wait(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = "".join(out)
    assert p.returncode != 0 and "KeyboardInterrupt" in text, text[-2000:]
    assert "lab1: interrupted; nothing of this run was kept" in text, text[-2000:]
    assert (earlier / "earlier.txt").read_text() == "mine\n"
    assert sorted(x.name for x in dest.iterdir()) == ["lab1"], sorted(x.name for x in dest.iterdir())
    assert sorted(x.name for x in earlier.iterdir()) == ["earlier.txt"]
    assert namespaces() <= before, namespaces() - before
    assert set(Path("/var/tmp").glob("cclab-lab1-*")) <= staged_before
    left = subprocess.run(["pgrep", "-a", "-x", "iperf3|tcpdump|dumpcap|ping"],
                          capture_output=True, text=True).stdout
    assert not left.strip(), left
    held = {pid: cmd for pid, cmd in in_other_netns().items() if pid not in held_before}
    assert not held, f"processes left in the run's network namespaces: {held}"
    shutil.rmtree(dest)

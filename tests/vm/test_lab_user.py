"""What provisioning promised the lab user: JupyterLab with token auth, and packet capture.

The test guest boots without systemd, so the service is checked as configured (enabled, its
unit's command) and then started by hand as the unit would start it.
"""
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

UNIT = "/etc/systemd/system/cclab-jupyter.service"
TOKEN_FILE = "/etc/cclab/jupyter-token"


def unit_field(name):
    with open(UNIT) as f:
        return re.search(rf"^{name}=(.*)$", f.read(), re.M).group(1)


def test_jupyter_service_enabled_with_token_auth():
    enabled = subprocess.run(["systemctl", "is-enabled", "cclab-jupyter.service"],
                             capture_output=True, text=True)
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr
    user = unit_field("User")
    token = open(TOKEN_FILE).read().strip()
    assert len(token) >= 32

    port = "8899"
    cmd = unit_field("ExecStart").replace("--port=8888", f"--port={port}").replace("\\$", "$")
    argv = re.match(r"/bin/sh -c '(.*)'$", cmd).group(1)
    env = {"PATH": "/opt/cclab/venv/bin:/usr/bin:/bin", "HOME": f"/home/{user}"}
    p = subprocess.Popen(["/usr/sbin/runuser", "-u", user, "--", "/bin/sh", "-c", argv], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}/api/status"
        deadline, status = time.time() + 120, None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{base}?token={token}", timeout=5) as r:
                    status = json.load(r)
                break
            except (urllib.error.URLError, ConnectionError):
                assert p.poll() is None, "JupyterLab exited"
                time.sleep(1)
        assert status is not None and "started" in status, "JupyterLab never answered"
        try:
            urllib.request.urlopen(base, timeout=5)
            raise AssertionError("JupyterLab answered without the token")
        except urllib.error.HTTPError as e:
            assert e.code == 403
    finally:
        os.killpg(p.pid, 15)
        p.wait(timeout=30)


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

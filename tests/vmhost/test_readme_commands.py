"""The README's VM commands, run as written from the checkout (each boots the image)."""
import subprocess
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]


def run(*argv, timeout=600):
    return subprocess.run(list(argv), cwd=KIT, capture_output=True, text=True, timeout=timeout)


def test_vm_run_uname():
    r = run("vm/run.sh", "--", "uname", "-a")
    assert r.returncode == 0, (r.stdout[-1000:], r.stderr[-1000:])
    assert any(line.startswith("Linux ") for line in r.stdout.splitlines()), r.stdout[-1000:]


def test_vm_run_cclab_profiles():
    r = run("vm/run.sh", "--", "cclab", "profiles")
    assert r.returncode == 0, (r.stdout[-1000:], r.stderr[-1000:])
    for name in ("wired", "wifi", "cellular", "geo", "leo"):
        assert name in r.stdout, r.stdout[-2000:]

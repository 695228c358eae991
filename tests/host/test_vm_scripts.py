"""Host checks of the VM scripts: prerequisites, arguments, the image cache key, Vagrantfile."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]


def run(args, env=None, **kw):
    return subprocess.run(args, cwd=KIT, capture_output=True, text=True, env=env, timeout=60, **kw)


@pytest.fixture
def path_without(tmp_path):
    """A PATH holding every host command except the named ones."""
    def make(*missing):
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        for d in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
            if not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                target = bindir / name
                if name in missing or target.exists() or target.is_symlink():
                    continue
                target.symlink_to(os.path.join(d, name))
        return {**os.environ, "PATH": str(bindir), "CCLAB_VM_CACHE": str(tmp_path / "cache")}
    return make


@pytest.mark.parametrize("script,missing,package", [
    ("vm/run.sh", "qemu-system-x86_64", "qemu-system-x86"),
    ("vm/build-image.sh", "debootstrap", "debootstrap"),
])
def test_missing_prerequisite_is_one_line(path_without, script, missing, package, monkeypatch):
    env = path_without(missing)
    args = [script, "--", "true"] if script.endswith("run.sh") else [script]
    r = run(["bash", *args], env=env)
    if script.endswith("build-image.sh") and os.geteuid() != 0:
        pytest.fail("build-image.sh checks root before its tools; run the host tests as root")
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"apt-get install {package}" in lines[0]


@pytest.mark.parametrize("args,needle", [
    (["--bogus"], "unknown option --bogus"),
    ([], "no command given"),
    (["--timeout", "soon", "--", "true"], "whole numbers"),
])
def test_run_rejects_bad_arguments(args, needle):
    r = run(["vm/run.sh", *args])
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


def test_image_key_follows_provisioning_inputs(tmp_path):
    kit = tmp_path / "kit"
    shutil.copytree(KIT / "vm", kit / "vm")
    (kit / "kmod").mkdir()
    (kit / "kmod" / "dkms.conf").write_text('PACKAGE_NAME="x"\n')
    (kit / "README.md").write_text("a\n")

    def key():
        r = run(["bash", str(kit / "vm" / "build-image.sh"), "--print-key"])
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    k0 = key()
    (kit / "README.md").write_text("b\n")
    assert key() == k0, "a file that is not a provisioning input changed the key"
    (kit / "kmod" / "dkms.conf").write_text('PACKAGE_NAME="y"\n')
    k1 = key()
    assert k1 != k0
    (kit / "kmod" / "tcp_x.o").write_text("artifact")
    assert key() == k1, "a build artifact changed the key"
    with open(kit / "vm" / "provision.sh", "a") as f:
        f.write("\n# changed\n")
    assert key() != k1


def test_provision_refuses_non_root():
    if os.geteuid() == 0:
        r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "vm/provision.sh"])
    else:
        r = run(["bash", "vm/provision.sh"])
    assert r.returncode != 0 and "must run as root" in r.stderr


def test_vagrantfile_validates():
    if not shutil.which("vagrant"):
        if os.environ.get("CI"):
            pytest.fail("vagrant is not installed (.ci/run installs it)")
        pytest.skip("vagrant not installed (apt-get install vagrant)")
    r = run(["vagrant", "validate", "--ignore-provider"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "validated successfully" in r.stdout


def test_vagrantfile_forwards_jupyter_to_localhost_only():
    text = (KIT / "Vagrantfile").read_text()
    assert 'guest: 8888, host: 8888, host_ip: "127.0.0.1"' in text
    assert 'path: "vm/provision.sh"' in text
    for provider in ("virtualbox", "libvirt", "parallels"):
        assert f'config.vm.provider "{provider}"' in text

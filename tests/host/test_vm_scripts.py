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
    k2 = key()
    assert k2 != k1
    with open(kit / "vm" / "kmod-dkms.sh", "a") as f:
        f.write("\n# changed\n")
    assert key() != k2, "the DKMS functions provisioning sources are a provisioning input"


def test_provision_refuses_non_root():
    if os.geteuid() == 0:
        r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "vm/provision.sh"])
    else:
        r = run(["bash", "vm/provision.sh"])
    assert r.returncode != 0 and "must run as root" in r.stderr


def test_vagrantfile_validates():
    if not shutil.which("vagrant"):
        if os.environ.get("CI"):
            pytest.fail("vagrant is not installed (.ci/prereq installs it)")
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


# ---------------------------------------------------------------- vm/run.sh supervising its guest

# Stands in for qemu-system-x86_64: counts its boots, and on the boot numbered in $FAKE_BOOTS_OK
# and later plays a guest that ran its command (writes started and rc into the ctl share);
# any other boot hangs, as a guest whose boot never reaches the command, or with FAKE_CRASH=1
# stops at once, as a guest whose kernel died while booting.  It keeps the
# environment run.sh gave the guest's command (env-N).  Its pid-N appears whole (a rename), so a
# test that polls for it never reads it half-written.
FAKE_QEMU = r'''#!/bin/bash
n=$(( $(cat "$FAKE_DIR/boots" 2>/dev/null || echo 0) + 1 ))
echo $n > "$FAKE_DIR/boots"
echo $$ > "$FAKE_DIR/.pid-$n" && mv "$FAKE_DIR/.pid-$n" "$FAKE_DIR/pid-$n"   # whole, or not there
ctl=$(printf '%s\n' "$@" | sed -n 's/^local,path=\(.*\),mount_tag=ctl,.*/\1/p')
cp "$ctl/env" "$FAKE_DIR/env-$n"
if [ "$n" -ge "${FAKE_BOOTS_OK:-99}" ]; then
  date +%s > "$ctl/started"; echo 0 > "$ctl/rc"; exit 0
fi
[ "${FAKE_CRASH:-0}" = 1 ] && exit 0
exec sleep 1000
'''


@pytest.fixture
def fake_guest(tmp_path):
    """An environment in which vm/run.sh boots FAKE_QEMU from a stand-in image cache."""
    cache, fake, bindir = tmp_path / "cache", tmp_path / "fake", tmp_path / "bin"
    for d in (cache, fake, bindir):
        d.mkdir()
    for name in ("lab-k.img", "vmlinuz-k", "initrd-k"):
        (cache / name).write_text("")
    (cache / "current.img").symlink_to(cache / "lab-k.img")
    qemu = bindir / "qemu-system-x86_64"
    qemu.write_text(FAKE_QEMU)
    qemu.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "CCLAB_VM_CACHE": str(cache),
           "CCLAB_VM_REUSE": "1", "CCLAB_VM_ACCEL": "tcg", "CCLAB_VM_BOOT_LIMIT": "2",
           "FAKE_DIR": str(fake)}
    return env, fake


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_run_boots_a_hung_guest_again(fake_guest):
    env, fake = fake_guest
    r = run(["vm/run.sh", "--", "true"], env={**env, "FAKE_BOOTS_OK": "2"})
    assert r.returncode == 0, r.stderr
    assert "did not reach the command in 2 s (its boot hung): booting it again" in r.stderr
    assert (fake / "boots").read_text().strip() == "2"
    assert not alive(int((fake / "pid-1").read_text()))          # the hung guest was stopped


def test_run_boots_a_guest_that_died_while_booting_again_once(fake_guest):
    env, fake = fake_guest
    r = run(["vm/run.sh", "--", "true"], env={**env, "FAKE_BOOTS_OK": "2", "FAKE_CRASH": "1"})
    assert r.returncode == 0, r.stderr
    assert "stopped before it reached the command (its boot failed" in r.stderr
    assert (fake / "boots").read_text().strip() == "2"
    (fake / "boots").unlink()
    r = run(["vm/run.sh", "--", "true"], env={**env, "FAKE_BOOTS_OK": "3", "FAKE_CRASH": "1"})
    assert r.returncode == 125
    assert r.stderr.strip().splitlines()[-1] == "[vm] the guest stopped without reporting an exit status"
    assert (fake / "boots").read_text().strip() == "2"


def test_run_tells_the_command_its_accelerator(fake_guest):
    # the in-VM tests tell an emulator's artefact by it (tests/vm/test_kmod.py); --env cannot
    # override the accelerator the guest really runs under
    env, fake = fake_guest
    r = run(["vm/run.sh", "--env", "CCLAB_VM_ACCEL=kvm", "--env", "X=a b", "--", "true"],
            env={**env, "FAKE_BOOTS_OK": "1"})
    assert r.returncode == 0, r.stderr
    lines = (fake / "env-1").read_text().splitlines()
    assert lines[-1] == "export CCLAB_VM_ACCEL=tcg", lines
    assert "export X=a\\ b" in lines, lines


def test_run_gives_up_after_two_hung_boots(fake_guest):
    env, fake = fake_guest
    r = run(["vm/run.sh", "--", "true"], env=env)
    assert r.returncode == 125
    assert r.stderr.strip().splitlines()[-1] == \
        "[vm] the guest did not reach the command in 2 s, twice: giving up"
    assert not any(alive(int(p.read_text())) for p in fake.glob("pid-*"))


def test_a_killed_run_leaves_no_guest_and_no_lock(fake_guest):
    import fcntl
    import signal
    import time
    env, fake = fake_guest
    # its control folder, which a SIGKILL leaves, goes in the test's own folder, not /tmp
    p = subprocess.Popen(["vm/run.sh", "--", "true"], cwd=KIT,
                         env={**env, "CCLAB_VM_BOOT_LIMIT": "60", "TMPDIR": str(fake)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not (fake / "pid-1").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    guest = int((fake / "pid-1").read_text())
    p.send_signal(signal.SIGKILL)                       # no trap runs: the guest must still go
    p.wait(timeout=10)
    deadline = time.monotonic() + 10
    while alive(guest) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(guest)
    # the lock is free once the script's last short-lived child (its 0.5 s sleep) is gone: the
    # guest never held it
    with open(Path(env["CCLAB_VM_CACHE"]) / ".run.lock", "w") as f:
        deadline = time.monotonic() + 5
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the lock is still held"
                time.sleep(0.1)


def test_module_sources_hash_follows_sources_not_build_products(tmp_path):
    """Provisioning skips the DKMS build when the checkout's module sources hash as the installed
    ones do: a changed or added source changes the hash; build products, the docs and the module
    tests (kmod/test, whose harness make check builds) do not."""
    def digest(d):
        r = run(["bash", "-c", '. vm/kmod-dkms.sh; kmod_sources_hash "$1"', "-", str(d)])
        return r.returncode, r.stdout.strip()
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(KIT / "kmod", a, ignore=shutil.ignore_patterns("*.o", "*.ko", ".*.cmd"))
    shutil.copytree(a, b)
    rc, first = digest(a)
    assert rc == 0 and len(first) == 64
    for junk in ("tcp_spline.o", "tcp_spline.ko", ".tcp_spline.o.cmd", "tcp_spline.mod.c",
                 "Module.symvers", "modules.order", "test/harness", "test/new_case.c",
                 "README.md", "NOTES.txt"):
        (b / junk).parent.mkdir(exist_ok=True)
        (b / junk).write_text("built")
    assert digest(b) == (0, first)
    with open(b / "tcp_spline.c", "a") as f:
        f.write("/* edited */\n")
    assert digest(b)[1] != first
    shutil.rmtree(b)
    shutil.copytree(a, b)
    (b / "extra.h").write_text("#define X 1\n")
    assert digest(b)[1] != first
    assert digest(tmp_path / "missing")[0] != 0


def test_kmod_package_reads_name_and_version_or_fails(tmp_path):
    """provision.sh and build-image.sh take the DKMS package's name and version from
    kmod/dkms.conf (quoted or not); a file that lacks either fails, and they stop there."""
    conf = tmp_path / "dkms.conf"

    def package():
        r = run(["bash", "-c", '. vm/kmod-dkms.sh; kmod_package "$1"', "-", str(conf)])
        return r.returncode, r.stdout.strip()
    conf.write_text('PACKAGE_NAME="cclab-tcp"\nPACKAGE_VERSION=0.1\nBUILT_MODULE_NAME[0]="x"\n')
    assert package() == (0, "cclab-tcp 0.1")
    shutil.copy(KIT / "kmod" / "dkms.conf", conf)      # the kit's own, as DKMS reads it
    assert package() == (0, "cclab-tcp 0.1")
    conf.write_text('PACKAGE_NAME="cclab-tcp"\n')
    assert package() == (1, "")

"""vm/run.sh --kernel SERIES: which kernel and initrd the guest boots, and the one-line refusals."""
import os
import subprocess
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]

# Stands in for qemu-system-x86_64: records its arguments, one a line, and plays a guest that
# ran its command (writes started and rc into the ctl share).
FAKE_QEMU = r'''#!/bin/bash
printf '%s\n' "$@" > "$FAKE_DIR/args"
ctl=$(printf '%s\n' "$@" | sed -n 's/^local,path=\(.*\),mount_tag=ctl,.*/\1/p')
date +%s > "$ctl/started"; echo 0 > "$ctl/rc"
'''


@pytest.fixture
def fake_cache(tmp_path):
    """A stand-in image cache as vm/build-image.sh leaves it (image key k), and the environment
    in which vm/run.sh boots FAKE_QEMU from it."""
    cache, fake, bindir = tmp_path / "cache", tmp_path / "fake", tmp_path / "bin"
    for d in (cache, fake, bindir):
        d.mkdir()
    for name in ("lab-k.img", "vmlinuz-k", "initrd-k", "vmlinuz-k-6.12", "initrd-k-6.12"):
        (cache / name).write_text("")
    (cache / "vmlinuz-k-6.1").symlink_to("vmlinuz-k")
    (cache / "initrd-k-6.1").symlink_to("initrd-k")
    (cache / "current.img").symlink_to(cache / "lab-k.img")
    qemu = bindir / "qemu-system-x86_64"
    qemu.write_text(FAKE_QEMU)
    qemu.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "CCLAB_VM_CACHE": str(cache),
           "CCLAB_VM_REUSE": "1", "CCLAB_VM_ACCEL": "tcg", "FAKE_DIR": str(fake)}
    return env, cache, fake


def run(args, env):
    return subprocess.run(["vm/run.sh", *args], cwd=KIT, capture_output=True, text=True, env=env,
                          timeout=60)


def booted(fake):
    """The kernel and initrd the fake guest was given."""
    args = (fake / "args").read_text().splitlines()
    return args[args.index("-kernel") + 1], args[args.index("-initrd") + 1]


@pytest.mark.parametrize("opts,suffix", [([], ""), (["--kernel", "6.12"], "-6.12"),
                                         (["--kernel", "6.1"], "-6.1")])
def test_run_boots_the_kernel_asked_for(fake_cache, opts, suffix):
    env, cache, fake = fake_cache
    r = run([*opts, "--", "true"], env)
    assert r.returncode == 0, r.stderr
    assert booted(fake) == (f"{cache}/vmlinuz-k{suffix}", f"{cache}/initrd-k{suffix}")


@pytest.mark.parametrize("series,needle", [
    ("6.9", "the image lab-k.img has no 6.9 kernel"),
    ("6.12.1", "--kernel takes a kernel series such as 6.12, not '6.12.1'"),
    ("latest", "--kernel takes a kernel series such as 6.12, not 'latest'"),
    ("../k", "--kernel takes a kernel series such as 6.12, not '../k'"),
])
def test_run_refuses_a_kernel_it_cannot_boot(fake_cache, series, needle):
    env, cache, fake = fake_cache
    r = run(["--kernel", series, "--", "true"], env)
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert not (fake / "args").exists(), "a guest was started"


def test_run_refuses_an_image_without_the_initrd(fake_cache):
    env, cache, fake = fake_cache
    (cache / "initrd-k-6.12").unlink()
    r = run(["--kernel", "6.12", "--", "true"], env)
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and "has no 6.12 kernel" in r.stderr, r.stderr

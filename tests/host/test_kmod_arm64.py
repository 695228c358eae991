"""`make -C kmod build-arm64`: the arm64 cross build's own checks.

The real cross build runs in `make test` (kmod-build -> build-all).  These cases check,
without a kernel tree, that the target refuses what it must refuse: no header tree, a
build log with a warning, and a .ko for the wrong machine or the wrong kernel release.
A stand-in header tree (a Makefile that writes the two .ko files) replaces kbuild; the
objects come from the host compiler, and from the cross compiler when it is installed.
When the real arm64 trees are installed, one case also checks that a warning in the
module source fails the cross build.
"""
import glob
import os
import re
import shutil
import subprocess
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KMOD = os.path.join(ROOT, "kmod")
CROSS_CC = "aarch64-linux-gnu-gcc-12"
ARM64_ROOT = "/usr/local/lib/cclab-arm64"

needs_make = pytest.mark.skipif(shutil.which("make") is None or shutil.which("readelf") is None,
                                reason="needs make and readelf")


def _own_lines(stderr):
    """stderr without make's own "make: *** [...] Error 1" trailer."""
    return [l for l in stderr.strip().splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", l)]


def _make(args, env_extra=None, cwd=KMOD, timeout=300):
    env = dict(os.environ)
    env.update(env_extra or {})
    env.pop("MAKEFLAGS", None)
    return subprocess.run(["make", "--no-print-directory", "-C", cwd] + args, capture_output=True,
                          text=True, timeout=timeout, env=env)


def _fake_tree(tmp_path, release, cc, log_line="", vermagic_release=None):
    """A header tree named like Debian's whose `modules` goal compiles two objects that
    carry a .modinfo vermagic string, and prints log_line."""
    root = tmp_path / "root"
    tree = root / "usr" / "src" / ("linux-headers-" + release)
    tree.mkdir(parents=True)
    vm = (vermagic_release or release) + " SMP mod_unload modversions aarch64"
    (tree / "mod.c").write_text(
        'const char vm[] __attribute__((section(".modinfo"), used)) = "vermagic=%s";\n' % vm)
    (tree / "Makefile").write_text(textwrap.dedent("""\
        modules:
        \t@echo '%s'
        \t%s -c -o $(M)/tcp_spline.ko %s/mod.c
        \tcp $(M)/tcp_spline.ko $(M)/tcp_search.ko
        """ % (log_line, shutil.which(cc), tree)))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / CROSS_CC
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    path = str(bindir) + os.pathsep + os.environ.get("PATH", "")
    return str(root), path


@needs_make
def test_no_tree_is_a_one_line_error(tmp_path):
    r = _make(["build-arm64", "ARM64_ROOT=%s" % tmp_path])
    assert r.returncode != 0
    lines = _own_lines(r.stderr)
    assert len(lines) == 1 and "build-arm64: no " in lines[0] and "install-build-deps.sh" in lines[0], r.stderr


@needs_make
def test_missing_cross_compiler_is_a_one_line_error(tmp_path):
    root, _ = _fake_tree(tmp_path, "6.1.0-99-arm64", "gcc")
    r = _make(["build-arm64", "ARM64_ROOT=%s" % root, "ARM64_CROSS=cclab-no-such-cross-"])
    assert r.returncode != 0
    lines = _own_lines(r.stderr)
    assert len(lines) == 1 and "cclab-no-such-cross-gcc-12 not found" in lines[0], r.stderr


@needs_make
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_host_objects_are_refused(tmp_path):
    root, path = _fake_tree(tmp_path, "6.1.0-99-arm64", "gcc")
    r = _make(["build-arm64", "ARM64_ROOT=%s" % root], {"PATH": path})
    assert r.returncode != 0, r.stdout + r.stderr
    assert re.search(r"build-arm64: wrong objects from \S+6\.1\.0-99-arm64; tcp_spline\.ko is "
                     r"'ELF64 REL Advanced Micro Devices X86-64', not 'ELF64 REL AArch64'", r.stderr), r.stderr
    assert "ok:" not in r.stdout


@needs_make
@pytest.mark.skipif(shutil.which(CROSS_CC) is None, reason="needs " + CROSS_CC)
def test_aarch64_objects_pass_and_wrong_release_is_refused(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    root, path = _fake_tree(good, "6.12.99+deb12-arm64", CROSS_CC)
    r = _make(["build-arm64", "ARM64_ROOT=%s" % root], {"PATH": path})
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^ok: tcp_spline\.ko tcp_search\.ko \(AArch64, vermagic 6\.12\.99\+deb12-arm64, \d+ s\)$",
                     r.stdout, re.M), r.stdout

    bad = tmp_path / "bad"
    bad.mkdir()
    root, path = _fake_tree(bad, "6.1.0-99-arm64", CROSS_CC, vermagic_release="6.1.0-98-arm64")
    r = _make(["build-arm64", "ARM64_ROOT=%s" % root], {"PATH": path})
    assert r.returncode != 0
    assert "tcp_spline.ko vermagic is not 6.1.0-99-arm64" in r.stderr, r.stderr


@needs_make
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_warning_in_the_log_fails(tmp_path):
    root, path = _fake_tree(tmp_path, "6.1.0-99-arm64", "gcc",
                            log_line="tcp_spline.c:1:1: warning: no previous prototype")
    r = _make(["build-arm64", "ARM64_ROOT=%s" % root], {"PATH": path})
    assert r.returncode != 0
    assert "build-arm64: warnings on " in r.stderr and "no previous prototype" in r.stdout


@needs_make
@pytest.mark.skipif(shutil.which(CROSS_CC) is None
                    or not glob.glob(ARM64_ROOT + "/usr/src/linux-headers-6.1.*-arm64"),
                    reason="needs the arm64 cross build (kmod/install-build-deps.sh)")
def test_real_cross_build_fails_on_a_source_warning(tmp_path):
    src = tmp_path / "kmod"
    shutil.copytree(KMOD, src, ignore=shutil.ignore_patterns("test", "*.o", "*.ko", ".*.cmd"))
    with open(src / "tcp_search.c", "a") as f:
        f.write("\nint cclab_no_prototype(void) { return 0; }\n")
    tree = sorted(glob.glob(ARM64_ROOT + "/usr/src/linux-headers-6.1.*-arm64"))[-1]
    r = _make(["build-arm64", "ARM64_TREES=%s" % tree], cwd=str(src))
    assert r.returncode != 0
    assert re.search(r"tcp_search\.c:\d+:\d+: warning: no previous prototype for .cclab_no_prototype.",
                     r.stdout), r.stdout + r.stderr
    assert "build-arm64: warnings on %s" % tree in r.stderr, r.stderr

"""The kit installs as a package: a wheel of the checkout holds every subpackage of cclab and
the `cclab` command, and `pip install` of the checkout (plain or editable) puts a `cclab` on PATH
that runs (README: `pip install` of the checkout; the VM runs it from /kit)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_every_subpackage_and_the_command(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(KIT / f, src / f)
    shutil.copytree(KIT / "cclab", src / "cclab", ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "dist").glob("cclab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {str(p.parent.relative_to(KIT)) for p in (KIT / "cclab").rglob("__init__.py")}
    assert len(packages) >= 2
    for pkg in packages:
        assert f"{pkg}/__init__.py" in names, pkg
    mods = {str(p.relative_to(KIT)) for p in (KIT / "cclab").rglob("*.py")}
    assert mods <= set(names), sorted(mods - set(names))
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "cclab = cclab.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def _copy_checkout(dest: Path) -> Path:
    dest.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(KIT / f, dest / f)
    for d in ("cclab", "topologies"):
        shutil.copytree(KIT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _venv(where: Path) -> Path:
    """A fresh virtual environment that sees this Python's packages (pandas, pydantic, ...): pip
    installs only the kit into it, with no download."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(where)],
                   check=True, capture_output=True, timeout=300)
    return where / "bin"


def _install(tmp_path, *pip_args) -> tuple[Path, Path]:
    """pip install of a copy of the checkout into a fresh venv: (the copy, the venv's bin)."""
    src = _copy_checkout(tmp_path / "src")
    bin_ = _venv(tmp_path / "venv")
    r = subprocess.run([str(bin_ / "pip"), "install", "-q", "--no-deps", "--no-build-isolation",
                        *pip_args, str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (bin_ / "cclab").is_file(), "pip install put no cclab command in the venv's bin"
    return src, bin_


def _cclab(tmp_path, bin_, *args, **env) -> subprocess.CompletedProcess:
    """The command as README runs it, from a folder that is not the checkout, with the venv's
    bin first on PATH as an activated venv has it."""
    return subprocess.run(["cclab", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(tmp_path),
                                            **env})


def test_pip_install_puts_the_cclab_command_on_path(tmp_path):
    src, bin_ = _install(tmp_path)
    r = _cclab(tmp_path, bin_, "profiles", CCLAB_KIT=str(src))
    assert r.returncode == 0, r.stderr
    assert "wired" in r.stdout and "geo" in r.stdout, r.stdout
    # without the checkout an installed copy has no profiles to read: one line says so
    r = _cclab(tmp_path, bin_, "profiles")
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.count("\n") == 1 and "set CCLAB_KIT" in r.stderr, r.stderr


def test_an_editable_install_runs_the_checkout(tmp_path):
    src, bin_ = _install(tmp_path, "-e")
    r = _cclab(tmp_path, bin_, "profiles")
    assert r.returncode == 0, r.stderr
    assert "wired" in r.stdout, r.stdout

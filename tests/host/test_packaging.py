"""The kit installs as a package: a wheel of the checkout holds every subpackage of cclab and
the `cclab` command (README: `pip install` of the checkout; the VM runs it from /kit)."""

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

"""Provenance: what a run's results depend on besides the experiment file -- the modules'
files and hashes, the tools' versions, the kit's commit.  The runner puts these in each manifest.

Most of it rarely changes within one Python process (a lab notebook runs many experiments), so
each answer is kept: module hashes keyed by the file's size, modification time and inode (a
rebuilt module is hashed again), modinfo's answers and tool versions once per process.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
from pathlib import Path

from . import files
from .profiles import KIT_DIR
from .spec import Experiment

# Each process start costs ~0.1 s under software emulation, and a run asked modinfo about every
# loaded congestion control and qdisc.
_hashes: dict[tuple, str] = {}
_module_files: dict[str, str | None] = {}


def sha256(path: str) -> str | None:
    try:
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns, st.st_ino)
        if key in _hashes:
            return _hashes[key]
        _hashes[key] = files.sha256(path)
        return _hashes[key]
    except OSError:
        return None


def module_file(name: str) -> str | None:
    """The file modprobe loads for module `name` (modinfo -n), remembered once found."""
    if _module_files.get(name) is None:
        r = subprocess.run(["modinfo", "-n", name], capture_output=True, text=True)
        _module_files[name] = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None
    return _module_files[name]


def module_record(cca: str, exp: Experiment | None = None) -> dict:
    name = f"tcp_{cca}"
    ko = [m for m in (exp.modules if exp else []) if Path(m).stem == name]
    if ko:
        return {"module": name, "file": ko[0], "sha256": sha256(ko[0]),
                "loaded": os.path.isdir(f"/sys/module/{name}")}
    if not os.path.isdir(f"/sys/module/{name}") or not os.path.exists(f"/sys/module/{name}/refcnt"):
        return {"module": name, "file": "(built in)", "sha256": None, "loaded": True}
    path = module_file(name)
    return {"module": name, "file": path, "sha256": sha256(path) if path else None, "loaded": True}


def loaded_modules() -> list[dict]:
    """The loaded modules a result can depend on: congestion controls and qdiscs."""
    out = []
    try:
        with open("/proc/modules") as f:
            names = [l.split()[0] for l in f]
    except OSError:
        names = []
    for n in sorted(names):
        if n.startswith(("tcp_", "sch_")):
            path = module_file(n)
            out.append({"module": n, "file": path, "sha256": sha256(path) if path else None})
    return out


def first_line(argv: list[str]) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return ((r.stdout or r.stderr).strip().splitlines() or [None])[0]
    except (OSError, subprocess.TimeoutExpired):
        return None


@functools.lru_cache(maxsize=1)
def _tool_versions() -> tuple:
    v = {"python": platform.python_version(), "iperf3": first_line(["iperf3", "--version"]),
         "tc": first_line(["tc", "-V"]), "ss": first_line(["ss", "-V"]),
         "ethtool": first_line(["ethtool", "--version"])}
    try:
        from mininet.net import VERSION
        v["mininet"] = VERSION
    except ImportError:
        v["mininet"] = None
    return tuple(v.items())


def tool_versions() -> dict:
    """Versions of the tools a run uses (asked once per process: they do not change under it)."""
    return dict(_tool_versions())


RELEASE_FILE = "release.json"     # a student release's record of the kit it was made from


def release_of(kit_dir: Path = KIT_DIR) -> dict | None:
    """The kit commit a student release was made from (grading/release.py writes it), or None
    for the kit itself or a folder without a readable record."""
    try:
        rec = json.loads((Path(kit_dir) / RELEASE_FILE).read_text())
    except (OSError, ValueError):
        return None
    src = rec.get("kit") if isinstance(rec, dict) else None
    return src if isinstance(src, dict) and isinstance(src.get("commit"), str) else None


def kit_commit() -> dict:
    """The checkout's commit and whether it has changes; a student release also names the kit
    commit it was made from (release_of), so its runs trace back to the kit's code."""
    git = ["git", "-c", "safe.directory=*", "-C", str(KIT_DIR)]
    src = release_of()
    extra = {"release_of": src} if src else {}
    try:
        r = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            return {"commit": None, "note": "not a git checkout", **extra}
        d = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=30)
        return {"commit": r.stdout.strip(), "dirty": bool(d.stdout.strip()), **extra}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "note": "git not available", **extra}

"""Files the kit writes and reads back: written whole or not at all, and hashed.

The bottom of the package (it imports nothing of the kit): the engine's tables, the trace
generator's output, the labs' records and the grading evidence all go through these two.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

CHUNK = 1 << 20                 # bytes read at a time while hashing


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write a file so it appears whole or not at all."""
    path = Path(path)
    if not path.parent.is_dir():        # a stat: mkdir's refusal costs more under emulation
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)        # mkstemp makes 0600; results are for everyone
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def sha256(path) -> str:
    """A file's SHA-256, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()

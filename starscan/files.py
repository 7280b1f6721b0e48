"""Two file rules used in several places: what Spark treats as hidden, and how starscan
writes a file only its own user may read (the users file, plan secrets)."""

from __future__ import annotations

import os
from pathlib import Path


def is_hidden(name: str) -> bool:
    """Spark's rule: a data source ignores files and folders whose names start with ``_`` or
    ``.`` (``_SUCCESS``, ``.crc`` files, ``_temporary``, starscan's own ``_starscan``)."""
    return name.startswith(("_", "."))


def write_private(path: Path, data: bytes, *, replace: bool = True) -> bool:
    """Write ``data`` to ``path`` with mode 0600, atomically: readers see the old file or
    the new one, never a part. ``replace=False``: only if ``path`` does not exist yet (the
    first of two processes starting together wins). Returns whether this call wrote it."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    if replace:
        os.replace(tmp, path)
        return True
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)

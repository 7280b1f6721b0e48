"""Modification times a test sets instead of sleeping for them: a file or folder changed
within one tick of the file system's clock (coarse on some file systems) could keep the
time it had, and a catalog that tells a change by it (starscan.tables) would not see it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

_lock = threading.Lock()
_last_ns = 0


def later(*paths: str | Path) -> int:
    """Give every path one new modification time, a second past now and past the one this
    function gave before (so each call's is distinct), and return it (ns)."""
    global _last_ns
    with _lock:
        _last_ns = max(time.time_ns(), _last_ns) + 1_000_000_000
        stamp = _last_ns
    for path in paths:
        os.utime(path, ns=(stamp, stamp))
    return stamp

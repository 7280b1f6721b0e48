"""Python's cyclic garbage collector held off while a large structure is built.

A table of a million files is a million ``DataFile`` objects, then its tablets, then a
million ``TPlanFile`` objects when its list is packed. Every few thousand new objects the
collector runs, and every so often it walks everything alive: while such a structure is
built that made, for example, packing a million files' list take 4.2 s in the server where
1.2 s suffice (bench/notes, issue 39). Nothing built here holds reference cycles, so the
pause frees nothing late that would have been freed sooner; objects are still freed by
their reference counts as always. Nested and concurrent pauses are counted: the collector
runs again when the last one ends (and only if it was running before the first).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_paused = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    global _paused, _was_enabled
    with _lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            if _paused == 0 and _was_enabled:
                gc.enable()

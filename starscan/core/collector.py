"""Python's cyclic garbage collector held off while a large structure is built.

A table of a million files is a million ``DataFile`` objects, then its tablets, then a
million ``TPlanFile`` objects when its list is packed. Every few thousand new objects the
collector runs, and every so often it walks everything alive: while such a structure is
built that made, for example, packing a million files' list take 4.2 s in the server where
1.2 s suffice (bench/notes, issue 39). Nothing built here holds reference cycles, so the
pause frees nothing late that would have been freed sooner; objects are still freed by
their reference counts as always. Nested and concurrent pauses are counted: the collector
runs again when the last one ends (and only if it was running before the first).

When the last pause ends, what was built is still in the collector's youngest generation,
with whatever any other thread made meanwhile: the first collections after it walked every
object of it, holding the interpreter lock, 0.4-1.4 s each after a million files' listing,
with every caller of the server waiting (the two-second stalls of bench/plan_latency.py at
50 callers). So the end of a pause freezes everything alive (``gc.freeze``), as the server
does once at its start: the collector no longer walks it, and reference counts still free it
when it goes. Cyclic garbage alive at that moment would stay until thawed, so once per
``THAW_EVERY_S`` a pause's end gives everything back to the collector instead (one full
collection then walks it all, and frees such garbage).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: How often at most a pause's end gives the frozen objects back to the collector.
THAW_EVERY_S = 600.0

_lock = threading.Lock()
_paused = 0
_was_enabled = False
_clock = time.monotonic
_last_thaw = _clock()


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
                _freeze_or_thaw()
                gc.enable()


def _freeze_or_thaw() -> None:
    global _last_thaw
    now = _clock()
    if now - _last_thaw >= THAW_EVERY_S:
        gc.unfreeze()
        _last_thaw = now
    else:
        gc.freeze()

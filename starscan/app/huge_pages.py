"""Transparent huge pages for the BE's process: off unless asked for.

The BE keeps what it decodes (its page cache, a fifth of the machine's memory by default),
so its first large scan takes fresh memory from the kernel: about a gigabyte for TPC-H
lineitem at scale 1. Where the kernel backs such memory with transparent huge pages
(``/sys/kernel/mm/transparent_hugepage/enabled`` at ``always``, or ``madvise`` with an
allocator that asks for them, as Arrow's mimalloc does), each 2 MiB page may first need the
kernel to compact memory, in the faulting thread. Measured on an Intel host of 2 cores
(bench/notes/2026-11-29-issue-57-the-first-cold-scan-and-huge-pages.md): the first cold
scan of lineitem spent 2.1-2.3 s of the server's CPU in the kernel against 0.7-0.9 s for
later cold scans, and read 1.95 M rows/s against 2.5 with huge pages off; later scans were a
little faster with them (fewer TLB misses). Databases that keep large caches mostly advise
against them for the same stalls (Oracle, MongoDB, Redis; MariaDB turns them off for its
own process after its buffer pool is allocated), so the BE turns them off for its own
process with ``prctl(PR_SET_THP_DISABLE)`` unless ``be_transparent_huge_pages`` is set.

The flag is the process's and is inherited by the processes it starts afterwards (Spark's
JVM where the session starts later, and that JVM's Python workers); other processes of the
machine are untouched. Elsewhere than Linux there is nothing to do.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("starscan")

_PR_SET_THP_DISABLE = 41
_PR_GET_THP_DISABLE = 42


def _prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def huge_pages_disabled() -> bool | None:
    """Whether this process has transparent huge pages turned off (None: not Linux, or a
    kernel without the call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        state = _prctl(_PR_GET_THP_DISABLE, 0)
    except (OSError, AttributeError):
        return None
    return None if state < 0 else bool(state)


def set_transparent_huge_pages(enabled: bool) -> bool:
    """Turn this process's transparent huge pages on or off; False where it cannot (not
    Linux, or the kernel refused: logged), True when done."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        rc = _prctl(_PR_SET_THP_DISABLE, 0 if enabled else 1)
    except (OSError, AttributeError) as exc:
        log.info("transparent huge pages left as they are: %s", exc)
        return False
    if rc != 0:
        log.info("transparent huge pages left as they are: prctl failed (errno %d)", ctypes.get_errno())
        return False
    return True

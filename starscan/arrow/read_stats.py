"""What a read took from its files: rows decoded (after row-group statistics skipped what
they could and row-level deletes were applied, before the plan's predicate). Beside the rows
a scan sends, it shows a filter's pruning: a filtered scan that sends 34,540 rows may have
read 2.4 M or 60,000 (docs/operations.md)."""

from __future__ import annotations

import threading


class ReadStats:
    """Counts of one read; safe to add to from the threads of a concurrent read."""

    __slots__ = ("_lock", "rows_read")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows_read = 0

    def read(self, rows: int) -> None:
        with self._lock:
            self.rows_read += rows

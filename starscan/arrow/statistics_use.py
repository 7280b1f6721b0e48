"""When a split's reader consults a file's row-group statistics before decoding it.

Skipping row groups by their statistics costs a second read of the file's footer, through a
dataset fragment (pyarrow has no way to test an expression against a footer it has already
read): 150-250 µs of CPU per file on the machine measured, whatever the file's size. For a
large file that is nothing beside its decode, and every skipped row group saves a decode. A
small file's decode costs about the same as the check (measured: a 1 KB file of ten rows,
223 µs to open and decode against 144 for the statistics; 58 KB, 691 against 252), so for
small files the statistics pay only where they skip most of them: a streaming job's
time-ordered files under a time predicate, but not a predicate that every file has rows
for, where they were a third of the reader's CPU per file (50,000 ten-row files).

So a split consults the statistics of every file of ``SMALL_FILE_BYTES`` or more, or of more
than one row group; of its small one-group files, the first ``PROBE``, and after those as long
as at least half of the small files checked were skipped by them; otherwise one small file in
``RECHECK``, so that a split whose files change along the way is still seen. Whether a file's
statistics are consulted never changes a row: the predicate runs on every decoded row anyway.
"""

from __future__ import annotations

SMALL_FILE_BYTES = 64 << 10
PROBE = 16
RECHECK = 16


class StatisticsUse:
    """One split's record of how its small files' statistics have paid. Not thread-safe:
    files are opened one at a time (``read_split``'s threads take them under a lock)."""

    __slots__ = ("checked", "skipped", "passed")

    def __init__(self) -> None:
        self.checked = 0   # small files whose statistics were consulted
        self.skipped = 0   # of them, those the statistics ruled out whole
        self.passed = 0    # small files decoded without a look at their statistics

    @staticmethod
    def is_small(size: int, row_groups: int) -> bool:
        return size < SMALL_FILE_BYTES and row_groups <= 1

    def wanted(self, size: int, row_groups: int) -> bool:
        """Whether to consult the statistics of a file of ``size`` bytes and ``row_groups``
        row groups to read."""
        if not self.is_small(size, row_groups) or self.checked < PROBE or 2 * self.skipped >= self.checked:
            return True
        self.passed += 1
        return self.passed % RECHECK == 0

    def record(self, size: int, row_groups: int, skipped: bool) -> None:
        """The outcome of a consultation: whether the statistics ruled the whole file out."""
        if self.is_small(size, row_groups):
            self.checked += 1
            self.skipped += skipped

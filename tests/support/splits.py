"""Splits of local Parquet files, as a plan would name them (the kernel's reader's input)."""

from __future__ import annotations

from pathlib import Path

from starscan.arrow.split_plan import ArrowSplit, FilePart


def split_of(paths: list[Path]) -> ArrowSplit:
    """Each file whole, with its size and modification time as they are now."""
    parts = []
    for path in paths:
        stat = path.stat()
        parts.append(FilePart(str(path), path.name, stat.st_size, stat.st_mtime_ns, None))
    return ArrowSplit(tuple(parts))

"""How file and folder names read in Hadoop's and Hive's conventions, which Spark follows.

Two rules decide whether Spark reads exactly the files and partition values we mean:

* **Globs.** Spark expands every path it is given to read as a Hadoop glob pattern when
  the path holds any of ``\\ [ ] { } * ?``: a file named ``a[1].parquet`` would be read
  as the pattern matching ``a1.parquet``. :func:`literal` escapes those characters with
  Hadoop's escape character, so the pattern matches exactly the one path. (Spark's
  internal read option ``__globPaths__=false`` turns the expansion off, but with several
  such files in one read Spark 4.3 then reads some of them several times.)
* **Partition folders.** Hive-style folders ``col=value`` escape characters that cannot
  stand in a path as ``%XX``. Spark decodes each ``%XX`` (two hex digits) into the one
  character with that code (not UTF-8: ``%C3%A9`` is two characters), in column names and
  in values of string and timestamp columns; values of date, numeric and boolean columns
  are parsed as they stand (``2024-01-0%31`` is no date). :func:`unescape_path_name` is
  that decoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from starscan.core.errors import TableUnreadable

if TYPE_CHECKING:
    import datetime

    from starscan.core.sql_types import SqlType

_GLOB = re.compile(r"([\\\[\]{}*?])")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")

#: Hive's folder value for a NULL partition value.
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def literal(path: str) -> str:
    """``path`` as a Hadoop glob pattern that matches only itself."""
    return _GLOB.sub(r"\\\1", path)


def check_openable(table: str, location: str, relative_paths: Iterable[str]) -> None:
    """Refuse a table with a data file Spark's reader cannot open by its name. Hadoop
    takes a ':' in a path component for a URI scheme where it builds a path from parts:
    the name of a local file's checksum file (``.<name>.crc``), and every folder when a
    path holding glob characters (escaped) is matched."""
    paths = relative_paths if isinstance(relative_paths, list) else list(relative_paths)
    if ":" not in location and ":" not in "\n".join(paths):
        return  # the common case, answered at C speed (a million paths one by one took 0.4 s)
    location_globs = literal(location) != location
    for path in paths:
        folders, _, name = path.rpartition("/")
        reason = None
        if ":" in name:
            reason = "its name holds ':'"
        elif (":" in folders or ":" in location) and (location_globs or literal(path) != path):
            reason = "a folder on its path holds ':' and the path holds one of \\ [ ] { } * ?"
        if reason is not None:
            raise TableUnreadable(
                f"table {table} cannot be scanned: its data file {path!r} cannot be opened by Spark's reader "
                f"(Hadoop) because {reason}; rename the file or folder")


def escape_percent(text: str) -> str:
    """``text`` spelled so that :func:`unescape_path_name` gives it back (a value recorded
    by a table format, kept beside folder spellings)."""
    return text.replace("%", "%25")


def unescape_path_name(text: str) -> str:
    """Spark's (Hive's) decoding of a partition folder's column name or value."""
    if "%" not in text:
        return text
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_DATE_TEXT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")


def exact_partition_value(raw: str | None, sql_type: SqlType,
                          escaped: bool = True) -> str | int | bool | datetime.date | None:
    """A partition folder's value as the Python value Spark reads for ``sql_type``, where
    that reading is certain: strings decoded, integers (in the type's range), ``YYYY-MM-DD``
    dates and ``true``/``false`` parsed as they stand, Hive's NULL folder as None. Raises
    ValueError for anything else (other types, spellings Spark might read differently or
    refuse). ``escaped`` False: ``raw`` is a value as a table format records it (Delta's
    log), not a folder's spelling, so a string is taken as it is."""
    import datetime as dt

    if raw is None:
        return None
    if sql_type.kind == "string":
        return unescape_path_name(raw) if escaped else raw
    if sql_type.kind == "boolean":
        if raw not in ("true", "false"):
            raise ValueError(f"{raw!r} is not plainly true or false")
        return raw == "true"
    if sql_type.is_integral:
        if not _INT_TEXT.fullmatch(raw):
            raise ValueError(f"{raw!r} is not plainly an integer")
        value = int(raw)
        bits = {"byte": 8, "short": 16, "integer": 32, "long": 64}[sql_type.kind]
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise ValueError(f"{raw!r} is out of range")
        return value
    if sql_type.kind == "date":
        match = _DATE_TEXT.fullmatch(raw)
        if not match:
            raise ValueError(f"{raw!r} is not written YYYY-MM-DD")
        return dt.date(*map(int, match.groups()))
    raise ValueError(f"partition values of type {sql_type.simple_string()} are not read exactly")


def partition_of(relative_path: str) -> tuple[tuple[str, str | None], ...]:
    """The partition folders on a data file's path (relative to its table): each folder
    ``col=value`` as (the column name decoded as Spark decodes it, the value exactly as the
    folder spells it; None for Hive's NULL folder). Folders without '=' are not partitions."""
    out = []
    for folder in relative_path.split("/")[:-1]:
        spelled, eq, raw = folder.partition("=")
        if eq:
            out.append((unescape_path_name(spelled), None if raw == HIVE_DEFAULT_PARTITION else raw))
    return tuple(out)

"""What a split reads and how: its files (``FilePart``, ``ArrowSplit``) and the plan's read
instructions (``ArrowRead``, made by starscan.arrow.scan), with the errors of reading one.

Shared by the BE's ``arrow`` engine, Spark's Python tasks and the client's direct reads
(starscan.arrow.read reads a split by these), so all of them read the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from starscan.arrow.nested import FileKey, FileName, is_nested_name, key_of
from starscan.arrow.rebase import CalendarRules
from starscan.core.sql_types import SqlType
from starscan.storage.stores import LOCAL, Storage

BATCH_ROWS = 4096


class SplitReadError(Exception):
    """A file of the split cannot be read as the plan says (gone, changed, corrupt, typed
    differently): the message names the table and the file."""


class PlannedFileGone(SplitReadError):
    """A planned file was removed or rewritten since the plan: its table version is gone."""


@dataclass(frozen=True)
class FilePart:
    path: str                     # absolute
    relative: str                 # as the plan names it
    size: int
    mtime_ns: int
    row_groups: tuple[int, ...] | None        # None: the whole file
    partition: tuple[tuple[str, object], ...] = ()  # canonical column -> typed value
    # The file's row-level deletes (starscan.arrow.deletes: JSON, a vector file's path made
    # absolute), or None.
    deletes: str | None = None


@dataclass(frozen=True)
class ArrowSplit:
    parts: tuple[FilePart, ...]

    def describe(self, files: int | None = None) -> str:
        """The split's files (and row groups) as an error message names them; past ``files``
        of them, how many more (a split of small files may pack hundreds)."""
        shown = self.parts if files is None else self.parts[:files]
        text = ", ".join(f"file {part.relative}{_row_groups_text(part.row_groups)}" for part in shown)
        return text + (f" and {len(self.parts) - len(shown)} more files" if len(shown) < len(self.parts) else "")


def _row_groups_text(groups: tuple[int, ...] | None) -> str:
    """Row groups as a message names them: ' row groups 2-4' for a run, ' row groups 1, 3'
    otherwise, nothing for a whole file."""
    if groups is None:
        return ""
    if not groups:
        return " (no row groups)"
    if len(groups) > 1 and list(groups) == list(range(groups[0], groups[-1] + 1)):
        return f" row groups {groups[0]}-{groups[-1]}"
    return f" row group{'s' if len(groups) != 1 else ''} {', '.join(map(str, groups))}"


@dataclass(frozen=True)
class ArrowRead:
    table: str                    # db.table, for messages
    version: int
    needed: tuple[tuple[str, pa.DataType], ...]   # file columns read: canonical name, Arrow type
    partition_columns: tuple[tuple[str, pa.DataType], ...]
    output: tuple[tuple[str, str, int | None], ...]  # (output name, canonical source, CHAR length)
    output_schema: pa.Schema      # Spark's Arrow types of the output, named as the output
    filter: pc.Expression | None = None
    pushdown: pc.Expression | None = None         # conjuncts over file columns only (row-group stats)
    # File columns of types Spark rebases (DATE, TIMESTAMP; never TIMESTAMP_NTZ), and the
    # session's rules for them (starscan.arrow.rebase).
    dates: tuple[str, ...] = ()
    calendar: CalendarRules = CalendarRules()
    storage: Storage = LOCAL      # where the files are (a local folder or an object store)
    output_columns: tuple[tuple[str, SqlType, bool], ...] = ()  # what the wire conversion needs
    # Column -> its name in the files (starscan.arrow.nested.FileName), where the table
    # format names them apart from the schema (Delta column mapping, Iceberg field ids); a
    # column not here has its own name in the files, and so have its nested fields.
    file_names: tuple[tuple[str, FileName], ...] = ()

    def file_name(self, name: str) -> FileKey:
        """The column's name in the files, or its field id (an int) where ids resolve columns."""
        return key_of(dict(self.file_names).get(name, name))

    def nested_names(self, name: str) -> FileName | None:
        """The column's name in the files with its nested fields' names, where they are named
        apart from the schema; None where they are not."""
        found = dict(self.file_names).get(name)
        return found if found is not None and is_nested_name(found) else None


def first_line(exc: BaseException, part: FilePart) -> str:
    """pyarrow's reason, naming the file as the plan does (not where the warehouse is)."""
    text = str(exc).strip().replace(part.path, part.relative)
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]

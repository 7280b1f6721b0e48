"""What each kind of table knows of its versions, for incremental reads: the data files
appended between a version a reader holds and the current one, and which of two versions
came first (so a consumer's committed position never moves back).

- folder tables (and Hive metastore tables, whose version is also a hash of their file set):
  the history starscan keeps of every file set it observed (starscan.tables.versions);
- Delta tables: the add and remove actions of the commits in the Delta log (starscan.tables.delta);
- Iceberg tables: the snapshots between the two and the files each appended
  (starscan.tables.iceberg).

Every kind answers exactly or refuses: ``VersionUnknown`` for a version it cannot place
(never observed, expired, or vacuumed from the log), ``TableRewritten`` when something other
than appends happened since (rows deleted or updated, files rewritten), never a partial or
silently full read.
"""

from __future__ import annotations

from typing import Protocol

from starscan.tables.versions import VersionHistory


class TableChanges(Protocol):
    def added_since(self, since: int, current: int) -> list[str]:
        """Paths (relative to the table location) of the data files appended after version
        ``since`` up to ``current``, the table's version now; each is a file of ``current``."""
        ...

    def order(self, version: int) -> int | None:
        """Where ``version`` stands in the table's history (larger: later), None when it is
        not a version this table can place."""
        ...


class FolderChanges:
    """A folder table's changes, from the file sets starscan observed (starscan.tables.versions)."""

    def __init__(self, history: VersionHistory, location: str):
        self.history = history
        self.location = location

    def added_since(self, since: int, current: int) -> list[str]:
        return [path for path, _, _ in self.history.added_since(self.location, since, current)]

    def order(self, version: int) -> int | None:
        return self.history.position(self.location, version)

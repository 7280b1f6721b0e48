"""What a table catalog other than the warehouse's folders says a table is now (Iceberg,
the Hive metastore): starscan.tables.catalog turns it into a TableSnapshot with tablets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from starscan.core.errors import StarscanError, TableUnreadable

if TYPE_CHECKING:
    from starscan.arrow.nested import FileName
    from starscan.storage.stores import Storage
    from starscan.tables.changes import TableChanges


@dataclass(frozen=True)
class CatalogTable:
    location: str                  # a local path or a URI
    storage: Storage
    version: int                   # 31 bits, as plans carry it
    schema_json: str               # Spark's StructType JSON
    # path relative to the location, size, mtime_ns, and the partition as its folders spell it
    # and the file's row-level deletes (starscan.arrow.deletes JSON) or None
    files: tuple[tuple[str, int, int, tuple[tuple[str, str | None], ...], str | None], ...]
    partition_columns: tuple[str, ...] = ()
    partitions_in_folders: bool = True   # False: the values are inside the files (Iceberg)
    file_format: str = "parquet"           # or "orc" (Hive metastore tables)
    kind: str = "catalog"                  # "iceberg", "hive": names the table's format in messages
    versions_from_files: bool = False      # the version is a hash of the file set: starscan.tables.versions tracks it
    file_columns: tuple[tuple[str, FileName], ...] = ()  # column -> field id (Iceberg), where names do not resolve
    # Columns the table holds but no reader can be given, with why (Iceberg ``time``): left
    # out of the schema; a query naming one is refused with the reason.
    unread_columns: tuple[tuple[str, str], ...] = ()


_T = TypeVar("_T")


def asking(catalog: str, fn: Callable[[], _T]) -> _T:
    """One call into a catalog library (pyiceberg, the metastore through py4j): its own
    error kinds become TableUnreadable with its first line."""
    try:
        return fn()
    except StarscanError:
        raise
    except Exception as exc:  # noqa: BLE001 - each library raises kinds of its own
        text = str(exc).strip()
        first = (text.splitlines()[0] if text else type(exc).__name__)[:300]
        raise TableUnreadable(f"{catalog} cannot be read: {first}") from None


class TableCatalog(Protocol):
    """The databases a catalog serves, their tables, and a table as it is now."""

    def serves(self, db: str) -> bool: ...

    def databases(self) -> list[str]: ...

    def tables(self, db: str) -> list[str]: ...

    def has_table(self, db: str, table: str) -> bool: ...

    def snapshot(self, db: str, table: str) -> CatalogTable: ...

    def invalidate(self, db: str, table: str) -> None: ...

    def changes(self, db: str, table: str) -> TableChanges | None:
        """The table's changes between versions (starscan.tables.changes), or None when its version
        is a hash of its file set (``versions_from_files``) and the observed history tells them."""
        ...

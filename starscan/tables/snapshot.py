"""A table as it is at one moment (``TableSnapshot``): its files, tablets and version, and
how its files name its columns and partitions. The warehouse (starscan.tables.catalog)
makes them; plans, scans and the FE's pruning read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from starscan.storage.stores import LOCAL, Storage
from starscan.tables.tablets import DataFileLike, Tablet

if TYPE_CHECKING:
    from starscan.arrow.nested import FileName


@dataclass(frozen=True)
class TableSnapshot:
    """A table as it is now: its files, tablets and version."""

    db: str
    name: str
    location: str        # a local path or a URI (starscan.storage.stores)
    version: int
    tablets: tuple[Tablet, ...]
    partition_columns: tuple[str, ...]
    by_id: dict[int, Tablet] = field(default_factory=dict, compare=False, repr=False)
    storage: Storage = field(default_factory=lambda: LOCAL, compare=False, repr=False)  # where the files are
    schema_json: str | None = None  # the table format's own schema (Delta), else read from the files
    # False: the partition values are inside the files (Iceberg: no partition_columns), or
    # each file's record carries them (DataFile.recorded_partition: Delta column mapping).
    partitions_in_folders: bool = True
    file_format: str = "parquet"  # or "orc", or "metastore" (Hive metastore tables: read by Spark SQL)
    kind: str = "folder"  # or "delta", or a catalog's kind ("iceberg", "hive"): where its changes are known
    # Column -> its name in the files (Delta column mapping) or its field id (Iceberg, after a
    # rename or a column dropped and added again), where the table format resolves columns
    # apart from their names; empty: the files use the schema's names.
    file_columns: tuple[tuple[str, FileName], ...] = ()
    # Columns left out of the schema, with why (starscan.tables.catalog_tables.CatalogTable).
    unread_columns: tuple[tuple[str, str], ...] = ()
    # Answers worked out from this snapshot alone, kept as long as it is (the FE's partition
    # pruning: planner.query_plan); whoever adds to it bounds it.
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def qualified_name(self) -> str:
        return f"{self.db}.{self.name}"

    @property
    def partitions_recorded(self) -> bool:
        """Whether each file carries its partition values (DataFile.recorded_partition)."""
        return not self.partitions_in_folders and bool(self.partition_columns)

    @property
    def plan_partition_columns(self) -> list[str] | None:
        """Where a plan says the partition values are (TScanPlan.partition_columns): None in
        the folders, [] inside the files, the columns when each file carries them."""
        return None if self.partitions_in_folders else list(self.partition_columns)

    @cached_property
    def files(self) -> list[DataFileLike]:
        """Every data file once (a cut file is in several tablets), in path order; worked out
        once per snapshot (a million files took 1.3 s each time)."""
        seen: dict[str, DataFileLike] = {}
        for t in self.tablets:
            for f in t.files:
                seen.setdefault(f.path, f)
        return sorted(seen.values(), key=lambda f: f.path)

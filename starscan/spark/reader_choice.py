"""Which reader reads a table's files for Spark SQL, decided once for the FE's queries and
the BE's sql engine alike (docs/architecture.md):

* ``METASTORE``: a Hive metastore table: Spark's own reader of it (its SerDe, its formats);
* ``OWN``: only starscan's file reader reads the files right (rows deleted without being
  rewritten, columns or partition values the files record apart from the schema): it reads
  them, or the read is refused, never answered wrong by Spark's reader;
* ``OWN_FIRST``: starscan's reader where it can, else Spark's (an object store Spark has no
  Hadoop connector for; a BE told to read every file itself);
* ``SPARK``: Spark's own file readers.
"""

from __future__ import annotations

from enum import Enum


class Reader(Enum):
    METASTORE = "metastore"
    OWN = "own"
    OWN_FIRST = "own-first"
    SPARK = "spark"


def table_reader(file_format: str | None, mapped_columns: bool, recorded_partitions: bool, deletes: bool,
                 local: bool, own_always: bool = False) -> Reader:
    """The reader of a table (or of a scan's tablets) of ``file_format`` whose files have
    ``mapped_columns`` (named apart from the schema), ``recorded_partitions`` (values only
    the table's log records) or ``deletes``, in a ``local`` store; ``own_always``: the BE's
    setting to read every file with starscan's reader (ORC aside: it reads no ORC)."""
    if file_format == "metastore":
        return Reader.METASTORE
    if mapped_columns or recorded_partitions or deletes:
        return Reader.OWN
    if not local or (own_always and file_format != "orc"):
        return Reader.OWN_FIRST
    return Reader.SPARK

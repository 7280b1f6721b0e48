"""A PySpark data source (Spark 4's Python Data Source API) that reads a StarRocks-protocol
table (starscan, or a StarRocks cluster) through ``_query_plan`` and the BEs:

    from starscan.spark.datasource import StarRocksArrowDataSource
    spark.dataSource.register(StarRocksArrowDataSource)
    df = (spark.read.format("starrocks_arrow")
          .option("starrocks.fe.http.url", "127.0.0.1:8030")
          .option("starrocks.table.identifier", "demo.lineitem")
          .option("starrocks.user", "root").option("starrocks.password", "")
          .load())

One input partition per tablet (``starrocks.request.tablet.size`` tablets per partition),
each read by a Spark task through starscan.client, which hands Spark the Arrow batches as
they come (no row loop in Python) and fails over to a tablet's next routing. Columns: all,
or ``starrocks.columns``. Filters: ``starrocks.filter.query`` and, from Spark 4.1 (the
first to push filters into a Python data source), every Spark filter that
``datasource_filters`` can write as SQL go into the plan, so the BEs send only matching
rows; Spark evaluates the rest. Values arrive in Spark's own types: DATE as date, DATETIME as timestamp_ntz (the
server's wall clock), LARGEINT as decimal(38, 0). Nested columns (ARRAY, MAP, STRUCT) are
not described by ``_schema``, so they are refused by name: leave them out with
``starrocks.columns``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
except ImportError as exc:  # pyspark before 4.0 (starscan.spark.compat.HAS_PYTHON_DATA_SOURCE)
    import pyspark

    raise ImportError(f"starscan's PySpark data source needs Spark 4's Python Data Source API; this is pyspark "
                      f"{pyspark.__version__}: read with starscan.client (docs/readers.md) instead") from exc
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
)

from starscan.client.options import NAMES, ReadOptions

_SPARK_TYPES: dict[str, DataType] = {
    "BOOLEAN": BooleanType(), "TINYINT": ByteType(), "SMALLINT": ShortType(), "INT": IntegerType(),
    "BIGINT": LongType(), "LARGEINT": DecimalType(38, 0), "FLOAT": FloatType(), "DOUBLE": DoubleType(),
    "DATE": DateType(), "DATETIME": TimestampNTZType(), "CHAR": StringType(), "VARCHAR": StringType(),
    "STRING": StringType(), "BINARY": BinaryType(), "VARBINARY": BinaryType(),
}


class StarRocksArrowDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "starrocks_arrow"

    def schema(self) -> StructType:
        return table_schema(_Settings(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StarRocksArrowReader(_Settings(self.options), schema)


class _Settings:
    """The options of one read (StarRocks connector names)."""

    def __init__(self, options: Any):
        opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
        self.fe = opts.get("starrocks.fe.http.url") or opts.get("starrocks.fenodes", "")
        if not self.fe:
            raise ValueError("starrocks_arrow needs starrocks.fe.http.url (the FE's host:port)")
        self.fe = self.fe.split(",")[0].strip()
        identifier = opts.get("starrocks.table.identifier", "")
        self.db, dot, self.table = identifier.partition(".")
        if not dot or not self.db or not self.table:
            raise ValueError(f"starrocks.table.identifier must be db.table, not {identifier!r}")
        self.user = opts.get("starrocks.user", opts.get("starrocks.request.auth.user", "root"))
        self.password = opts.get("starrocks.password", opts.get("starrocks.request.auth.password", ""))
        self.filter_query = opts.get("starrocks.filter.query") or None
        columns = opts.get("starrocks.columns")
        self.columns = [c.strip().strip("`") for c in columns.split(",") if c.strip()] if columns else None
        self.read_options = ReadOptions.of({k: v for k, v in opts.items() if k in NAMES})

    def connection(self) -> Any:
        from starscan.client import connect

        return connect(self.fe, self.user, self.password, options={k: v for k, v in vars(self.read_options).items()})


def table_schema(settings: _Settings) -> StructType:
    """The table's columns (``starrocks.columns`` of them, in that order) in Spark's types."""
    fields = []
    for p in settings.connection().columns(settings.db, settings.table, settings.columns):
        kind = str(p.get("type", "")).upper()
        if kind.startswith("DECIMAL"):
            spark: DataType = DecimalType(int(p.get("precision") or 38), int(p.get("scale") or 0))
        elif kind in _SPARK_TYPES:
            spark = _SPARK_TYPES[kind]
        else:
            raise ValueError(f"column {p['name']} of {settings.db}.{settings.table} is {kind}, which starrocks_arrow "
                             "does not read; list the other columns in starrocks.columns")
        fields.append(StructField(p["name"], spark, True))
    return StructType(fields)


class StarRocksArrowReader(DataSourceReader):
    def __init__(self, settings: _Settings, schema: StructType):
        self.settings = settings
        self.schema = schema
        self.pushed: list[str] = []

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
        """Spark 4.1 on (compat.HAS_DATA_SOURCE_FILTERS) offers the filters it could push;
        4.0 calls no such method and evaluates every filter itself."""
        from starscan.spark.datasource_filters import filter_sql

        for f in filters:
            sql = filter_sql(f)
            if sql is None:
                yield f  # Spark evaluates it
            else:
                self.pushed.append(sql)

    def where(self) -> str | None:
        parts = ([f"({self.settings.filter_query})"] if self.settings.filter_query else []) + self.pushed
        return " and ".join(parts) or None

    def partitions(self) -> list[InputPartition]:
        from starscan.client.reader import select_sql, work_items

        s = self.settings
        conn = s.connection()
        sql = select_sql(s.db, s.table, [f.name for f in self.schema.fields], self.where())
        plan = conn.plan(s.db, s.table, sql)
        items = work_items(plan, s.read_options.request_tablet_size)
        opaque = plan["opaqued_query_plan"]
        return [InputPartition((opaque, routings, tablets)) for routings, tablets, _ in items]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        opaque, routings, tablets = partition.value
        s = self.settings
        target = to_arrow_schema(self.schema, prefers_large_types=False)
        for batch in s.connection().scan(s.db, s.table, {"opaqued_query_plan": opaque}, routings, tablets, native=True):
            yield pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(batch.columns, target, strict=True)],
                                             schema=target)

"""Plain single-table SELECTs on the MySQL port, run on Spark with a row limit (other queries:
planner/sql_queries.py).

The statement goes through the same checks as `_query_plan` (``planner.sql.parse``: one
table, no joins/aggregates/subqueries, whitelisted functions) and becomes a Spark plan
through ``provider.spark_expr`` — no SQL text reaches Spark. LIMIT n is applied on top;
every answer is capped at ``query_max_rows`` rows.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from dataclasses import dataclass

from mysql_mimic import ResultColumn
from mysql_mimic.types import ColumnType
from pyspark.sql import functions as F
from pyspark.sql import types as T
from sqlglot import exp

from starscan.core.errors import SqlInvalid
from starscan.planner import sql as sqlmod
from starscan.planner.mysql.catalog_view import CatalogView
from starscan.planner.mysql.errors import no_database, no_such_table, not_supported, select_denied, unknown_database
from starscan.planner.table_frames import table_frame
from starscan.spark.columns import column_ref, to_column


@dataclass(frozen=True)
class PreparedSelect:
    db: str
    table: str
    parsed: sqlmod.ParsedQuery
    limit: int


# What makes a SELECT more than a scan (``_query_plan``'s refusals), LIMIT aside: this port
# applies a LIMIT itself.
_NOT_PLAIN = tuple(t for t in sqlmod.SCAN_ONLY if t is not exp.Limit) + (exp.Subquery,)


def is_plain(expression: exp.Expression) -> bool:
    """A SELECT of columns and expressions of one table, with WHERE and LIMIT at most: the
    shape ``prepare`` answers; anything else that reads goes to planner/sql_queries.py."""
    if not isinstance(expression, exp.Select):
        return False
    from_ = expression.args.get("from_") or expression.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table) or expression.args.get("joins"):
        return False
    return not (expression.args.get("with_") or expression.args.get("with")) and expression.find(*_NOT_PLAIN) is None


def prepare(expression: exp.Select, current_db: str | None, view: CatalogView, max_rows: int) -> PreparedSelect:
    """Check the statement and the user's grant (cheap; no Spark)."""
    stmt = expression.copy()
    limit = _limit(stmt.args.get("limit"), max_rows)
    stmt.set("limit", None)
    from_ = stmt.args.get("from_") or stmt.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table) or stmt.args.get("joins"):
        raise not_supported("only plain single-table SELECTs (select cols from db.table where ... limit n) are supported")
    source = from_.this
    db = source.text("db") or current_db
    table = source.name
    if not db:
        raise no_database()
    if source.args.get("catalog") and source.text("catalog") not in ("def", "default_catalog"):
        raise not_supported(f"unknown catalog {source.text('catalog')!r}")
    if not view.can_select(db, table):
        raise select_denied(view.user, table)
    if not view.warehouse.has_database(db):
        raise unknown_database(db)
    if not view.warehouse.has_table(db, table):
        raise no_such_table(db, table)
    source.set("catalog", None)
    source.set("db", exp.to_identifier(db, quoted=True))
    source.set("this", exp.to_identifier(table, quoted=True))
    parsed = sqlmod.parse(stmt.sql(dialect="starrocks"), db, table)
    return PreparedSelect(db, table, parsed, limit)


def _limit(node: exp.Expression | None, max_rows: int) -> int:
    if node is None:
        return max_rows
    if node.args.get("offset") is not None:
        raise not_supported("LIMIT with an offset is not supported")
    value = node.expression
    if not (isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit()):
        raise not_supported("LIMIT must be a non-negative integer")
    return min(int(value.this), max_rows)


def run(spark, prepared: PreparedSelect, view: CatalogView) -> tuple[list[tuple], list[ResultColumn]]:
    """Build and run the Spark job (call off the event loop)."""
    df, schema = table_frame(spark, view, prepared.db, prepared.table, prepared.parsed.predicate)
    by_lower = {f.name.lower(): f for f in schema.fields}

    def resolve(name: str) -> str:
        field = by_lower.get(name.lower())
        if field is None:
            raise SqlInvalid(f"Unknown column '{name}' in '{prepared.table}'")
        return field.name

    if prepared.parsed.predicate is not None:
        df = df.filter(to_column(prepared.parsed.predicate, resolve))
    cols, names = [], []
    for item in prepared.parsed.items:
        if item.is_star:
            for f in schema.fields:
                cols.append(column_ref(f.name))
                names.append(f.name)
        else:
            assert item.expr is not None
            cols.append(to_column(item.expr, resolve))
            names.append(resolve(item.expr.name) if item.expr.kind == "column" and item.name == item.expr.name else item.name)
    if not cols:
        raise SqlInvalid("empty select list")
    df = df.select(*[c.alias(f"_c{i}") for i, c in enumerate(cols)])
    return collect_rows(spark, df, names, prepared.limit, f"select from {prepared.db}.{prepared.table} ({view.user})")


def collect_rows(spark, df, names: list[str], limit: int, description: str) -> tuple[list[tuple], list[ResultColumn]]:
    """Up to ``limit`` rows of ``df`` as the MySQL protocol sends them (timestamps as
    StarRocks prints them, nested values as JSON) and their result columns named ``names``."""
    df = df.toDF(*[f"_c{i}" for i in range(len(names))])
    types = [f.dataType for f in df.schema.fields]
    out = []
    for i, dtype in enumerate(types):
        c = F.col(f"_c{i}")
        if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
            # The wall-clock time in the session time zone (Spark's), as StarRocks prints it.
            c = F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSSSSS")
        elif isinstance(dtype, (T.ArrayType, T.MapType, T.StructType)):
            c = F.to_json(c)
        out.append(c.alias(f"_c{i}"))
    df = df.select(*out)
    spark.sparkContext.setJobDescription(f"mysql port: {description}")
    try:
        collected = df.limit(limit).collect() if limit > 0 else []
    finally:
        spark.sparkContext.setJobDescription(None)
    columns = [_result_column(name, dtype) for name, dtype in zip(names, types)]
    return [tuple(_value(v, dtype) for v, dtype in zip(row, types)) for row in collected], columns


_COLUMN_TYPES = {
    T.BooleanType: ColumnType.TINY, T.ShortType: ColumnType.SHORT, T.IntegerType: ColumnType.LONG,
    T.LongType: ColumnType.LONGLONG, T.FloatType: ColumnType.FLOAT, T.DoubleType: ColumnType.DOUBLE,
    T.DecimalType: ColumnType.NEWDECIMAL, T.DateType: ColumnType.DATE, T.TimestampType: ColumnType.DATETIME,
    T.TimestampNTZType: ColumnType.DATETIME, T.BinaryType: ColumnType.BLOB,
}


def _result_column(name: str, dtype: T.DataType) -> ResultColumn:
    if isinstance(dtype, T.ByteType):
        # mysql-mimic's binary TINY encoder writes bool(value): pack the signed byte here.
        return ResultColumn(name, ColumnType.TINY, binary_encoder=lambda col, v: struct.pack("<b", int(v)))
    return ResultColumn(name, _COLUMN_TYPES.get(type(dtype), ColumnType.VARCHAR))  # type: ignore[arg-type]


def _value(v, dtype: T.DataType):
    if v is None:
        return None
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return dt.datetime.fromisoformat(v)  # str() gives StarRocks' text: .ffffff only when micros != 0
    if isinstance(dtype, T.DecimalType):
        return format(v, "f")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, (bool, int, float, str, bytes, dt.date)):
        return v
    return json.dumps(v, default=str)

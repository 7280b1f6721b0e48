"""Random queries for property tests: projections, WHERE predicates built from a table's
sampled values, Spark SQL's answer for the same SQL text, and both sides' values in one
canonical form (the StarRocks wire's text forms for dates and timestamps)."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from decimal import Decimal
from zoneinfo import ZoneInfo

import pyarrow as pa
from hypothesis import strategies as st
from pyspark.sql import types as T

MAX_BATCH = 65536

# Literal kinds of the scalar columns a predicate may use.
INTEGRAL = {T.ByteType: (-(2**7), 2**7 - 1), T.ShortType: (-(2**15), 2**15 - 1),
            T.IntegerType: (-(2**31), 2**31 - 1), T.LongType: (-(2**63), 2**63 - 1)}
SAFE_TEXT = "abcdefxyzAZ09 -éü日本🎉"


# ---- canonical values ---------------------------------------------------------------------
def _float(value: float):
    return ("float", "nan" if math.isnan(value) else repr(value))


def canon_spark(value, data_type, zone: str):
    if value is None:
        return None
    if isinstance(data_type, T.DateType):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(data_type, T.TimestampType):  # naive local datetime of an instant
        return value.astimezone(ZoneInfo(zone)).replace(tzinfo=None).isoformat(sep=" ")
    if isinstance(data_type, T.TimestampNTZType):
        return value.isoformat(sep=" ")
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        return _float(value)
    if isinstance(data_type, T.BinaryType):
        return bytes(value)
    if isinstance(data_type, T.ArrayType):
        return tuple(canon_spark(v, data_type.elementType, zone) for v in value)
    if isinstance(data_type, T.MapType):
        return tuple(sorted((canon_spark(k, data_type.keyType, zone), canon_spark(v, data_type.valueType, zone))
                            for k, v in value.items()))
    if isinstance(data_type, T.StructType):
        return tuple(canon_spark(value[i], f.dataType, zone) for i, f in enumerate(data_type.fields))
    return value


def canon_arrow(value, arrow_type: pa.DataType):
    if value is None:
        return None
    if pa.types.is_floating(arrow_type):
        return _float(value)
    if pa.types.is_map(arrow_type):
        return tuple(sorted((canon_arrow(k, arrow_type.key_type), canon_arrow(v, arrow_type.item_type))
                            for k, v in value))
    if pa.types.is_list(arrow_type):
        return tuple(canon_arrow(v, arrow_type.value_type) for v in value)
    if pa.types.is_struct(arrow_type):
        return tuple(canon_arrow(value[f.name], f.type) for f in arrow_type)
    return value


# Types whose values both sides give as the same Python values: no canonical form needed.
_SAME_IN_SPARK = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType,
                  T.DecimalType, T.CharType, T.VarcharType)


def _columns_canon(columns: list[list], canons: list) -> Counter:
    """Rows from their columns, each column through its canonical form (None: as it is),
    counted. Columns at a time: the plain ones cost no Python call per value."""
    done = [col if canon is None else list(map(canon, col)) for col, canon in zip(columns, canons)]
    return Counter(zip(*done))


def spark_counts(rows, fields, zone: str) -> Counter:
    """Spark's rows (``collect()``) in the canonical form, counted."""
    canons = [None if isinstance(f.dataType, _SAME_IN_SPARK) else
              (lambda v, t=f.dataType: canon_spark(v, t, zone)) for f in fields]
    columns = [list(col) for col in zip(*rows)] if rows else [[] for _ in fields]
    return _columns_canon(columns, canons)


def arrow_counts(batches, types: list[pa.DataType]) -> Counter:
    """Arrow batches' rows in the canonical form, counted."""
    canons = [(lambda v, t=t: canon_arrow(v, t)) if pa.types.is_floating(t) or pa.types.is_nested(t) else None
              for t in types]
    columns: list[list] = [[] for _ in types]
    for b in batches:
        for values, col in zip(columns, b.columns):
            values.extend(col.to_pylist())
    return _columns_canon(columns, canons)


def differ(want: Counter, got: Counter) -> tuple[Counter, Counter] | None:
    """None when both hold the same rows, else (missing, extra)."""
    return None if want == got else (want - got, got - want)


# ---- literals -------------------------------------------------------------------------------
def sql_string(text: str) -> str:
    assert "'" not in text and "\\" not in text
    return f"'{text}'"


def safe_text(text) -> bool:
    return isinstance(text, str) and "'" not in text and "\\" not in text and all(ch >= " " for ch in text)


def render_date(value: dt.date) -> str:
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def render(data_type, value) -> str:
    """The SQL literal of a Python value of the column's type (same text for both parsers)."""
    if isinstance(data_type, T.DecimalType):
        return format(value, "f")
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return "CAST('Infinity' AS DOUBLE)" if value > 0 else "CAST('-Infinity' AS DOUBLE)"
        return repr(float(value)).upper()  # 1.5E+38: a double literal; 1.5: a decimal one
    if isinstance(data_type, T.DateType):
        # Both spellings: a DATE literal, or a string Spark casts for the comparison.
        return f"DATE '{render_date(value)}'" if value.day % 2 else sql_string(render_date(value))
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(data_type, T.StringType):
        return sql_string(value)
    if isinstance(data_type, T.BooleanType):
        return "true" if value else "FALSE"
    return str(value)  # integral


def value_strategy(data_type, samples: list, zone: str):
    """Python values of the column's type: mostly values the data holds (so comparisons,
    IN lists and BETWEEN bounds hit rows), sometimes anything of the type."""
    kind = type(data_type)

    def mostly(seen: list, anything):
        seen = st.sampled_from(seen)
        return st.one_of(seen, seen, seen, anything)

    if kind in INTEGRAL:
        lo, hi = INTEGRAL[kind]
        near = sorted({v + d for v in samples for d in (-1, 0, 1) if lo <= v + d <= hi})
        return mostly(near, st.integers(lo, hi))
    if isinstance(data_type, T.DecimalType):
        p, s = data_type.precision, data_type.scale
        anything = st.builds(lambda i, places: Decimal(i).scaleb(-places), st.integers(-(10**p) + 1, 10**p - 1),
                             st.integers(0, s))
        return mostly(samples, anything)
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        width = 32 if isinstance(data_type, T.FloatType) else 64
        special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5]
        return mostly(samples + special, st.floats(width=width, allow_nan=False, allow_infinity=False))
    if isinstance(data_type, T.DateType):
        return mostly(samples, st.dates())
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        if isinstance(data_type, T.TimestampType):  # instants: as wall clock of the server zone
            samples = [v.astimezone(ZoneInfo(zone)).replace(tzinfo=None) for v in samples]
        return mostly(samples, st.datetimes(min_value=dt.datetime(1900, 1, 2), max_value=dt.datetime(9999, 12, 29)))
    if isinstance(data_type, T.StringType):
        return mostly([v for v in samples if safe_text(v)] or [""], st.text(alphabet=SAFE_TEXT, max_size=12))
    if isinstance(data_type, T.BooleanType):
        return st.booleans()
    raise AssertionError(f"no literals for {data_type}")


def ordered(a, b) -> tuple:
    try:
        if not (a != a or b != b):  # NaN has no place in an order
            return (a, b) if a <= b else (b, a)
    except TypeError:
        pass
    return a, b


@st.composite
def like_pattern(draw, samples: list):
    texts = [v for v in samples if safe_text(v) and v]
    base = draw(st.sampled_from(texts)) if texts and draw(st.booleans()) else draw(st.text(alphabet=SAFE_TEXT, max_size=8))
    form = draw(st.integers(0, 4))
    if form == 0 and base:
        i = draw(st.integers(0, len(base)))
        pattern = base[:i] + "%"
    elif form == 1 and base:
        i = draw(st.integers(0, len(base)))
        j = draw(st.integers(i, len(base)))
        pattern = "%" + base[i:j] + "%"
    elif form == 2 and base:
        i = draw(st.integers(0, len(base) - 1))
        pattern = base[:i] + "_" + base[i + 1:]
    elif form == 3:
        pattern = draw(st.text(alphabet=SAFE_TEXT + "%_", max_size=8))
    else:
        pattern = base
    return sql_string(pattern)


def quoted(name: str) -> str:
    return f"`{name}`"


@st.composite
def atom(draw, columns: dict, samples: dict, zone: str):
    form = draw(st.sampled_from(["cmp", "cmp", "in", "between", "like", "null", "mod"]))
    integral = sorted(c for c, t in columns.items() if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType,
                                                                        T.LongType)))
    if form == "mod" and integral:  # a sample of rows: integer % a non-zero integer
        name = draw(st.sampled_from(integral))
        divisor = draw(st.sampled_from([2, 3, -3, 7, 97, 9973, 3_000_000_000]))
        op = draw(st.sampled_from(["=", "!=", "<", ">="]))
        return f"{quoted(name)} % {divisor} {op} {draw(st.integers(-3, 3))}"
    if form in ("null", "mod"):
        name = draw(st.sampled_from(sorted(columns)))
        return f"{quoted(name)} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if form == "like":
        name = draw(st.sampled_from(sorted(c for c, t in columns.items() if isinstance(t, T.StringType))))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{quoted(name)} {neg}LIKE {draw(like_pattern(samples[name]))}"
    name = draw(st.sampled_from(sorted(c for c, t in columns.items() if not isinstance(t, T.BinaryType))))
    data_type, col = columns[name], quoted(name)
    values = value_strategy(data_type, samples[name], zone)
    lit = values.map(lambda v: render(data_type, v))
    if form == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<>", "<", "<=", ">", ">=", "<=>"]))
        return f"{col} {op} {draw(lit)}"
    if form == "in":
        items = draw(st.lists(st.one_of(lit, lit, lit, st.just("NULL")), min_size=1, max_size=4))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{col} {neg}IN ({', '.join(items)})"
    lo, hi = draw(values), draw(values)
    if draw(st.integers(0, 3)):  # mostly low <= high, so the range holds rows
        lo, hi = ordered(lo, hi)
    neg = draw(st.sampled_from(["", "NOT "]))
    return f"{col} {neg}BETWEEN {render(data_type, lo)} AND {render(data_type, hi)}"


def predicate(columns: dict, samples: dict, zone: str):
    leaves = atom(columns, samples, zone)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda t: f"({t[0]}) AND ({t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"({t[0]}) OR ({t[1]})"),
            inner.map(lambda p: f"NOT ({p})"),
        ),
        max_leaves=5,
    )


# ---- tables ---------------------------------------------------------------------------------
class TableInfo:
    """A table the properties query, and where Spark SQL's answer comes from: its folder read
    as plain Parquet, or (``oracle_view``) a temporary view of the rows an independent
    reader of the table format gives (a lakehouse table's files hold deleted rows)."""

    def __init__(self, spark, server, db: str, table: str, sample_fraction: float | None, pushdown: bool = True,
                 oracle_view: str | None = None):
        self.db, self.table = db, table
        # The session Spark SQL's answer comes from. Without filter pushdown for tables whose
        # row groups hold NaN: Spark's semantics order NaN above every number, but its Parquet
        # pushdown prunes by statistics that leave NaN out (starscan.spark.session.scan_session).
        self.reference = spark
        if not pushdown:
            self.reference = spark.newSession()
            self.reference.conf.set("spark.sql.parquet.filterPushdown", "false")
        self.zone = server.settings.time_zone
        self.path = str(server.warehouse.table_path(db, table))
        self.source = oracle_view or f"parquet.`{self.path}`"
        df = spark.table(oracle_view) if oracle_view else spark.read.parquet(self.path)
        self.schema = df.schema
        self.columns = [f.name for f in df.schema.fields]
        self.scalar = {f.name: f.dataType for f in df.schema.fields
                       if not isinstance(f.dataType, (T.ArrayType, T.MapType, T.StructType))}
        rows = (df.sample(fraction=sample_fraction, seed=7) if sample_fraction else df).collect()
        ordered = [c for c, t in self.scalar.items() if not isinstance(t, T.BinaryType)]
        extremes = df.selectExpr(*[f"min(`{c}`) as `min_{c}`" for c in ordered],
                                 *[f"max(`{c}`) as `max_{c}`" for c in ordered]).collect()[0]
        self.samples: dict[str, list] = {}
        for name in ordered:
            values = {r[name] for r in rows if r[name] is not None}
            values |= {v for v in (extremes[f"min_{name}"], extremes[f"max_{name}"]) if v is not None}
            self.samples[name] = sorted(values, key=repr)

    def sql(self, columns: list[str], where: str) -> str:
        return f"select {', '.join(quoted(c) for c in columns)} from {{table}} where {where}"


def run_both(spark, client, info: TableInfo, template: str, batch_size: int):
    sr_sql = template.format(table=f"`{info.db}`.`{info.table}`")
    spark_sql = template.format(table=info.source)
    df = info.reference.sql(spark_sql)
    want = spark_counts(df.collect(), df.schema.fields, info.zone)
    batches = list(client.batches(info.db, info.table, sr_sql, batch_size=batch_size))
    for b in batches:
        assert 1 <= b.num_rows <= batch_size, (b.num_rows, batch_size)
        assert b.schema.names == df.columns
    got = arrow_counts(batches, [f.type for f in batches[0].schema]) if batches else Counter()
    return got, want, sr_sql


def columns_strategy(names: list[str]):
    return st.permutations(names).flatmap(lambda perm: st.integers(1, len(perm)).map(lambda k: list(perm[:k])))

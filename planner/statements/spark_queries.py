"""Read-only queries the FE runs on Spark SQL itself: aggregates, joins, CTEs, window
functions, ORDER BY, over one or several warehouse tables (the statement service's queries, for
every SQL door). A plain single-table scan goes the tablet-parallel way instead.

The statement is parsed once (StarRocks' dialect, as readers write it), refused unless it
only reads, and every table it names is checked against the user's SELECT grants before
anything runs. Each table then becomes a temporary view of its rows as Spark SQL reads them
(planner/statements/table_frames.py) in a session of its own, the statement's table names are replaced
by those views, and Spark SQL answers: Spark SQL's answer is the contract, so it is also
the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from starscan.core.errors import BadRequest, DatabaseNotFound, NoDatabaseSelected, SqlInvalid, TableNotFound
from starscan.expr.functions import PLAIN_CALLS, SPARK_FUNCTIONS
from starscan.planner.statements.catalog_view import CatalogView
from starscan.planner.statements.table_frames import table_frame

# Nodes that write, define or change something: a statement holding one anywhere is refused.
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Merge, exp.TruncateTable,
           exp.Command, exp.Set, exp.Use, exp.Transaction, exp.Commit, exp.Rollback, exp.Into)

# Calls sqlglot knows no class for reach Spark by name: only these (the plan vocabulary's and
# common aggregates and window functions). JVM reflection and file readers are refused in
# any spelling.
_PLAIN_ALLOWED = frozenset(PLAIN_CALLS | SPARK_FUNCTIONS | {
    "approx_count_distinct", "percentile_approx", "approx_percentile", "percentile", "collect_list", "collect_set",
    "any_value", "bool_and", "bool_or", "every", "some", "count_if", "first", "last", "first_value", "last_value",
    "ntile", "cume_dist", "percent_rank", "nth_value", "median", "mode", "kurtosis", "skewness", "corr", "covar_pop",
    "covar_samp", "regr_slope", "regr_intercept", "bit_and", "bit_or", "bit_xor", "max_by", "min_by", "array_agg",
    "date_trunc", "date_format", "to_timestamp", "datediff", "date_add", "date_sub", "months_between", "add_months",
    "concat_ws", "format_number", "regexp_extract", "split", "explode", "posexplode", "array_distinct", "sort_array",
    "struct", "named_struct", "array", "map", "greatest", "least", "nanvl", "isnan", "try_divide", "div", "std",
    "stddev", "variance", "var_samp", "var_pop", "stddev_samp", "stddev_pop", "histogram_numeric",
})
_DENIED = frozenset({"reflect", "java_method", "try_reflect", "read_csv", "read_json", "read_parquet", "read_files",
                     "input_file_name", "input_file_block_start", "input_file_block_length"})


@dataclass(frozen=True)
class PreparedQuery:
    """A checked statement: its Spark SQL text over temporary views, and the table each
    view stands for."""

    spark_sql: str
    views: dict[str, tuple[str, str]]   # view name -> (database, table)
    description: str                     # for Spark's UI and the log


def require_read_only(expression: exp.Expression) -> None:
    """BadRequest unless the statement is a query (SELECT, UNION, a CTE's SELECT, ...) that
    writes, defines and changes nothing."""
    if not isinstance(expression, exp.Query) or any(True for _ in expression.find_all(*_WRITES)):
        raise BadRequest("only queries are answered here (SELECT, WITH ... SELECT, UNION): starscan is read-only; "
                         "DDL, DML and SET statements are refused")


def prepare(expression: exp.Expression, current_db: str | None, view: CatalogView, client: str,
            require_select: Callable[[str, str, str, str], None]) -> PreparedQuery:
    """Check ``expression`` for ``view``'s user at ``client`` (no Spark): it only reads, and
    every table it names is granted (``require_select(user, client, db, table)``: the
    statement service's rule) and exists. Unqualified names are of ``current_db``."""
    require_read_only(expression)
    for call in expression.find_all(exp.Func):
        name = (call.name if isinstance(call, exp.Anonymous) else call.sql_name()).lower()
        if name in _DENIED or isinstance(call, exp.Anonymous) and name not in _PLAIN_ALLOWED:
            raise SqlInvalid(f"unknown or disallowed function {name}")
    stmt = expression.copy()
    ctes = {cte.alias_or_name.lower() for cte in stmt.find_all(exp.CTE)}
    views: dict[tuple[str, str], str] = {}
    for table in list(stmt.find_all(exp.Table)):
        if not table.name:
            raise BadRequest(f"table functions and table-valued expressions are not supported: {table.sql()}")
        named_db = table.text("db")
        if not named_db and table.name.lower() in ctes:
            continue  # a CTE of the statement
        catalog = table.text("catalog")
        if catalog and catalog not in ("def", "default_catalog"):
            raise BadRequest(f"unknown catalog {catalog!r}: starscan serves default_catalog")
        db = named_db or current_db
        if not db:
            raise NoDatabaseSelected(f"No database selected for table {table.name!r}: name it as db.table")
        name = table.name
        require_select(view.user, client, db, name)
        if not view.warehouse.has_database(db):
            raise DatabaseNotFound(db)
        if not view.warehouse.has_table(db, name):
            raise TableNotFound(f"{db}.{name}")
        key = (db, name)
        if key not in views:  # each query's views live in a session of its own (``dataframe``)
            views[key] = f"starscan_table_{len(views)}"
        alias = table.args.get("alias")
        replacement = exp.Table(this=exp.to_identifier(views[key]))
        replacement.set("alias", alias if alias is not None else exp.TableAlias(this=exp.to_identifier(name)))
        table.replace(replacement)
    # A query of no table (a client's ``SELECT 1`` on connect) is Spark SQL's to answer too.
    tables = ", ".join(f"{db}.{t}" for db, t in views) or "no table"
    return PreparedQuery(stmt.sql(dialect="spark"), {v: k for k, v in views.items()}, f"query over {tables}")


def dataframe(spark, prepared: PreparedQuery, view: CatalogView):
    """The statement's DataFrame, in a session of ``spark``'s context whose temporary views
    are the statement's tables (nothing runs until it is read)."""
    session = spark.newSession()
    for name in ("spark.sql.session.timeZone", "spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes"):
        value = spark.conf.get(name, None)
        if value is not None:
            session.conf.set(name, value)
    # Row-group statistics leave NaN out: with filters pushed into the readers, a filter on a
    # float column would skip NaN rows Spark SQL's own rule keeps (scan_session's exact_floats).
    session.conf.set("spark.sql.parquet.filterPushdown", "false")
    session.conf.set("spark.sql.orc.filterPushdown", "false")
    for name, (db, table) in prepared.views.items():
        df, _ = table_frame(session, view, db, table)
        df.createOrReplaceTempView(name)
    return session.sql(prepared.spark_sql)


def query_error(exc: BaseException, prepared: PreparedQuery) -> SqlInvalid | None:
    """Spark's refusal of the statement itself, as a client can act on it: an error Spark
    names with an error condition and a SQLSTATE of the statement's (``42703`` unresolved
    column, ``22018`` a cast of a malformed value, ``22012`` division by zero; not ``XX``,
    Spark's own internal errors), found on the exception or among the causes of a failed
    job, and told in Spark's words with the statement's table names for the views it ran
    over. None for anything else (an internal error: its details stay in the server's log)."""
    for error in _spark_errors(exc):
        state = _call(error, "getSqlState")
        condition = _call(error, "getCondition") or _call(error, "getErrorClass")
        if condition and state and not str(state).startswith("XX"):
            message = (_call(error, "getMessage") or str(error)).strip().splitlines()[0]
            for view, (db, table) in prepared.views.items():
                message = message.replace(f"`{view}`", f"`{db}`.`{table}`").replace(view, f"{db}.{table}")
            return SqlInvalid(message)
    return None


def _spark_errors(exc: BaseException, depth: int = 12) -> list:
    """``exc`` and, for a JVM exception, each of its causes as PySpark's exception classes."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException, convert_exception

    found: list = [exc] if isinstance(exc, CapturedException) else []
    java = exc.java_exception if isinstance(exc, Py4JJavaError) else getattr(exc, "_origin", None)
    while java is not None and len(found) < depth:
        try:
            found.append(convert_exception(java))
            java = java.getCause()
        except Exception:  # noqa: BLE001 - the JVM object is gone or not an exception: no more causes
            break
    return found


def _call(error, name: str):
    method = getattr(error, name, None)
    if method is None:
        return None
    try:
        return method()
    except Exception:  # noqa: BLE001 - this Spark line lacks the JVM method
        return None

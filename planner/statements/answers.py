"""What a door asks of the statement service, and the typed answers it gets back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from starscan.planner.query_plan import ScanPlan


@dataclass(frozen=True)
class Statement:
    """One SQL statement of an authenticated user. ``expression``: the statement as the door's
    own library parsed it (mysql-mimic parses every statement it is sent), else the service
    parses ``sql``. ``limit``: a limit the client set on its session (MySQL's
    ``sql_select_limit``), which answers as MySQL's does: at most that many rows."""

    user: str
    client: str
    door: str                               # "mysql", "flight-sql": the audit line's and the log's word
    sql: str
    database: str | None = None             # the current database
    expression: exp.Expression | None = None
    limit: int | None = None


@dataclass(frozen=True)
class ScanAnswer:
    """A plain SELECT of one table: its tablets, read by the BEs' scan core. ``limit``: the
    statement's LIMIT (or the client's), which whoever reads the rows stops at."""

    db: str
    table: str
    plan: ScanPlan
    limit: int | None
    statement: Statement


@dataclass(frozen=True)
class QueryAnswer:
    """A query the FE runs on Spark SQL (aggregates, joins, CTEs, windows, ORDER BY, ...):
    its DataFrame, built once and not yet run."""

    frame: Any
    description: str
    limit: int | None
    prepared: Any = None  # spark_queries.PreparedQuery: the tables its views stand for (its errors name them)


@dataclass(frozen=True)
class TableAnswer:
    """Metadata (SHOW, DESC, information_schema), answered whole: it is small."""

    table: pa.Table


Answer = ScanAnswer | QueryAnswer | TableAnswer

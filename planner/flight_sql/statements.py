"""A Flight SQL statement -> its result schema and endpoints (docs/flight-sql.md).

* A plain single-table SELECT (columns and expressions, WHERE) is planned as ``_query_plan``
  plans it, and its tablets become endpoints: one per BE's tablets, each ticket
  the signed plan and the group's tablets. An endpoint's locations are every BE that holds
  its tablets (a client that loses one tries the next), or the FE itself when it relays the
  BEs' streams (``flight_proxy``).
* Any other query (aggregates, joins, CTEs, window functions, ORDER BY, LIMIT) is answered by
  the FE on Spark SQL (planner/sql_queries.py): one endpoint, at the FE.
* SHOW DATABASES / SHOW TABLES / DESC are answered by the FE from the user's catalog view.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from starscan.core.errors import BadRequest, SqlInvalid
from starscan.core.sql_types import parse_type
from starscan.flight import tickets
from starscan.planner import sql_queries
from starscan.planner.auth import require_select
from starscan.planner.flight_sql import catalog
from starscan.planner.mysql import select
from starscan.planner.mysql.catalog_view import CatalogView
from starscan.planner.query_plan import QueryPlanner
from starscan.planner.sql import syntax_error
from starscan.plans import codec as plan_codec
from starscan.settings.config import Settings

SCAN_BATCH_ROWS = 65_536   # rows per record batch of a scan's stream


CLIENT = "flight-sql"  # how refusals name the caller: pyarrow's middleware does not give its address


@dataclass(frozen=True)
class Endpoint:
    ticket: bytes
    locations: list[str]     # Flight URIs; empty: the FE that answered GetFlightInfo


@dataclass(frozen=True)
class Planned:
    schema: pa.Schema
    endpoints: list[Endpoint]
    rows: int = -1


def parse(sql: str) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(sql, dialect="starrocks") if s is not None]
    except (ParseError, TokenError) as exc:
        raise SqlInvalid(syntax_error(exc)) from None
    if len(statements) != 1:
        raise SqlInvalid("exactly one statement is expected")
    statement = statements[0]
    assert isinstance(statement, exp.Expression)
    return statement


def plan(sql: str, database: str | None, view: CatalogView, planner: QueryPlanner, spark, settings: Settings,
         signer: plan_codec.Signer, flight_uri: dict[str, str], fe_uri: str) -> Planned:
    """The statement's schema and endpoints, for ``view``'s user. ``flight_uri``: each BE's
    Thrift address (a plan's routing) -> its Flight URI."""
    user = view.user
    if catalog.is_show(sql):
        table = catalog.show(sql, database, view)
        return Planned(table.schema, [Endpoint(tickets.encode(tickets.query_ticket(user, sql, database), signer), [])],
                       table.num_rows)
    expression = parse(sql)
    if isinstance(expression, exp.Select) and select.is_plain(expression):
        scan = _scan(sql, expression, view, planner, settings, signer, flight_uri, fe_uri)
        if scan is not None:
            return scan
    prepared = sql_queries.prepare(expression, database, view, CLIENT)
    schema = query_schema(sql_queries.dataframe(spark, prepared, view), settings.time_zone)
    return Planned(schema, [Endpoint(tickets.encode(tickets.query_ticket(user, sql, database), signer), [])])


def query_schema(df, time_zone: str) -> pa.Schema:
    """The Arrow schema of a query's result, as the FE streams it: Spark's Arrow types,
    timestamps in the session's time zone (as the BEs' scans send them)."""
    from starscan.spark import compat

    return compat.arrow_schema(df.schema, time_zone)


def _scan(sql: str, expression: exp.Select, view: CatalogView, planner: QueryPlanner, settings: Settings,
          signer: plan_codec.Signer, flight_uri: dict[str, str], fe_uri: str) -> Planned | None:
    """The tablet-parallel endpoints of a plain SELECT; None when ``_query_plan`` does not plan
    the statement's shape (LIMIT, an unqualified table): the FE answers it on Spark SQL."""
    from_ = expression.args.get("from_") or expression.args.get("from")
    assert from_ is not None  # is_plain said so
    source = from_.this
    db, table = source.text("db"), source.name
    if not db or source.text("catalog"):
        return None
    require_select(view.users, view.user, CLIENT, db, table)
    try:
        answer = json.loads(planner.query_plan_json(db, table, sql, view.user))
    except BadRequest:
        return None  # a shape the scan path does not take
    encoded = answer.get("opaqued_query_plan")
    decoded = plan_codec.decode(encoded, signer) if encoded else None
    schema = _plan_schema(decoded, settings.time_zone) if decoded is not None else \
        catalog.table_schema(view, db, table, settings.time_zone)
    if decoded is None:
        return Planned(schema, [], 0)
    by_be: dict[tuple[str, ...], list[int]] = {}
    for tablet_id, part in answer["partitions"].items():
        by_be.setdefault(tuple(part["routings"]), []).append(int(tablet_id))
    endpoints = []
    for routings, tablet_ids in by_be.items():
        tablet_ids.sort()
        size = max(1, math.ceil(len(tablet_ids) / settings.flight_endpoints_per_be))
        locations = [fe_uri] if settings.flight_proxy else [flight_uri[r] for r in routings if r in flight_uri]
        for start in range(0, len(tablet_ids), size):
            ticket = tickets.ScanTicket(encoded, tuple(tablet_ids[start:start + size]), SCAN_BATCH_ROWS,
                                        routings=routings)
            endpoints.append(Endpoint(tickets.encode(ticket, signer), locations))
    return Planned(schema, endpoints)


def _plan_schema(decoded, time_zone: str) -> pa.Schema:
    return pa.schema([pa.field(c.name, parse_type(json.loads(c.spark_type)).spark_arrow_type(time_zone), c.nullable)
                      for c in decoded.columns])

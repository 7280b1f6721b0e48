"""The FE's statement service: every door's statements answered in one place.

The doors (the HTTP port's ``_query_plan``, the MySQL port, Arrow Flight SQL) authenticate
their caller, parse their wire and render what they get; this service holds the policy:

* **what a statement is**: SHOW/DESC and information_schema (metadata, answered whole), a
  plain SELECT of one table (a tablet-parallel scan the BEs' scan core reads, the plan
  ``_query_plan`` makes), or any other query (Spark SQL runs it on the FE). A statement that
  writes is refused: starscan is read-only.
* **who may**: the user's SELECT grant on every table a statement reads, checked here only
  (a table without a grant reads as missing in metadata); then the table's existence.
* **how often and how many at once**: ``plan_rate_per_user`` and ``plan_concurrency``, for
  every plan whatever door asked for it.
* **how many rows**: every row, streamed (``rows``). A client's own limit (LIMIT, MySQL's
  ``sql_select_limit``) stops the rows there; an operator's ``query_max_rows`` fails the
  statement past it (ResultTooLarge, naming the setting), never a shorter answer.
* **the audit trail**: one ``plan`` line per plan and one ``query`` line per query the FE
  runs, with the door that asked.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from starscan.core.errors import (
    BadRequest,
    DirectReadDenied,
    PrivilegeMissing,
    ResultTooLarge,
    SelectPrivilegeMissing,
    SqlInvalid,
    StarscanError,
    TooManyRequests,
)
from starscan.core.sql_types import parse_type
from starscan.planner import sql as sqlmod
from starscan.planner.plan_requests import PlanRequest
from starscan.planner.query_plan import AUDIT_SQL_CHARS, QueryPlanner
from starscan.planner.sql import syntax_error
from starscan.planner.statements import admin_show, info_schema, show, spark_queries
from starscan.planner.statements.answers import Answer, QueryAnswer, ScanAnswer, Statement, TableAnswer
from starscan.planner.statements.catalog_view import INFORMATION_SCHEMA, CatalogView
from starscan.planner.statements.scan_reads import Batches, ScanReads
from starscan.security.audit import AuditLog
from starscan.security.ratelimit import TokenBuckets
from starscan.security.users import UserStore
from starscan.settings.runtime import LiveSettings
from starscan.spark import compat, pyspark_internals

log = logging.getLogger("starscan.planner")

# What makes a SELECT more than a scan (``_query_plan``'s refusals), LIMIT aside: the rows'
# reader stops at a LIMIT itself.
_NOT_PLAIN = tuple(t for t in sqlmod.SCAN_ONLY if t is not exp.Limit) + (exp.Subquery,)


class StatementService:
    def __init__(self, planner: QueryPlanner, users: UserStore, spark, live: LiveSettings, audit: AuditLog | None,
                 reads: ScanReads):
        self.planner = planner
        self.users = users
        self.spark = spark
        self.live = live
        self.audit = audit
        self.reads = reads
        settings = live.current
        self.plan_rate = TokenBuckets(settings.plan_rate_per_user, settings.plan_rate_burst)
        # Planning is CPU work under the GIL: many plans at once only share the same cores, and
        # without a bound (anyio's 40 threads) 50 callers of a 10,000-tablet table got p50 0.8 s
        # but p99 21 s at 24 plans/s; with 2 or 8 slots p99 1.4 s at 55-60 plans/s. Under the
        # mixed locust load 8 slots planned 46/s against 2 slots' 36/s (bench/RESULTS.md).
        self.planning = threading.BoundedSemaphore(settings.plan_concurrency)
        live.subscribe(["plan_rate_per_user", "plan_rate_burst"],
                       lambda s, _: self.plan_rate.configure(s.plan_rate_per_user, s.plan_rate_burst))

    def view(self, user: str) -> CatalogView:
        """What ``user`` may see of the warehouse."""
        return CatalogView(self.planner.warehouse, self.planner.schemas, self.users, user)

    # ---- the rules every door's plans keep ----
    def take_plan_token(self, user: str) -> None:
        """TooManyRequests when ``user`` is over ``plan_rate_per_user``."""
        wait = self.plan_rate.acquire(user)
        if wait:
            settings = self.live.current
            raise TooManyRequests(
                f"user {user} is over plan_rate_per_user={settings.plan_rate_per_user:g}/s "
                f"(burst {settings.plan_rate_burst}): retry in {wait:.2f} s", retry_after_s=wait)

    def require_select(self, user: str, client: str, db: str, table: str, reload: bool = True) -> None:
        """SelectPrivilegeMissing unless ``user`` holds SELECT on the table. ``reload``: read
        the users file again if it changed (not when authentication just read it)."""
        if not self.users.can_select(user, db, table, reload=reload):
            raise SelectPrivilegeMissing(
                f"Access denied; you need (at least one of) the SELECT privilege(s) on TABLE {db}.{table} "
                f"for {user}@{client}")

    def require_direct_read(self, user: str, client: str, db: str, table: str) -> None:
        """A direct plan names the table's files: only for holders of DIRECT_READ on it."""
        if not self.users.can_direct_read(user, db, table, reload=False):
            raise DirectReadDenied(
                f"Access denied; a direct plan (\"direct\": true) of TABLE {db}.{table} needs the DIRECT_READ privilege "
                f"for {user}@{client}: an administrator grants it with `starscan user grant {user} {db}.{table} "
                "--direct-read`; without \"direct\" the same plan reads through the BE")

    def require_admin(self, user: str, client: str) -> None:
        """The FE's configuration is an administrator's (root or the ``admin`` grant)."""
        if not self.users.is_admin(user):
            raise PrivilegeMissing(
                f"Access denied; you need (at least one of) the OPERATE privilege(s) on SYSTEM for {user}@{client}: "
                f"an administrator grants it with `starscan user grant {user} admin`")

    @contextmanager
    def audited_plan(self, door: str, client: str, db: str, table: str) -> Iterator[dict]:
        """The audit line of one plan, written when the block ends (with the error's status
        when it raised). The block fills the dict it is given (``user``, ``sql``, ...)."""
        info: dict = {"user": None}
        started = time.monotonic()
        try:
            yield info
        except StarscanError as exc:
            self._audit_plan(door, client, db, table, info, started, exc.http_status, exc.message)
            raise
        self._audit_plan(door, client, db, table, info, started, 200, None)

    def admit_plan(self, user: str, client: str, db: str, table: str, wanted: PlanRequest, info: dict) -> bytes | None:
        """The rules a ``_query_plan`` request keeps before it is planned: the plan rate, the
        SELECT grant (from the users file authentication just read: no I/O, so the HTTP door
        may call this on its event loop), DIRECT_READ for a direct plan. Returns the plan
        when its answer is at hand (``QueryPlanner.quick_plan_json``: nothing listed, read
        or waited for); None when it must be made in a thread (``plan``)."""
        self.take_plan_token(user)
        info["sql"] = wanted.sql
        self.require_select(user, client, db, table, reload=False)
        if wanted.direct:
            info["direct"] = True
            self.require_direct_read(user, client, db, table)
        if wanted.since_version is None and wanted.consumer is None and not wanted.cursor and not wanted.direct:
            return self.planner.quick_plan_json(db, table, wanted.sql, user, info)
        return None

    def plan(self, user: str, db: str, table: str, wanted: PlanRequest, info: dict) -> bytes:
        """``_query_plan``'s answer to a request ``admit_plan`` let through, made in one of
        the ``plan_concurrency`` planning slots (call in a thread)."""
        with self.planning:
            return self.planner.query_plan_json(db, table, wanted.sql, user, info, wanted.since_version,
                                                wanted.consumer, wanted.cursor, wanted.direct,
                                                wanted.direct_row_deletes)

    # ---- SQL statements ----
    def execute(self, stmt: Statement) -> Answer:
        """What ``stmt`` answers (nothing read yet: ``rows`` reads it)."""
        if stmt.expression is None:
            is_config, pattern = admin_show.match(stmt.sql)
            if is_config:
                self.require_admin(stmt.user, stmt.client)
                return TableAnswer(admin_show.frontend_config(pattern, self.live.current))
        expression = stmt.expression if stmt.expression is not None else parse(stmt.sql)
        view = self.view(stmt.user)
        if isinstance(expression, exp.Show):
            return TableAnswer(show.answer(expression, stmt.database, view, info_schema.table_names()))
        if isinstance(expression, exp.Describe):
            return TableAnswer(show.describe_table(expression.this, stmt.database, view))
        if info_schema.reads(expression, stmt.database):
            rows, header = info_schema.query(expression, view)
            return TableAnswer(show.table(rows, header))
        spark_queries.require_read_only(expression)
        plain = _plain_select(expression, stmt.database)
        # A scan's rows are read from the BEs' Flight ports: with those off (be_flight_port
        # -1), Spark SQL on the FE gives the same rows.
        if plain is not None and self.reads.can_read():
            answer = self._scan(stmt, *plain)
            if answer is not None:
                return answer
        return self._query(stmt, expression, view)

    def _scan(self, stmt: Statement, db: str, table: str, sql: str, limit: int | None) -> ScanAnswer | None:
        """The plan of a plain SELECT of columns; None when ``_query_plan`` does not plan its
        shape (a function only Spark SQL knows) or the BEs do not read it (an output that is
        an expression, not a column: StarRocks' scan protocol sends columns only): the FE
        runs it on Spark SQL."""
        # The reader's own SQL where the scan path takes it as written (the plan and the BE's
        # audit line name it), else the statement qualified and without its LIMIT.
        candidates = [stmt.sql, sql] if limit is None and stmt.sql != sql else [sql]
        parsed = None
        for text in candidates:
            try:
                parsed = self.planner.parse(text, db, table)
            except (BadRequest, SqlInvalid):
                continue
            sql = text
            break
        if parsed is None:
            return None  # Spark SQL's answer, or its refusal
        if not all(item.is_star or (item.expr is not None and item.expr.kind == "column") for item in parsed.items):
            return None
        with self.audited_plan(stmt.door, stmt.client, db, table) as info:
            info.update(user=stmt.user, sql=stmt.sql)
            self.take_plan_token(stmt.user)
            self.require_select(stmt.user, stmt.client, db, table)
            with self.planning:
                plan = self.planner.scan_plan(db, table, sql, stmt.user, info)
        client_limit = stmt.limit if limit is None else limit
        return ScanAnswer(db, table, plan, client_limit, stmt)

    def _query(self, stmt: Statement, expression: exp.Expression, view: CatalogView) -> QueryAnswer:
        prepared = spark_queries.prepare(expression, stmt.database, view, stmt.client, self.require_select)
        try:
            frame = spark_queries.dataframe(self.spark, prepared, view)
        except Exception as exc:
            refused = spark_queries.query_error(exc, prepared)
            if refused is None:
                raise
            raise refused from None
        if self.audit is not None:
            self.audit.record("query", user=stmt.user, client=stmt.client, door=stmt.door,
                              tables=[f"{db}.{t}" for db, t in prepared.views.values()], sql=stmt.sql[:AUDIT_SQL_CHARS])
        has_limit = isinstance(expression, exp.Query) and expression.args.get("limit") is not None
        return QueryAnswer(frame, prepared.description, None if has_limit else stmt.limit, prepared)

    # ---- an answer's rows ----
    def schema(self, answer: Answer) -> pa.Schema:
        """The Arrow schema of the answer's rows, before any is read."""
        time_zone = self.live.current.time_zone
        if isinstance(answer, TableAnswer):
            return answer.table.schema
        if isinstance(answer, QueryAnswer):
            return compat.arrow_schema(answer.frame.schema, time_zone)
        return pa.schema([pa.field(c.name, parse_type(json.loads(c.spark_type)).spark_arrow_type(time_zone), c.nullable)
                          for c in answer.plan.columns])

    def rows(self, answer: Answer, client: str) -> Batches:
        """The answer's rows as Arrow batches, streamed as they are read (the Spark SQL
        query's a partition at a time; the scan's as the BEs send them), and their schema.
        Closing the batches' generator ends the reading."""
        if isinstance(answer, TableAnswer):
            return answer.table.schema, iter(answer.table.to_batches())
        if isinstance(answer, QueryAnswer):
            settings = self.live.current
            schema, batches = pyspark_internals.arrow_batches(answer.frame, settings.time_zone, settings.bind_host,
                                                              settings.advertise_host)
            return schema, self._bounded(_refused_as_sql(batches, answer.prepared), answer.limit)
        if not answer.plan.encoded:
            return self.schema(answer), iter(())
        tickets = self.reads.tickets_of(answer.plan.encoded, answer.plan.routings, 1)
        schema, first = self.reads.read(tickets[0], client)
        return schema, self._bounded(_chained(first, tickets[1:], lambda t: self.reads.read(t, client)[1]),
                                     answer.limit)

    def _bounded(self, batches: Iterator[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
        """``batches`` up to the client's ``limit`` rows; ResultTooLarge past the operator's
        ``query_max_rows``."""
        cap = self.live.current.query_max_rows
        sent = 0
        try:
            for batch in batches:
                if limit is not None and sent + batch.num_rows >= limit:
                    if limit > sent:
                        yield batch.slice(0, limit - sent)
                    return
                sent += batch.num_rows
                if cap is not None and sent > cap:
                    raise ResultTooLarge(
                        f"the statement's result has more than query_max_rows={cap} rows (the operator's limit): "
                        "filter or aggregate it, add a LIMIT, or ask for the limit to be raised")
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _audit_plan(self, door: str, client: str, db: str, table: str, info: dict, started: float, status: int,
                    error: str | None) -> None:
        user = info.get("user")
        # DEBUG: the audit line says the same, and a line per plan in the application log costs
        # the FE a write under load.
        log.debug("plan user=%s client=%s door=%s table=%s.%s status=%d query_id=%s", user, client, door, db, table,
                  status, info.get("query_id"))
        if self.audit is None:
            return
        self.audit.record(
            "plan", user=user, client=client, door=door, table=f"{db}.{table}", query_id=info.get("query_id"),
            sql=info.get("sql"), columns=info.get("columns"), tablets=info.get("tablets"), version=info.get("version"),
            duration_ms=round((time.monotonic() - started) * 1000, 1), status=status, error=error,
            **({"direct": True, "direct_files": info.get("direct_files", [])} if info.get("direct") else {}))


def parse(sql: str) -> exp.Expression:
    """One statement in StarRocks' dialect."""
    try:
        statements = [s for s in sqlglot.parse(sql, dialect="starrocks") if s is not None]
    except (ParseError, TokenError) as exc:
        raise SqlInvalid(syntax_error(exc)) from None
    if len(statements) != 1:
        raise SqlInvalid("exactly one statement is expected")
    statement = statements[0]
    assert isinstance(statement, exp.Expression)
    return statement


def _plain_select(expression: exp.Expression, current_db: str | None) -> tuple[str, str, str, int | None] | None:
    """(db, table, the SELECT without its LIMIT as ``_query_plan`` takes it, the LIMIT) of a
    SELECT of one table's columns and expressions with WHERE and LIMIT at most; None for
    anything else."""
    if not isinstance(expression, exp.Select):
        return None
    from_ = expression.args.get("from_") or expression.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table) or expression.args.get("joins"):
        return None
    if expression.args.get("with_") or expression.args.get("with") or expression.find(*_NOT_PLAIN) is not None:
        return None
    source = from_.this
    db, table = source.text("db") or current_db, source.name
    catalog = source.text("catalog")
    if not db or not table or (catalog and catalog not in ("def", "default_catalog")):
        return None  # the query path says what is wrong
    if db.lower() == INFORMATION_SCHEMA:
        return None
    limit = None
    node = expression.args.get("limit")
    if node is not None:
        value = node.expression
        if node.args.get("offset") is not None or not (
                isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit()):
            return None
        limit = int(value.this)
    stmt = expression.copy()
    stmt.set("limit", None)
    plain_from = stmt.args.get("from_") or stmt.args.get("from")
    assert plain_from is not None
    plain_source = plain_from.this
    plain_source.set("catalog", None)
    plain_source.set("db", exp.to_identifier(db, quoted=True))
    plain_source.set("this", exp.to_identifier(table, quoted=True))
    return db, table, stmt.sql(dialect="starrocks"), limit


def _refused_as_sql(batches: Iterator[pa.RecordBatch], prepared) -> Iterator[pa.RecordBatch]:
    """A query's batches; Spark's refusal of the statement while it runs (a malformed cast,
    a division by zero) as the statement's error (spark_queries.query_error)."""
    try:
        yield from batches
    except Exception as exc:
        refused = spark_queries.query_error(exc, prepared) if prepared is not None else None
        if refused is None:
            raise
        raise refused from None


def _chained(first: Iterator[pa.RecordBatch], rest: list, open_next) -> Iterator[pa.RecordBatch]:
    """The batches of ``first``, then of each of ``rest`` opened in turn; the one being read
    is closed when the chain is."""
    current = first
    try:
        yield from current
        for item in rest:
            current = open_next(item)
            yield from current
    finally:
        close = getattr(current, "close", None)
        if close is not None:
            close()

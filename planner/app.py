"""The FE HTTP app (FastAPI): `_query_plan`, `_schema`, health."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from starscan import __version__
from starscan.core.errors import BadRequest, RequestTooLarge, StarscanError, TooManyRequests, unexpected_error_message
from starscan.planner.auth import Authenticator
from starscan.planner.errors import error_response, handle_starscan_error
from starscan.planner.query_plan import QueryPlanner, read_plan_body, table_version
from starscan.security.audit import AuditLog
from starscan.security.ratelimit import TokenBuckets
from starscan.settings.config import Settings
from starscan.settings.runtime import LiveSettings
from starscan.spark.session import spark_health, spark_problem
from starscan.tables.consumers import check_consumer_name

log = logging.getLogger("starscan.planner")


class _Segment(Convertor):
    """A path segment that may be empty, so `/api//t/_query_plan` reaches our handler."""

    regex = "[^/]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


_PLAN_PATH = re.compile(r"/api/([^/]*)/([^/]*)/_query_plan")


class _PlanRoute:
    """ASGI middleware: `_query_plan` (GET and POST) straight to its handler.

    It is the FE's hot path. Under 50 callers, FastAPI's routing, its dependency solving and
    the middleware below it took about 30 % of the server's CPU per plan (0.62 ms against
    0.44 without them; bench/RESULTS.md, plan_latency), so plans skip them; everything else
    goes on to FastAPI. The route stays registered with FastAPI too (the OpenAPI document lists it),
    and both run the same handler, with errors rendered by the same two handlers."""

    def __init__(self, app, endpoint, unexpected):
        self.app = app
        self.endpoint = endpoint
        self.unexpected = unexpected

    async def __call__(self, scope, receive, send):
        found = _PLAN_PATH.fullmatch(_route_path(scope)) if scope["type"] == "http" and \
            scope["method"] in ("GET", "POST") else None
        if found is None:
            return await self.app(scope, receive, send)
        request = Request(scope, receive)
        try:
            response = await self.endpoint(request, found.group(1), found.group(2))
        except StarscanError as exc:
            response = error_response(exc)
        except Exception as exc:  # noqa: BLE001 - rendered as FastAPI's handler renders it
            response = await self.unexpected(request, exc)
        await response(scope, receive, send)


def _route_path(scope) -> str:
    """The path the routes see: without the app's mount prefix (``root_path``), as Starlette's."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(f"request body is {declared} bytes, more than max_request_body_bytes={limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"request body is more than max_request_body_bytes={limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _plan(request: Request, db: str, table: str, who: str, client: str, settings: Settings, planner: QueryPlanner,
                auth: Authenticator, planning: asyncio.Semaphore, info: dict) -> bytes:
    """The plan a ``_query_plan`` request asks of an authenticated user: its body read and
    checked, the grants it needs held, then made on the event loop when its answer is at
    hand, else in a thread (at most ``planning`` at once)."""
    if not db or not table:
        raise BadRequest(f"{db}/{table} must be selected")
    wanted = read_plan_body(await read_body(request, settings.max_request_body_bytes), settings.max_sql_length)
    since = wanted.since_version
    if since is None and "since_version" in request.query_params:  # the GET form's parameter
        text = request.query_params["since_version"].strip()
        since = table_version(int(text) if text.isdigit() else text, "since_version")
    info["sql"] = wanted.sql
    # The grants, from the users file authentication just read: no I/O on the loop.
    auth.require_select(who, client, db, table)
    if wanted.direct:
        info["direct"] = True
        auth.require_direct_read(who, client, db, table)
    if since is None and wanted.consumer is None and not wanted.cursor and not wanted.direct:
        # A plan whose answer is at hand is made here, on the event loop: nothing in
        # it lists, reads or waits (QueryPlanner.quick_plan_json).
        body = planner.quick_plan_json(db, table, wanted.sql, who, info)
        if body is not None:
            return body
    async with planning:
        return await run_in_threadpool(planner.query_plan_json, db, table, wanted.sql, who, info, since,
                                       wanted.consumer, wanted.cursor, wanted.direct, wanted.direct_row_deletes)


def create_app(planner: QueryPlanner, auth: Authenticator, live: LiveSettings, audit: AuditLog | None = None) -> FastAPI:
    register_url_convertor("seg", _Segment())  # a path segment that may be empty (StarRocks' 404s)
    app = FastAPI(title="starscan FE", version=__version__, description="StarRocks FE scan-planning endpoints served from Spark tables.")
    app.add_exception_handler(StarscanError, handle_starscan_error)  # type: ignore[arg-type]
    app.state.planner = planner
    app.state.auth = auth
    settings = live.current  # at start; a request reads live.current for the keys that change at run time
    plan_rate = TokenBuckets(settings.plan_rate_per_user, settings.plan_rate_burst)
    app.state.plan_rate = plan_rate  # update_config changes its limits
    # Planning is CPU work under the GIL: many plans at once only share the same cores, and
    # without a bound (anyio's 40 threads) 50 callers of a 10,000-tablet table got p50 0.8 s
    # but p99 21 s at 24 plans/s; with 2 or 8 slots (FIFO) p99 1.4 s at 55-60 plans/s. Under
    # the mixed locust load 8 slots planned 46/s against 2 slots' 36/s (bench/RESULTS.md).
    planning = asyncio.Semaphore(settings.plan_concurrency)

    def client_of(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    async def query_plan(request: Request, db: str, table: str) -> Response:
        client = client_of(request)
        started = time.monotonic()
        settings = live.current
        info: dict = {}
        user = None
        try:
            header = request.headers.get("authorization")
            recent = auth.authenticate_recent(header, client)
            who = recent if recent is not None else await run_in_threadpool(auth.authenticate, header, client)
            user = who
            wait = plan_rate.acquire(who)
            if wait:
                raise TooManyRequests(
                    f"user {user} is over plan_rate_per_user={settings.plan_rate_per_user:g}/s "
                    f"(burst {settings.plan_rate_burst}): retry in {wait:.2f} s", retry_after_s=wait)
            body = await _plan(request, db, table, who, client, settings, planner, auth, planning, info)
        except StarscanError as exc:
            _audit_plan(audit, user, client, db, table, info, started, exc.http_status, exc.message)
            raise
        _audit_plan(audit, user, client, db, table, info, started, 200, None)
        return Response(body, media_type="application/json")

    async def selecting_user(request: Request, db: str, table: str) -> str:
        """The authenticated user, who must hold SELECT on the table (401 / 403 otherwise)."""
        client = client_of(request)
        user = await run_in_threadpool(auth.authenticate, request.headers.get("authorization"), client)
        await run_in_threadpool(auth.require_select, user, client, db, table)
        return user

    async def consumer_position(request: Request, db: str, table: str, name: str) -> JSONResponse:
        await selecting_user(request, db, table)
        return JSONResponse(await run_in_threadpool(planner.consumer_position, db, table, check_consumer_name(name)))

    async def consumer_commit(request: Request, db: str, table: str, name: str) -> JSONResponse:
        user = await selecting_user(request, db, table)
        body = await read_body(request, live.current.max_request_body_bytes)
        try:
            doc = json.loads(body or b"null")
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "version" not in doc:
            raise BadRequest('the body is {"version": V}: the "version" of the plan whose rows were handled')
        version = table_version(doc["version"])
        return JSONResponse(await run_in_threadpool(planner.commit_consumer, db, table, check_consumer_name(name),
                                                    version, user))

    async def table_schema(request: Request, db: str, table: str) -> JSONResponse:
        client = client_of(request)
        user = await run_in_threadpool(auth.authenticate, request.headers.get("authorization"), client)
        if not db or not table:
            raise BadRequest("No database or table selected.")
        await run_in_threadpool(auth.require_select, user, client, db, table)
        return JSONResponse(await run_in_threadpool(planner.table_schema, db, table))

    # One route per method: a route with two methods gets one operationId twice in the OpenAPI document.
    app.add_api_route("/api/{db:seg}/{table:seg}/_query_plan", query_plan, methods=["POST"], summary="Plan a single-table scan",
                      operation_id="query_plan_post")
    app.add_api_route("/api/{db:seg}/{table:seg}/_query_plan", query_plan, methods=["GET"], summary="Plan a single-table scan (GET)",
                      operation_id="query_plan_get")
    app.add_api_route("/api/{db:seg}/{table:seg}/_schema", table_schema, methods=["GET"], summary="Table schema")
    app.add_api_route("/api/{db:seg}/{table:seg}/_consumers/{name}", consumer_position, methods=["GET"],
                      summary="A consumer's committed version")
    app.add_api_route("/api/{db:seg}/{table:seg}/_consumers/{name}/commit", consumer_commit, methods=["POST"],
                      summary="Commit a consumer's version (idempotent, never backwards)")

    @app.get("/api/health", summary="Liveness, as StarRocks' BE answers it; RECOVERING while a new SparkSession starts, 503 when Spark is gone for good")
    async def health() -> JSONResponse:
        status, message, code = await run_in_threadpool(spark_health, planner.schemas.spark)
        return JSONResponse({"status": status, "msg": message}, status_code=code)

    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        from starscan.core.errors import InternalError, SparkUnavailable

        problem = await run_in_threadpool(spark_problem, planner.schemas.spark)
        if problem is not None:
            log.error("%s failed: Spark is unavailable: %s", request.url.path, problem)
            return error_response(SparkUnavailable(f"Spark is unavailable: {problem}"))
        log.exception("unexpected error on %s", request.url.path)

        return error_response(InternalError(unexpected_error_message(exc)))

    app.add_exception_handler(Exception, _unexpected)
    app.add_middleware(_PlanRoute, endpoint=query_plan, unexpected=_unexpected)
    return app


def _audit_plan(audit: AuditLog | None, user, client, db, table, info: dict, started: float, status: int, error) -> None:
    # DEBUG: the audit line says the same, and a line per plan in the application log costs
    # the FE a write under load.
    log.debug("plan user=%s client=%s table=%s.%s status=%d query_id=%s", user, client, db, table, status, info.get("query_id"))
    if audit is None:
        return
    audit.record("plan", user=user, client=client, table=f"{db}.{table}", query_id=info.get("query_id"),
                 sql=info.get("sql"), columns=info.get("columns"), tablets=info.get("tablets"), version=info.get("version"),
                 duration_ms=round((time.monotonic() - started) * 1000, 1), status=status, error=error,
                 **({"direct": True, "direct_files": info.get("direct_files", [])} if info.get("direct") else {}))

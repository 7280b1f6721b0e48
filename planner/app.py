"""The FE HTTP app (FastAPI): `_query_plan`, `_schema`, health."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from starscan import __version__
from starscan.core.errors import BadRequest, RequestTooLarge, StarscanError, internal_error
from starscan.planner.auth import Authenticator
from starscan.planner.errors import error_response, handle_starscan_error
from starscan.planner.plan_requests import PlanRequest, read_plan_body, table_version
from starscan.planner.statements import StatementService
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


async def _plan_request(request: Request, db: str, table: str, settings: Settings) -> PlanRequest:
    """What a ``_query_plan`` request asks for: its path, body and (the GET form's)
    ``since_version`` parameter read and checked."""
    if not db or not table:
        raise BadRequest(f"{db}/{table} must be selected")
    wanted = read_plan_body(await read_body(request, settings.max_request_body_bytes), settings.max_sql_length)
    if wanted.since_version is None and "since_version" in request.query_params:
        text = request.query_params["since_version"].strip()
        wanted = replace(wanted, since_version=table_version(int(text) if text.isdigit() else text, "since_version"))
    return wanted


def create_app(statements: StatementService, auth: Authenticator, live: LiveSettings) -> FastAPI:
    planner = statements.planner
    register_url_convertor("seg", _Segment())  # a path segment that may be empty (StarRocks' 404s)
    app = FastAPI(title="starscan FE", version=__version__, description="StarRocks FE scan-planning endpoints served from Spark tables.")
    app.add_exception_handler(StarscanError, handle_starscan_error)  # type: ignore[arg-type]
    app.state.planner = planner
    app.state.auth = auth

    def client_of(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    async def query_plan(request: Request, db: str, table: str) -> Response:
        client = client_of(request)
        settings = live.current
        with statements.audited_plan("http", client, db, table) as info:
            header = request.headers.get("authorization")
            recent = auth.authenticate_recent(header, client)
            who = recent if recent is not None else await run_in_threadpool(auth.authenticate, header, client)
            info["user"] = who
            wanted = await _plan_request(request, db, table, settings)
            body = statements.admit_plan(who, client, db, table, wanted, info)
            if body is None:
                body = await run_in_threadpool(statements.plan, who, db, table, wanted, info)
        return Response(body, media_type="application/json")

    async def selecting_user(request: Request, db: str, table: str) -> str:
        """The authenticated user, who must hold SELECT on the table (401 / 403 otherwise)."""
        client = client_of(request)
        user = await run_in_threadpool(auth.authenticate, request.headers.get("authorization"), client)
        await run_in_threadpool(statements.require_select, user, client, db, table, False)
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
        await run_in_threadpool(statements.require_select, user, client, db, table, False)
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
        from starscan.core.errors import SparkUnavailable

        problem = await run_in_threadpool(spark_problem, planner.schemas.spark)
        if problem is not None:
            log.error("%s failed: Spark is unavailable: %s", request.url.path, problem)
            return error_response(SparkUnavailable(f"Spark is unavailable: {problem}"))
        return error_response(internal_error(exc, log, request.url.path))

    app.add_exception_handler(Exception, _unexpected)
    app.add_middleware(_PlanRoute, endpoint=query_plan, unexpected=_unexpected)
    return app


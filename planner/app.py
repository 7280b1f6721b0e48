"""The FE HTTP app (FastAPI): `_query_plan`, `_schema`, health."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from starscan import __version__
from starscan.errors import BadRequest, StarscanError
from starscan.planner.auth import authenticate, require_select
from starscan.planner.errors import error_response, handle_starscan_error
from starscan.planner.query_plan import QueryPlanner, read_sql_body
from starscan.users import UserStore

log = logging.getLogger("starscan.planner")


class _Segment(Convertor):
    """A path segment that may be empty, so `/api//t/_query_plan` reaches our handler."""

    regex = "[^/]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("seg", _Segment())


def create_app(planner: QueryPlanner, users: UserStore) -> FastAPI:
    app = FastAPI(title="starscan FE", version=__version__, description="StarRocks FE scan-planning endpoints served from Spark tables.")
    app.add_exception_handler(StarscanError, handle_starscan_error)
    app.state.planner = planner
    app.state.users = users

    def client_of(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    async def query_plan(request: Request, db: str, table: str) -> JSONResponse:
        client = client_of(request)
        user = await run_in_threadpool(authenticate, users, request.headers.get("authorization"), client)
        if not db or not table:
            raise BadRequest(f"{db}/{table} must be selected")
        sql = read_sql_body(await request.body())
        await run_in_threadpool(require_select, users, user, client, db, table)
        body = await run_in_threadpool(planner.query_plan_json, db, table, sql, user)
        log.info("plan user=%s client=%s table=%s.%s bytes=%d", user, client, db, table, len(body))
        return Response(body, media_type="application/json")

    async def table_schema(request: Request, db: str, table: str) -> JSONResponse:
        client = client_of(request)
        user = await run_in_threadpool(authenticate, users, request.headers.get("authorization"), client)
        if not db or not table:
            raise BadRequest("No database or table selected.")
        await run_in_threadpool(require_select, users, user, client, db, table)
        return JSONResponse(await run_in_threadpool(planner.table_schema, db, table))

    # One route per method: a route with two methods gets one operationId twice in the OpenAPI document.
    app.add_api_route("/api/{db:seg}/{table:seg}/_query_plan", query_plan, methods=["POST"], summary="Plan a single-table scan",
                      operation_id="query_plan_post")
    app.add_api_route("/api/{db:seg}/{table:seg}/_query_plan", query_plan, methods=["GET"], summary="Plan a single-table scan (GET)",
                      operation_id="query_plan_get")
    app.add_api_route("/api/{db:seg}/{table:seg}/_schema", table_schema, methods=["GET"], summary="Table schema")

    @app.get("/api/health", summary="Liveness, as StarRocks' BE answers it")
    async def health() -> dict:
        return {"status": "OK", "msg": "To Be Added"}

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        from starscan.errors import InternalError

        return error_response(InternalError(f"internal error: {type(exc).__name__}: {exc}"))

    return app

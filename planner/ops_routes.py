"""Operations endpoints on the FE HTTP port (docs/operations.md).

- ``GET /metrics``: Prometheus text format, open like StarRocks' (no secrets in it).
- ``GET /varz``, ``POST /api/update_config?key=value``: effective configuration (secrets
  masked) and run-time changes, as StarRocks' BE has them. Admin only.
- ``GET /api/scans/{context_id}/profile``: a scan's profile (admin, or the scan's user).
- ``GET /api/scanners``, ``POST /api/scanners/{context_id}/close``, ``GET /admin``,
  ``GET /api/admin/state``: live scanners, closing one, the admin page. Admin only.

Admin = ``root`` or a user with the grant ``admin`` (``UserStore.is_admin``).
"""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from starscan.core import logs
from starscan.core.errors import ConfigChangeRefused, NotAuthorized, NotFound, PrivilegeMissing, StarscanError, Unauthorized
from starscan.planner.admin import render_page

log = logging.getLogger("starscan.ops")
# What prometheus_client.generate_latest writes: the text exposition format 0.0.4.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _HttpMetrics:
    """ASGI middleware: `_query_plan` latency and status, refused logins (401/403)."""

    def __init__(self, app, ops):
        self.app = app
        self.ops = ops

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.monotonic()
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            metrics = self.ops.metrics
            code = status["code"]
            if scope.get("path", "").endswith("/_query_plan"):
                metrics.rpc_seconds.labels("query_plan").observe(time.monotonic() - started)
                metrics.plan_requests.labels(str(code)).inc()
            if code in (401, 403):
                metrics.auth_failures.labels("http").inc()


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _scanner_row(ops, ctx, now: float) -> dict:
    age = max(now - ctx.created, 1e-6)
    queue = ctx.queue
    return {
        "context_id": ctx.context_id, "user": ctx.user or ctx.info.user, "table": ctx.table or ctx.info.table,
        "query_id": ctx.info.query_id, "columns": list(ctx.info.columns), "client": ctx.client,
        "rows_sent": ctx.rows_sent, "bytes_sent": ctx.bytes_sent, "throughput_bytes_s": round(ctx.bytes_sent / age, 1),
        "age_s": round(age, 1), "idle_s": round(max(now - ctx.last_access, 0.0), 1),
        "queue_bytes": queue.bytes if queue is not None else 0, "eos": ctx.eos,
        "state": "refused" if ctx.open_error is not None else ("eos" if ctx.eos else "open"),
        "spark_jobs": ops.live_spark_jobs(ctx.context_id) if ctx.scan is not None and ctx.open_error is None else [],
    }


def install_routes(app: FastAPI, ops) -> None:
    users = ops.users
    auth = app.state.auth
    app.add_middleware(_HttpMetrics, ops=ops)

    async def user_of(request: Request) -> str:
        return await run_in_threadpool(auth.authenticate, request.headers.get("authorization"), _client(request))

    async def admin_of(request: Request) -> str:
        user = await user_of(request)
        if not await run_in_threadpool(users.is_admin, user):
            raise PrivilegeMissing(f"user {user!r} needs the admin grant for this page (starscan user grant {user} admin)")
        return user

    @app.get("/metrics", summary="Prometheus metrics", include_in_schema=True)
    async def metrics() -> Response:
        return Response(await run_in_threadpool(ops.metrics.exposition), media_type=METRICS_CONTENT_TYPE)

    @app.get("/varz", summary="Effective configuration, secrets masked (admin)")
    async def varz(request: Request) -> JSONResponse:
        await admin_of(request)
        return JSONResponse(ops.varz())

    @app.post("/api/update_config", summary="Change run-time configuration: ?key=value (admin)")
    async def update_config(request: Request) -> JSONResponse:
        user = await admin_of(request)
        try:
            changed = ops.update_config(dict(request.query_params))
        except ConfigChangeRefused as exc:
            return JSONResponse({"status": "BAD", "msg": exc.message}, status_code=400)
        log.info("update_config by %s: %s", user, changed)
        return JSONResponse({"status": "OK", "msg": "", "updated": {k: str(v) for k, v in changed.items()}})

    @app.get("/api/scans/{context_id}/profile", summary="A scan's profile (enable_profile_for_external_plan)")
    async def profile(request: Request, context_id: str) -> JSONResponse:
        user = await user_of(request)
        found = ops.profiles.get(context_id)
        if found is None:
            hint = "" if ops.settings.enable_profile_for_external_plan else \
                " (profiles are off: set enable_profile_for_external_plan = true)"
            raise NotFound(f"no profile for context_id {context_id}{hint}")
        if found.user != user and not await run_in_threadpool(users.is_admin, user):
            raise NotAuthorized(f"the profile of context_id {context_id} belongs to another user")
        return JSONResponse(found.as_dict())

    _install_scanner_routes(app, ops, admin_of)


def _scanners(ops) -> list[dict]:
    now = time.monotonic()
    return [_scanner_row(ops, ctx, now) for ctx in sorted(ops.contexts.snapshot(), key=lambda c: c.created)]


def _state(ops) -> dict:
    """What the admin page shows."""
    return {"scanners": _scanners(ops), "recent_plans": list(ops.recent_plans), "throughput": ops.metrics.throughput(),
            "profiles_enabled": ops.settings.enable_profile_for_external_plan,
            "consumers": [lag.as_dict() for lag in ops.consumer_lags()], "spark": ops.spark_status()}


def _install_scanner_routes(app: FastAPI, ops, admin_of) -> None:
    """The admin's routes over live scanners and the admin page."""

    @app.get("/api/scanners", summary="Live scanners (admin)")
    async def list_scanners(request: Request) -> JSONResponse:
        await admin_of(request)
        return JSONResponse({"scanners": await run_in_threadpool(_scanners, ops)})

    @app.post("/api/scanners/{context_id}/close", summary="Close a scanner: its reader gets NOT_FOUND next (admin)")
    async def close_scanner(request: Request, context_id: str) -> JSONResponse:
        user = await admin_of(request)
        ctx = await run_in_threadpool(ops.contexts.remove, context_id)
        if ctx is None:
            raise NotFound(f"context_id: {context_id} not found")
        log.info("scanner closed by admin %s", user, extra=logs.scan_fields(ctx))
        return JSONResponse({"status": "OK", "closed": context_id, "rows_sent": ctx.rows_sent})

    @app.get("/api/admin/state", summary="What the admin page shows, as JSON (admin)")
    async def admin_state(request: Request) -> JSONResponse:
        await admin_of(request)
        return JSONResponse(await run_in_threadpool(_state, ops))

    @app.get("/admin", summary="Admin page (admin)", response_class=HTMLResponse)
    async def admin_page(request: Request) -> HTMLResponse:
        try:
            user = await admin_of(request)
        except Unauthorized:
            raise
        except StarscanError as exc:
            return HTMLResponse(render_page(None, None, refused=exc.message), status_code=exc.http_status)
        return HTMLResponse(render_page(user, await run_in_threadpool(_state, ops)))

"""BE semantics of PROTOCOL.md section 4, plus the idempotent replay of the last batch."""

from __future__ import annotations

import logging
import threading

from starscan import plan as plan_codec
from starscan.config import Settings
from starscan.errors import InvalidArgument, NotAuthorized, NotFound, StarscanError
from starscan.provider.contexts import ScanContext, ScanContextManager
from starscan.provider.result_queue import EOS, ResultQueue
from starscan.provider.spark_scan import SparkScan

log = logging.getLogger("starscan.provider")

MAX_BATCH_SIZE = 65536


class OpenResult:
    __slots__ = ("context_id", "columns", "error")

    def __init__(self, context_id: str, columns: list[tuple[str, int]], error: StarscanError | None = None):
        self.context_id = context_id
        self.columns = columns
        self.error = error


class NextResult:
    __slots__ = ("rows", "eos")

    def __init__(self, rows: bytes | None, eos: bool):
        self.rows = rows
        self.eos = eos


class ScanService:
    def __init__(self, settings: Settings, spark, signer: plan_codec.PlanSigner, contexts: ScanContextManager | None = None):
        self.settings = settings
        self.spark = spark
        self.signer = signer
        # `is None`, not `or`: an empty manager is falsy (it has __len__), and the server's
        # reaper and admin views must see the same manager the service registers in.
        self.contexts = contexts if contexts is not None else ScanContextManager()

    # ---- open_scanner ----
    def open(self, params) -> OpenResult:
        keep_alive = params.keep_alive_min if params.keep_alive_min and params.keep_alive_min > 0 else self.settings.keep_alive_min
        ctx = self.contexts.create(keep_alive)
        try:
            columns = self._open(ctx, params)
        except Exception as exc:  # a failed open stays registered until GC, as in StarRocks
            ctx.open_error = exc
            if isinstance(exc, StarscanError):
                log.info("open_scanner refused context_id=%s: %s", ctx.context_id, exc.message)
                return OpenResult(ctx.context_id, [], exc)
            log.exception("open_scanner failed unexpectedly")
            return _internal(ctx, exc)
        return OpenResult(ctx.context_id, columns)

    def _open(self, ctx: ScanContext, params) -> list[tuple[str, int]]:
        if params.batch_size is None:
            raise InvalidArgument("batch_size is not set")
        if params.batch_size <= 0 or params.batch_size > MAX_BATCH_SIZE:
            raise InvalidArgument(
                f"batch_size is out of range, it must be in the range (0, {MAX_BATCH_SIZE}], current value is [{params.batch_size}]"
            )
        plan = plan_codec.decode(params.opaqued_query_plan or "", self.signer)
        if params.user and params.user != plan.user:
            raise NotAuthorized(f"user {params.user!r} may not use a plan issued to {plan.user!r}")
        if (params.database and params.database != plan.database) or (params.table and params.table != plan.table):
            raise InvalidArgument(
                f"the plan is for {plan.database}.{plan.table}, not {params.database}.{params.table}"
            )
        tablet_ids = list(params.tablet_ids or [])
        if not tablet_ids:
            raise InvalidArgument("tablet_ids is empty")
        plan_tablets = plan_codec.tablets_of(plan)
        planned = {t.tablet_id for t in plan_tablets}
        for tid in tablet_ids:
            if tid not in planned:
                raise NotFound(f"tablet_id: {tid} not found")
        tablet_ids = list(dict.fromkeys(tablet_ids))
        ctx.user = plan.user
        ctx.table = f"{plan.database}.{plan.table}"
        ctx.batch_size = params.batch_size
        limit = self.settings.queue_max_bytes
        if params.mem_limit and params.mem_limit > 0:
            limit = min(limit, params.mem_limit)
        queue = ResultQueue(limit)
        scan = SparkScan(self.spark, plan, plan_tablets, tablet_ids, queue, ctx.context_id,
                         prefetch=self.settings.scan_prefetch)
        ctx.queue, ctx.scan = queue, scan
        timeout_s = params.query_timeout if params.query_timeout and params.query_timeout > 0 else self.settings.query_timeout_s
        ctx.timer = threading.Timer(timeout_s, scan.timeout, args=(timeout_s,))
        ctx.timer.daemon = True
        scan.start()
        ctx.timer.start()
        log.info("open context_id=%s query_id=%s user=%s table=%s tablets=%d batch_size=%d",
                 ctx.context_id, plan.query_id, plan.user, ctx.table, len(tablet_ids), params.batch_size)
        return [(c.name, c.primitive_type) for c in plan.columns]

    # ---- get_next ----
    def next(self, context_id: str | None, offset: int | None) -> NextResult:
        with self.contexts.using(context_id) as ctx, ctx.lock:
            if ctx.open_error is not None:
                raise ctx.open_error if isinstance(ctx.open_error, StarscanError) else NotFound(
                    "fragment_instance_id does not exists")
            if offset is None:
                raise InvalidArgument("offset is not set")
            if offset == ctx.offset:
                if ctx.eos:
                    return NextResult(None, True)
                batch = ctx.queue.take(ctx.batch_size)
                if batch is EOS:
                    ctx.eos = True
                    ctx.prev_offset, ctx.prev_rows = None, None
                    return NextResult(None, True)
                rows = ctx.scan.converter.ipc_stream(batch)
                ctx.prev_offset, ctx.prev_rows = ctx.offset, rows
                ctx.offset += batch.num_rows
                ctx.rows_sent += batch.num_rows
                ctx.bytes_sent += len(rows)
                return NextResult(rows, False)
            if offset == ctx.prev_offset and ctx.prev_rows is not None:
                # The client did not get our last reply and asks again: same batch.
                return NextResult(ctx.prev_rows, False)
            raise NotFound(f"context_id={ctx.context_id}, send_offset={offset}, context_offset={ctx.offset}")

    # ---- close_scanner ----
    def close(self, context_id: str | None) -> None:
        ctx = self.contexts.remove(context_id)
        if ctx is not None:
            log.info("close context_id=%s user=%s table=%s rows=%d bytes=%d", ctx.context_id, ctx.user, ctx.table,
                     ctx.rows_sent, ctx.bytes_sent)


def _internal(ctx: ScanContext, exc: Exception) -> OpenResult:
    from starscan.errors import InternalError

    return OpenResult(ctx.context_id, [], InternalError(f"open_scanner failed: {type(exc).__name__}: {exc}"))

"""BE semantics of docs/protocol.md section 4, plus the idempotent replay of the last batch."""

from __future__ import annotations

import logging
import os
import threading
import time

from starscan.arrow.chunk_cache import ColumnChunkCache
from starscan.arrow.wire import IpcStream
from starscan.core.errors import (
    InternalError,
    InvalidArgument,
    NotFound,
    ScanCancelled,
    SnapshotGone,
    SparkUnavailable,
    StarscanError,
)
from starscan.core.logs import scan_fields
from starscan.core.protocol_extensions import EOS_ROWS_PROPERTY, ERROR_KIND_PROPERTY, ORDERED_PROPERTY
from starscan.plans import codec as plan_codec
from starscan.plans.scan_records import ScanRecord, ScanRecords
from starscan.plans.tablet_lists import TabletLists, planned_tablets
from starscan.provider.admission import Admission
from starscan.provider.contexts import ScanContext, ScanContextManager
from starscan.provider.push.listener import PushListener
from starscan.provider.push.scheduler import SlotScheduler
from starscan.provider.result_cache import ResultCache, cache_key
from starscan.provider.result_queue import EOS, QueueBudget, ResultQueue
from starscan.provider.scan_sources import PlannedRead, check_snapshot
from starscan.provider.spark_scan import SparkScan
from starscan.security.audit import AuditLog
from starscan.settings.config import Settings
from starscan.settings.runtime import LiveSettings
from starscan.spark.session import scan_pool, spark_problem
from starscan.storage.stores import open_storage
from starscan.tables.catalog import Warehouse

log = logging.getLogger("starscan.provider")

MAX_BATCH_SIZE = 65536


class OpenResult:
    __slots__ = ("context_id", "columns", "error")

    def __init__(self, context_id: str, columns: list[tuple[str, int]], error: StarscanError | None = None):
        self.context_id = context_id
        self.columns = columns
        self.error = error


class NextResult:
    __slots__ = ("rows", "eos", "rows_total")

    def __init__(self, rows: bytes | IpcStream | None, eos: bool, rows_total: int | None = None):
        self.rows = rows
        self.eos = eos
        self.rows_total = rows_total  # set on eos when the client asked for the row count


class ScanService:
    def __init__(self, settings: Settings | LiveSettings, spark, signer: plan_codec.Signer, contexts: ScanContextManager | None = None,
                 admission: Admission | None = None, audit: AuditLog | None = None,
                 tablet_lists: TabletLists | None = None, warehouse: Warehouse | None = None,
                 records: ScanRecords | None = None):
        self.live = LiveSettings.of(settings)
        settings = self.live.current
        self.spark = spark
        self.signer = signer
        self.admission = admission or Admission(self.live, None)
        self.audit = audit
        self.tablet_lists = tablet_lists if tablet_lists is not None else TabletLists(settings.tablet_lists_max_bytes)
        self.warehouse = warehouse  # rebuilds a large plan's tablet list this process does not hold
        self.budget = QueueBudget(settings.total_queue_max_bytes)
        self.result_cache = ResultCache(settings.result_cache_max_bytes, settings.result_cache_max_entry_bytes,
                                        settings.result_cache_tables)
        # Decoded Parquet column chunks of the files the BE's own readers read (its page cache).
        self.chunk_cache = ColumnChunkCache(settings.page_cache_bytes)
        # `is None`, not `or`: an empty manager is falsy (it has __len__), and the server's
        # reaper and admin views must see the same manager the service registers in.
        self.contexts = contexts if contexts is not None else ScanContextManager()
        self.contexts.add_removed_listener(self._removed)
        self._push: PushListener | None = None
        self.engine_listeners: list = []  # called with "arrow" or "sql" as each scan's engine is chosen
        self.open_listeners: list = []    # called as each open_scanner arrives
        self._push_lock = threading.Lock()
        # Resumable scans (starscan.plans.scan_records): every scan is recorded where every
        # BE of the deployment finds it, and read in a fixed order; None: not resumable.
        self.records = records
        self._resume_lock = threading.Lock()

    @property
    def settings(self) -> Settings:
        """The settings as they are now (run-time changes replace them)."""
        return self.live.current

    def push_listener(self) -> PushListener:
        """Where this BE's scan tasks push their rows (started with the first scan)."""
        with self._push_lock:
            if self._push is None:
                # Spark on this machine (local[N]): its tasks push through a Unix socket.
                local = self.settings.spark_master.startswith("local")
                slots = self.settings.scan_local_read_slots
                own_slots = (os.cpu_count() or 1) if slots is None else slots
                self._push = PushListener(self.settings.bind_host, self.settings.push_port,
                                          self.settings.advertise_host, local=local,
                                          scheduler=SlotScheduler(own_slots=own_slots))
                log.info("BE push listener on %s:%d%s (tasks connect to %s)", self._push.host, self._push.port,
                         f" and {self._push.local_path}" if self._push.local_path else "", self._push.advertised_host)
            return self._push

    def _engine_chosen(self, ctx: ScanContext, engine: str) -> None:
        ctx.info.engine = engine
        for listener in self.engine_listeners:
            listener(engine)

    def stop(self) -> None:
        with self._push_lock:
            if self._push is not None:
                self._push.stop()
                self._push = None

    # ---- open_scanner ----
    def open(self, params, client: str = "") -> OpenResult:
        for listener in self.open_listeners:
            listener()
        keep_alive = params.keep_alive_min if params.keep_alive_min and params.keep_alive_min > 0 else self.settings.keep_alive_min
        keep_alive = min(keep_alive, 32767)
        ctx = self.contexts.create(keep_alive)
        if not (params.keep_alive_min and params.keep_alive_min > 0) and self.settings.keep_alive_s:
            ctx.keep_alive_s = self.settings.keep_alive_s
        ctx.client = client
        ctx.report_kinds = str((params.properties or {}).get(ERROR_KIND_PROPERTY, "")).lower() == "true"
        try:
            columns = self._open(ctx, params)
        except Exception as exc:  # a failed open stays registered until GC, as in StarRocks
            ctx.open_error = exc
            self._bound_failed_contexts(ctx)
            if isinstance(exc, StarscanError):
                log.info("open_scanner refused context_id=%s client=%s: %s", ctx.context_id, client, exc.message,
                         extra=scan_fields(ctx))
                return OpenResult(ctx.context_id, [], exc)
            problem = spark_problem(self.spark)
            if problem is not None:
                log.error("open_scanner context_id=%s: Spark is unavailable: %s", ctx.context_id, problem)
                ctx.open_error = SparkUnavailable(f"Spark is unavailable: {problem}")
                return OpenResult(ctx.context_id, [], ctx.open_error)
            log.exception("open_scanner failed unexpectedly")
            return _internal(ctx, exc)
        if self.records is not None:
            self._record(ctx, params)
        return OpenResult(ctx.context_id, columns)

    def _record(self, ctx: ScanContext, params) -> None:
        """Write the scan's record for the other BEs (a failure costs only resumability)."""
        assert self.records is not None
        record = ScanRecord(
            context_id=ctx.context_id, plan=params.opaqued_query_plan, tablet_ids=list(params.tablet_ids),
            batch_size=params.batch_size, keep_alive_s=ctx.keep_alive_s,
            properties={str(k): str(v) for k, v in (params.properties or {}).items() if str(k).startswith("starscan.")},
            query_timeout=params.query_timeout, mem_limit=params.mem_limit)
        try:
            ctx.recorded = self.records.put(record)
        except OSError as exc:
            log.warning("context_id=%s: its record could not be written to %s (%s): another BE cannot resume it",
                        ctx.context_id, self.records.folder, exc, extra=scan_fields(ctx))

    def _resume(self, context_id: str | None, offset: int | None) -> None:
        """Open here the scan another BE opened (or this one, before a restart), from its
        record, to be read on from ``offset``: a get_next for a context this BE does not
        hold. Nothing happens when there is no record (the caller answers not found)."""
        assert self.records is not None
        record = self.records.get(context_id)
        if record is None:
            return
        with self._resume_lock:
            if self.contexts.holds(record.context_id):
                return  # resumed by a concurrent call
            params = _params_of(record)
            ctx = self.contexts.create(1, context_id=record.context_id)
            ctx.lock.acquire()  # a concurrent get_next waits until the scan is open here
        try:
            ctx.keep_alive_s = record.keep_alive_s
            ctx.client = "resumed"
            ctx.report_kinds = record.properties.get(ERROR_KIND_PROPERTY, "").lower() == "true"
            try:
                self._open(ctx, params)
            except Exception as exc:  # noqa: BLE001 - the reader gets the reason at this get_next
                error = exc if isinstance(exc, StarscanError) else InternalError(
                    f"the scan could not be resumed on this BE: {type(exc).__name__}: {exc}")
                if not isinstance(exc, StarscanError):
                    log.exception("resuming context_id=%s failed unexpectedly", record.context_id)
                ctx.open_error = error  # what a get_next that waited for this one answers
                self.contexts.remove(ctx.context_id)
                raise error from None
            ctx.recorded = self.records.touch(record.context_id)
            ctx.skip_to = max(0, offset or 0)
        finally:
            ctx.lock.release()
        log.info("resumed context_id=%s at offset=%d (opened on another BE or before a restart)", ctx.context_id,
                 ctx.skip_to, extra=scan_fields(ctx))

    def _bound_failed_contexts(self, ctx: ScanContext) -> None:
        """Failed opens stay so get_next can repeat their error, but a flood of bad opens
        must not grow memory: past max_scanners of them, a new one is dropped at once."""
        failed = sum(1 for c in self.contexts.snapshot() if c.open_error is not None)
        if failed > self.settings.max_scanners:
            self.contexts.remove(ctx.context_id)

    def _open(self, ctx: ScanContext, params) -> list[tuple[str, int]]:
        if params.batch_size is None:
            raise InvalidArgument("batch_size is not set")
        if params.batch_size <= 0 or params.batch_size > MAX_BATCH_SIZE:
            raise InvalidArgument(
                f"batch_size is out of range, it must be in the range (0, {MAX_BATCH_SIZE}], current value is [{params.batch_size}]"
            )
        for name in ("opaqued_query_plan", "user", "passwd", "database", "table", "cluster"):
            _check_text(getattr(params, name, None), name)
        plan = plan_codec.decode(params.opaqued_query_plan or "", self.signer)
        info = ctx.info
        info.query_id, info.user, info.table = plan.query_id, plan.user, f"{plan.database}.{plan.table}"
        info.columns, info.sql = [c.name for c in plan.columns], plan.sql
        self.admission.check_identity(plan, params.user, params.passwd, ctx.client)
        if (params.database and params.database != plan.database) or (params.table and params.table != plan.table):
            raise InvalidArgument(
                f"the plan is for {plan.database}.{plan.table}, not {params.database}.{params.table}"
            )
        tablet_ids = list(params.tablet_ids or [])
        if not tablet_ids:
            raise InvalidArgument("tablet_ids is empty")
        if len(tablet_ids) > self.settings.max_tablets_per_scanner:
            raise InvalidArgument(
                f"{len(tablet_ids)} tablet_ids in one open_scanner, more than max_tablets_per_scanner="
                f"{self.settings.max_tablets_per_scanner}: split them over several scanners")
        plan_tablets = planned_tablets(plan, self.tablet_lists, self.warehouse)
        planned = {t.tablet_id for t in plan_tablets}
        for tid in tablet_ids:
            if tid not in planned:
                raise NotFound(f"tablet_id: {tid} not found")
        tablet_ids = list(dict.fromkeys(tablet_ids))
        ctx.info.tablets = len(tablet_ids)
        with self.admission.lock:
            self.admission.check_caps(self.contexts.snapshot(), plan.user)
            ctx.admitted = True
        ctx.user = plan.user
        ctx.table = f"{plan.database}.{plan.table}"
        ctx.batch_size = params.batch_size
        ctx.report_rows = str((params.properties or {}).get(EOS_ROWS_PROPERTY, "")).lower() == "true"
        ordered = str((params.properties or {}).get(ORDERED_PROPERTY, "")).lower() == "true" or self.records is not None
        columns = [(c.name, c.primitive_type) for c in plan.columns]
        storage = open_storage(plan.table_location, self.settings.storage_options)  # the store's one client
        cache = self.result_cache
        if cache.enabled_for(plan.database, plan.table):
            # Every check above has passed (signature, identity, grants, tablets, caps); the
            # planned files must still be there, exactly as a Spark scan would require.
            check_snapshot(plan, plan_tablets, tablet_ids, storage)
            key = cache_key(plan, plan_tablets, tablet_ids, params.batch_size, self.settings.time_zone, ordered)
            hit = cache.get(key, plan.table_location, plan.version)
            if hit is not None:
                ctx.replay = hit
                ctx.info.result_cache = "hit"
                log.info("open context_id=%s query_id=%s user=%s table=%s tablets=%d batch_size=%d: from the result "
                         "cache (%d rows, %d bytes)", ctx.context_id, plan.query_id, plan.user, ctx.table,
                         len(tablet_ids), params.batch_size, hit.rows, hit.nbytes, extra=scan_fields(ctx))
                return columns
            ctx.cache_fill = cache.fill(key, plan.table_location, plan.version)
            ctx.info.result_cache = "miss"
        limit = self.settings.queue_max_bytes
        if params.mem_limit and params.mem_limit > 0:
            limit = min(limit, params.mem_limit)
        queue = ResultQueue(limit, self.budget, ordered=ordered)
        source = PlannedRead(self.spark, plan, plan_tablets, tablet_ids, storage, ordered,
                             reader_always=self.settings.sql_engine_reader == "starscan",
                             open_cost_bytes=self.settings.tablet_open_cost_bytes)
        scan = SparkScan(self.spark, source, queue, ctx.context_id, self.push_listener(),
                         tasks_per_scanner=self.settings.scan_tasks_per_scanner,
                         yield_after_s=self.settings.scan_yield_after_s, pool=scan_pool(ctx.context_id),
                         engine=self.settings.scan_engine,
                         local_reads=self.settings.scan_local_reads, chunk_cache=self.chunk_cache)
        scan.on_engine = lambda engine, ctx=ctx: self._engine_chosen(ctx, engine)
        scan.batch_rows = params.batch_size
        ctx.queue, ctx.scan = queue, scan
        timeout_s = params.query_timeout if params.query_timeout and params.query_timeout > 0 else self.settings.query_timeout_s
        timeout_s = min(timeout_s, self.settings.query_timeout_max_s)
        ctx.timer = threading.Timer(timeout_s, scan.timeout, args=(timeout_s,))
        ctx.timer.daemon = True
        scan.start()
        ctx.timer.start()
        log.info("open context_id=%s query_id=%s user=%s table=%s tablets=%d batch_size=%d",
                 ctx.context_id, plan.query_id, plan.user, ctx.table, len(tablet_ids), params.batch_size,
                 extra=scan_fields(ctx))
        return columns

    # ---- get_next ----
    def reports_error_kinds(self, context_id: str | None) -> bool:
        """Whether the reader of this scanner asked for error kinds (False for one not here)."""
        try:
            return self.contexts.get(context_id).report_kinds
        except StarscanError:
            return False

    def next(self, context_id: str | None, offset: int | None) -> NextResult:
        _check_text(context_id, "context_id")
        if self.records is not None and not self.contexts.holds(context_id):
            self._resume(context_id, offset)
        with self.contexts.using(context_id) as ctx, ctx.lock:
            if ctx.skip_to:
                self._skip(ctx)
            self._touch(ctx)
            if ctx.open_error is not None:
                raise ctx.open_error if isinstance(ctx.open_error, StarscanError) else NotFound(
                    "fragment_instance_id does not exists")
            if offset is None:
                offset = 0  # as StarRocks' BE: an unset offset is 0
            if offset == ctx.offset:
                if ctx.eos:
                    return self._eos(ctx)
                if ctx.replay is not None:
                    return self._next_cached(ctx)
                if ctx.carry is not None:
                    batch, ipc, ctx.carry = ctx.carry, None, None
                else:
                    taken = ctx.queue.take_reply(ctx.batch_size, fill_wait_s=self.settings.reply_fill_wait_s)
                    batch, ipc = taken if isinstance(taken, tuple) else (taken, None)
                if batch is EOS:
                    produced = ctx.queue.rows_in
                    if produced != ctx.offset:  # never eos on a partial result
                        log.error("scan %s ended with %d rows handed out of %d produced", ctx.context_id, ctx.offset,
                                  produced, extra=scan_fields(ctx))
                        raise InternalError(f"scan integrity check failed: the scan produced {produced} rows "
                                            f"but {ctx.offset} were handed out; read the scan again")
                    ctx.eos = True
                    ctx.prev_offset, ctx.prev_rows = None, None
                    if ctx.cache_fill is not None:
                        ctx.cache_fill.complete()
                    return self._eos(ctx)
                rows = ctx.scan.converter.ipc_stream(batch, ipc)
                if ctx.cache_fill is not None:
                    ctx.cache_fill.add(batch.num_rows, bytes(rows))
                ctx.prev_offset, ctx.prev_rows = ctx.offset, rows
                ctx.offset += batch.num_rows
                ctx.rows_sent += batch.num_rows
                ctx.bytes_sent += len(rows)
                return NextResult(rows, False)
            if offset == ctx.prev_offset and ctx.prev_rows is not None:
                # The client did not get our last reply and asks again: same batch.
                return NextResult(ctx.prev_rows, False)
            raise NotFound(f"context_id={ctx.context_id}, send_offset={offset}, context_offset={ctx.offset}")

    def _skip(self, ctx: ScanContext) -> None:
        """A resumed scan's first ``skip_to`` rows, which the reader had from the BE that held
        the scan: read and passed over (the rows come in a fixed order); the rest of the batch
        the skip ends in is the next reply's."""
        target, ctx.skip_to = ctx.skip_to, 0
        while ctx.offset < target:
            if ctx.replay is not None:
                raise InvalidArgument("a scan answered from the result cache cannot be resumed at an offset")
            assert ctx.queue is not None
            taken = ctx.queue.take_reply(min(ctx.batch_size, target - ctx.offset), fill_wait_s=0)
            batch = taken[0] if isinstance(taken, tuple) else taken
            if batch is EOS:
                raise NotFound(f"context_id={ctx.context_id}, send_offset={target}: the scan has only "
                               f"{ctx.offset} rows")
            keep = ctx.offset + batch.num_rows - target
            if keep > 0:
                ctx.carry = batch.slice(batch.num_rows - keep)
            ctx.offset += batch.num_rows - max(keep, 0)

    def _touch(self, ctx: ScanContext) -> None:
        """Keep a recorded context's record as fresh as the context (at most every quarter
        of its keep-alive), so that its age is the scan's idle time on every BE."""
        if self.records is None or ctx.recorded is None:
            return
        if time.time() - ctx.recorded > ctx.keep_alive_s / 4:
            stamp = self.records.touch(ctx.context_id)
            ctx.recorded = stamp if stamp is not None else ctx.recorded

    def tend_records(self) -> None:
        """The reaper's pass over the records: the records nobody touched for their keep-alive
        are deleted, and the contexts this BE holds whose record a close on another BE
        deleted are dropped."""
        if self.records is None:
            return
        self.records.expire()
        for ctx in self.contexts.snapshot():
            if ctx.recorded is not None and ctx.in_use == 0 and self.records.touched(ctx.context_id) is None:
                if self.contexts.remove(ctx.context_id) is not None:
                    log.info("context_id=%s was closed on another BE: dropped here", ctx.context_id,
                             extra=scan_fields(ctx))

    def _next_cached(self, ctx: ScanContext) -> NextResult:
        """The next reply of a scan answered from the result cache: the same bytes, offsets,
        replay and eos as the scan that filled it."""
        assert ctx.replay is not None
        replies = ctx.replay.replies
        if ctx.replay_index >= len(replies):
            ctx.eos = True
            ctx.prev_offset, ctx.prev_rows = None, None
            return self._eos(ctx)
        count, rows = replies[ctx.replay_index]
        ctx.replay_index += 1
        ctx.prev_offset, ctx.prev_rows = ctx.offset, rows
        ctx.offset += count
        ctx.rows_sent += count
        ctx.bytes_sent += len(rows)
        return NextResult(rows, False)

    def _eos(self, ctx: ScanContext) -> NextResult:
        return NextResult(None, True, self._rows_scanned(ctx) if ctx.report_rows else None)

    @staticmethod
    def _rows_scanned(ctx: ScanContext) -> int:
        if ctx.replay is not None:
            return ctx.replay.rows
        return ctx.queue.rows_in if ctx.queue is not None else 0

    # ---- close_scanner ----
    def close(self, context_id: str | None) -> None:
        if not isinstance(context_id, (str, type(None))):
            return  # not a context id of ours: nothing to close
        if self.records is not None:
            self.records.delete(context_id)  # gone for every BE
        ctx = self.contexts.remove(context_id)
        if ctx is not None:
            # A close before eos (a reader's first() or LIMIT) is normal: this line is its only trace.
            log.info("close context_id=%s user=%s table=%s rows=%d bytes=%d%s", ctx.context_id, ctx.user, ctx.table,
                     ctx.rows_sent, ctx.bytes_sent, "" if ctx.eos else " before eos", extra=scan_fields(ctx))

    def _removed(self, ctx: ScanContext, how: str) -> None:
        """A context went (close, GC, shutdown): a fill that did not reach eos is dropped."""
        if how == "reaped" and self.records is not None and ctx.recorded is not None:
            self.records.delete_unless_touched_since(ctx.context_id, ctx.recorded)
        fill = ctx.cache_fill
        if fill is not None:
            fill.abandon()
            error = getattr(ctx.queue, "error", None)
            if isinstance(error, SnapshotGone):  # the table's files changed: its entries are stale
                self.result_cache.drop_table(fill.location)
        self._audit_removed(ctx, how)

    def _audit_removed(self, ctx: ScanContext, how: str) -> None:
        """The scanner's audit line, written once when its context goes (close, GC, shutdown)."""
        if self.audit is None:
            return
        outcome, error = scan_outcome(ctx, how)
        info = ctx.info
        self.audit.record(
            "scan", context_id=ctx.context_id, query_id=info.query_id, user=info.user, client=ctx.client,
            table=info.table, columns=info.columns if info.columns or info.table else None, sql=info.sql,
            tablets=info.tablets, engine=info.engine,
            rows=ctx.rows_sent, bytes=ctx.bytes_sent, duration_ms=round((time.monotonic() - ctx.created) * 1000, 1),
            outcome=outcome, error=error, result_cache=info.result_cache, profile=info.profile)


def _check_text(value, name: str) -> None:
    """thriftpy2 hands over a string field that is not valid UTF-8 as bytes."""
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{name} is not valid UTF-8 text")


def scan_outcome(ctx: ScanContext, how: str) -> tuple[str, str | None]:
    if ctx.open_error is not None:
        err = ctx.open_error
        return "refused", getattr(err, "message", None) or f"{type(err).__name__}: {err}"
    if ctx.eos:
        return "complete", None
    error = getattr(ctx.queue, "error", None)
    if error is not None and not isinstance(error, ScanCancelled):  # a cancel is how close/GC stop a scan
        return "failed", getattr(error, "message", str(error))
    return {"closed": "closed_before_eos", "reaped": "reaped_idle", "shutdown": "server_shutdown"}.get(how, how), None


def _params_of(record: ScanRecord):
    """The open_scanner parameters a record was made from (no password: the plan's user is
    checked again against the users file)."""
    from starscan.core.thrift_defs import wire

    properties = dict(record.properties)
    properties[ORDERED_PROPERTY] = "true"
    return wire.TScanOpenParams(
        opaqued_query_plan=record.plan, tablet_ids=list(record.tablet_ids), batch_size=record.batch_size,
        properties=properties, query_timeout=record.query_timeout, mem_limit=record.mem_limit)


def _internal(ctx: ScanContext, exc: Exception) -> OpenResult:
    from starscan.core.errors import InternalError

    return OpenResult(ctx.context_id, [], InternalError(f"open_scanner failed: {type(exc).__name__}: {exc}"))

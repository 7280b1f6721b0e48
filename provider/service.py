"""The BE's scanners (docs/protocol.md section 4): open_scanner, get_next and close_scanner
as the steps of a scan, each a module of its own:

* open: the request's checks (provider/open_checks.py), admission's caps
  (provider/admission.py), the result cache (provider/cached_replies.py), the scan started
  (provider/scan_start.py), and its record for the other BEs (provider/resumable.py);
* get_next: the offset protocol (provider/replies.py), after a resume from a record when
  this BE does not hold the scan;
* close and the reaper: the context goes, with its record, its cache fill and its audit
  line (provider/scan_audit.py).

A scan's context (provider/contexts.py) has one part per step, written by that step."""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Protocol

import pyarrow as pa

from starscan.arrow.chunk_cache import ColumnChunkCache
from starscan.core.errors import InternalError, SparkUnavailable, StarscanError
from starscan.core.logs import scan_fields
from starscan.core.protocol_extensions import ERROR_KIND_PROPERTY
from starscan.plans import codec as plan_codec
from starscan.plans.scan_records import ScanRecords
from starscan.plans.tablet_lists import TabletLists
from starscan.provider.admission import Admission
from starscan.provider.cached_replies import look_up, scan_gone
from starscan.provider.contexts import ScanContext, ScanContextManager
from starscan.provider.open_checks import MAX_BATCH_SIZE, check_open, check_text, read_plan
from starscan.provider.open_request import OpenRequest
from starscan.provider.push.listener import PushListener
from starscan.provider.replies import NextResult, next_reply
from starscan.provider.result_cache import ResultCache
from starscan.provider.result_queue import QueueBudget
from starscan.provider.resumable import ResumableScans
from starscan.provider.scan_audit import audit_scan, scan_outcome
from starscan.provider.scan_start import start_scan
from starscan.provider.scheduler import SlotScheduler, own_slots_for
from starscan.security.audit import AuditLog
from starscan.settings.config import Settings
from starscan.settings.runtime import LiveSettings
from starscan.spark.session import spark_problem
from starscan.storage.stores import open_storage
from starscan.tables.catalog import Warehouse

log = logging.getLogger("starscan.provider")

__all__ = ["MAX_BATCH_SIZE", "NextResult", "OpenResult", "ScanService", "scan_outcome"]


class OpenResult:
    """The scanner opened (or refused: ``error``), its columns as StarRocks types, and the
    Arrow schema of its rows when the scan's reader is known at open (None for a scan
    answered from the result cache: its replies carry their schema)."""

    __slots__ = ("context_id", "columns", "error", "schema")

    def __init__(self, context_id: str, columns: list[tuple[str, int]], error: StarscanError | None = None,
                 schema: pa.Schema | None = None):
        self.context_id = context_id
        self.columns = columns
        self.error = error
        self.schema = schema


class ScanObserver(Protocol):
    """What measures the scanners (the BE's metrics and profiles, provider/instrumentation.py),
    told by the scan core whatever front the reader came by (Thrift, Flight): no front
    counts scanners, rows or bytes itself."""

    def opened(self, ctx: ScanContext | None, error: StarscanError | None, started: float, seconds: float) -> None:
        """An open ended: ``error`` None, the scanner ``ctx`` is open; else it was refused."""

    def replied(self, ctx: ScanContext | None, rows: int, nbytes: int, error: BaseException | None,
                started: float, ended: float) -> None:
        """A next call ended with ``rows`` rows of ``nbytes`` bytes sent, or ``error``."""


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
        self.reader_lost_listeners: list = []  # called as a scan's reader is lost (its Spark task died)
        self.observer: ScanObserver | None = None  # the metrics and profiles of every front's scanners
        self._push_lock = threading.Lock()
        # Resumable scans (starscan.plans.scan_records): every scan is recorded where every
        # BE of the deployment finds it, and read in a fixed order; None: not resumable.
        self.records = records
        self.resumable = ResumableScans(records, self.contexts) if records is not None else None

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
                own_slots = own_slots_for(self.settings.scan_local_read_slots)
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

    def _reader_lost(self) -> None:
        for listener in self.reader_lost_listeners:
            listener()

    def stop(self) -> None:
        with self._push_lock:
            if self._push is not None:
                self._push.stop()
                self._push = None

    # ---- open_scanner ----
    def open(self, params: OpenRequest, client: str = "") -> OpenResult:
        started = time.monotonic()
        result = self._open_scanner(params, client)
        if self.observer is not None:
            ctx = self._peek(result.context_id) if result.error is None else None
            self.observer.opened(ctx, result.error, started, time.monotonic() - started)
        return result

    def _peek(self, context_id: str | None) -> ScanContext | None:
        try:
            return self.contexts.get(context_id)
        except StarscanError:
            return None

    def _open_scanner(self, params: OpenRequest, client: str) -> OpenResult:
        for listener in self.open_listeners:
            listener()
        keep_alive = params.keep_alive_min if params.keep_alive_min and params.keep_alive_min > 0 else self.settings.keep_alive_min
        keep_alive = min(keep_alive, 32767)
        ctx = self.contexts.create(keep_alive)
        if not (params.keep_alive_min and params.keep_alive_min > 0) and self.settings.keep_alive_s:
            ctx.keep_alive_s = self.settings.keep_alive_s
        ctx.client = client
        ctx.report_kinds = params.wants(ERROR_KIND_PROPERTY)
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
            return OpenResult(ctx.context_id, [], InternalError(f"open_scanner failed: {type(exc).__name__}: {exc}"))
        if self.resumable is not None:
            self.resumable.record(ctx, params)
        return OpenResult(ctx.context_id, columns, schema=ctx.run.scan.converter.schema if ctx.run is not None else None)

    def _bound_failed_contexts(self, ctx: ScanContext) -> None:
        """Failed opens stay so get_next can repeat their error, but a flood of bad opens
        must not grow memory: past max_scanners of them, a new one is dropped at once."""
        failed = sum(1 for c in self.contexts.snapshot() if c.open_error is not None)
        if failed > self.settings.max_scanners:
            self.contexts.remove(ctx.context_id)

    def _open(self, ctx: ScanContext, params: OpenRequest) -> list[tuple[str, int]]:
        """The steps of an open: the checks, admission, the result cache, the scan."""
        settings = self.settings
        plan = read_plan(params, self.signer)
        info = ctx.info
        info.query_id, info.user, info.table = plan.query_id, plan.user, f"{plan.database}.{plan.table}"
        info.columns, info.sql = [c.name for c in plan.columns], plan.sql
        request = check_open(plan, params, settings, self.admission, self.tablet_lists, self.warehouse, ctx.client,
                             always_ordered=self.resumable is not None)
        info.tablets = len(request.tablet_ids)
        with self.admission.lock:
            self.admission.check_caps(self.contexts.snapshot(), plan.user)
            ctx.admitted = True
        ctx.user, ctx.table = plan.user, request.table
        ctx.replies.batch_size, ctx.replies.report_rows = request.batch_size, request.report_rows
        storage = open_storage(plan.table_location, settings.storage_options)  # the store's one client
        if look_up(self.result_cache, ctx, request, storage, settings.time_zone):
            return request.columns
        run = start_scan(self.spark, settings, request, ctx.context_id, storage, self.budget, self.push_listener(),
                         self.chunk_cache, functools.partial(self._engine_chosen, ctx))
        run.scan.on_reader_lost = self._reader_lost
        ctx.run = run
        run.scan.start()
        run.timer.start()
        log.info("open context_id=%s query_id=%s user=%s table=%s tablets=%d batch_size=%d",
                 ctx.context_id, plan.query_id, plan.user, ctx.table, len(request.tablet_ids), request.batch_size,
                 extra=scan_fields(ctx))
        return request.columns

    # ---- get_next ----
    def reports_error_kinds(self, context_id: str | None) -> bool:
        """Whether the reader of this scanner asked for error kinds (False for one not here)."""
        try:
            return self.contexts.get(context_id).report_kinds
        except StarscanError:
            return False

    def next(self, context_id: str | None, offset: int | None, as_batch: bool = False) -> NextResult:
        """get_next's reply (``as_batch``: for a front that sends record batches: replies.next_reply)."""
        if self.observer is None:
            return self._next(context_id, offset, as_batch)
        ctx = self._peek(context_id) if isinstance(context_id, str) else None
        rows0, bytes0 = (ctx.rows_sent, ctx.bytes_sent) if ctx is not None else (0, 0)
        started = time.monotonic()
        error: BaseException | None = None
        try:
            return self._next(context_id, offset, as_batch)
        except BaseException as exc:
            error = exc
            raise
        finally:  # a scan resumed here from its record was not held before the call: nothing to count
            sent = (ctx.rows_sent - rows0, ctx.bytes_sent - bytes0) if ctx is not None else (0, 0)
            self.observer.replied(ctx, sent[0], sent[1], error, started, time.monotonic())

    def _next(self, context_id: str | None, offset: int | None, as_batch: bool) -> NextResult:
        check_text(context_id, "context_id")
        if self.resumable is not None and not self.contexts.holds(context_id):
            self.resumable.resume(context_id, offset, self._open)
        with self.contexts.using(context_id) as ctx, ctx.lock:
            if self.resumable is not None:
                self.resumable.touch(ctx)
            return next_reply(ctx, offset, self.settings.reply_fill_wait_s, as_batch)

    def connection_closed(self, context_ids: set[str]) -> None:
        """A reader's connection ended. The scanners it named that are neither closed nor read
        to the end were most likely abandoned (a reader that timed out or crashed closes
        nothing): they are kept ``abandoned_scan_keep_alive_s`` from their last call instead
        of their keep_alive_min, unless a call names them again (a reader that reconnects)."""
        grace = self.settings.abandoned_scan_keep_alive_s
        if grace > 0 and context_ids:
            self.contexts.abandoned(context_ids, grace)

    def tend_records(self) -> None:
        """The reaper's pass over the resumable scans' records (ResumableScans.tend)."""
        if self.resumable is not None:
            self.resumable.tend()

    # ---- close_scanner ----
    def close(self, context_id: str | None) -> None:
        if not isinstance(context_id, (str, type(None))):
            return  # not a context id of ours: nothing to close
        if self.resumable is not None:
            self.resumable.closed(context_id)
        ctx = self.contexts.remove(context_id)
        if ctx is not None:
            # A close before eos (a reader's first() or LIMIT) is normal: this line is its only trace.
            log.info("close context_id=%s user=%s table=%s rows=%d bytes=%d%s", ctx.context_id, ctx.user, ctx.table,
                     ctx.rows_sent, ctx.bytes_sent, "" if ctx.eos else " before eos", extra=scan_fields(ctx))

    def _removed(self, ctx: ScanContext, how: str) -> None:
        """A context went (close, GC, shutdown)."""
        if self.resumable is not None:
            self.resumable.removed(ctx, how)
        scan_gone(self.result_cache, ctx)
        if self.audit is not None:
            audit_scan(self.audit, ctx, how)

"""Resumable scans: every scan is recorded where every BE of the deployment finds it
(starscan.plans.scan_records), so that a get_next for a scan this BE does not hold (its BE
died behind a shared address, or this BE restarted) opens it here from its record and goes
on at the reader's offset; the rows come in a fixed order, so the rows before the offset are
passed over. This module writes only the context's ``resumption`` part (and, at a resume,
where the replies start)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from starscan.core.errors import InternalError, StarscanError
from starscan.core.logs import scan_fields
from starscan.core.protocol_extensions import ERROR_KIND_PROPERTY, ORDERED_PROPERTY, asked
from starscan.plans.scan_records import ScanRecord, ScanRecords
from starscan.provider.contexts import ScanContext, ScanContextManager
from starscan.provider.open_request import OpenRequest
from starscan.provider.replies import resume_at

log = logging.getLogger("starscan.provider")


class ResumableScans:
    """The BE's side of the records: written at open, kept fresh while the scan is read,
    read back to resume a scan, deleted at close and expired by the reaper."""

    def __init__(self, records: ScanRecords, contexts: ScanContextManager):
        self.records = records
        self.contexts = contexts
        self._lock = threading.Lock()

    def record(self, ctx: ScanContext, params: OpenRequest) -> None:
        """Write the scan's record for the other BEs (a failure costs only resumability)."""
        record = ScanRecord(
            context_id=ctx.context_id, plan=str(params.opaqued_query_plan), tablet_ids=list(params.tablet_ids or []),
            batch_size=params.batch_size or 0, keep_alive_s=ctx.keep_alive_s,
            properties={str(k): str(v) for k, v in (params.properties or {}).items() if str(k).startswith("starscan.")},
            query_timeout=params.query_timeout, mem_limit=params.mem_limit)
        try:
            ctx.resumption.recorded = self.records.put(record)
        except OSError as exc:
            log.warning("context_id=%s: its record could not be written to %s (%s): another BE cannot resume it",
                        ctx.context_id, self.records.folder, exc, extra=scan_fields(ctx))

    def resume(self, context_id: str | None, offset: int | None,
               open_scan: Callable[[ScanContext, OpenRequest], object]) -> None:
        """Open here, with ``open_scan(ctx, params)``, the scan another BE opened (or this one,
        before a restart), from its record, to be read on from ``offset``: a get_next for a
        context this BE does not hold. Nothing happens when there is no record (the caller
        answers not found)."""
        record = self.records.get(context_id)
        if record is None:
            return
        with self._lock:
            if self.contexts.holds(record.context_id):
                return  # resumed by a concurrent call
            params = params_of(record)
            ctx = self.contexts.create(1, context_id=record.context_id)
            ctx.lock.acquire()  # a concurrent get_next waits until the scan is open here
        try:
            ctx.keep_alive_s = record.keep_alive_s
            ctx.client = "resumed"
            ctx.report_kinds = asked(record.properties, ERROR_KIND_PROPERTY)
            try:
                open_scan(ctx, params)
            except Exception as exc:  # noqa: BLE001 - the reader gets the reason at this get_next
                error = exc if isinstance(exc, StarscanError) else InternalError(
                    f"the scan could not be resumed on this BE: {type(exc).__name__}: {exc}")
                if not isinstance(exc, StarscanError):
                    log.exception("resuming context_id=%s failed unexpectedly", record.context_id)
                ctx.open_error = error  # what a get_next that waited for this one answers
                self.contexts.remove(ctx.context_id)
                raise error from None
            ctx.resumption.recorded = self.records.touch(record.context_id)
            resume_at(ctx, offset or 0)
        finally:
            ctx.lock.release()
        log.info("resumed context_id=%s at offset=%d (opened on another BE or before a restart)", ctx.context_id,
                 ctx.replies.skip_to, extra=scan_fields(ctx))

    def touch(self, ctx: ScanContext) -> None:
        """Keep a recorded context's record as fresh as the context (at most every quarter
        of its keep-alive), so that its age is the scan's idle time on every BE."""
        recorded = ctx.resumption.recorded
        if recorded is None:
            return
        if time.time() - recorded > ctx.keep_alive_s / 4:
            stamp = self.records.touch(ctx.context_id)
            ctx.resumption.recorded = stamp if stamp is not None else recorded

    def closed(self, context_id: str | None) -> None:
        self.records.delete(context_id)  # gone for every BE

    def removed(self, ctx: ScanContext, how: str) -> None:
        """A context went: a reaped one's record goes too, unless another BE read it since."""
        if how == "reaped" and ctx.resumption.recorded is not None:
            self.records.delete_unless_touched_since(ctx.context_id, ctx.resumption.recorded)

    def tend(self) -> None:
        """The reaper's pass over the records: the records nobody touched for their keep-alive
        are deleted, and the contexts this BE holds whose record a close on another BE
        deleted are dropped."""
        self.records.expire()
        for ctx in self.contexts.snapshot():
            if ctx.resumption.recorded is not None and ctx.in_use == 0 and self.records.touched(ctx.context_id) is None:
                if self.contexts.remove(ctx.context_id) is not None:
                    log.info("context_id=%s was closed on another BE: dropped here", ctx.context_id,
                             extra=scan_fields(ctx))


def params_of(record: ScanRecord) -> OpenRequest:
    """The open_scanner request a record was made from (no password: the plan's user is
    checked again against the users file)."""
    properties = dict(record.properties)
    properties[ORDERED_PROPERTY] = "true"
    return OpenRequest(
        opaqued_query_plan=record.plan, tablet_ids=list(record.tablet_ids), batch_size=record.batch_size,
        properties=properties, query_timeout=record.query_timeout, mem_limit=record.mem_limit)

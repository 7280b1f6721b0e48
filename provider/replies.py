"""The Thrift front of a scan: get_next's offset protocol (docs/protocol.md 4.3).

A reader asks for the rows after ``offset``; the front answers up to ``batch_size`` rows from
the scan's queue (or from the result cache's replies), one Arrow IPC stream a reply. The
previous reply is kept, so a reader that lost it and asks again at the same offset gets the
same bytes; any other offset is refused. eos comes only after every row the scan produced
was handed out. A scan resumed here from another BE first passes over the rows the reader
already had (``skip``). The front writes only the context's ``replies`` part.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from starscan.arrow.wire import IpcStream
from starscan.core.errors import InternalError, InvalidArgument, NotFound, StarscanError
from starscan.core.logs import scan_fields
from starscan.provider.cached_replies import keep_reply, next_cached, scan_ended
from starscan.provider.contexts import ScanContext
from starscan.provider.result_queue import EOS

log = logging.getLogger("starscan.provider")


class NextResult:
    __slots__ = ("rows", "eos", "rows_total", "batch")

    def __init__(self, rows: bytes | IpcStream | None, eos: bool, rows_total: int | None = None,
                 batch: pa.RecordBatch | None = None):
        self.rows = rows
        self.eos = eos
        self.rows_total = rows_total  # set on eos when the client asked for the row count
        self.batch = batch  # the reply's rows as a batch, for a front that takes batches (rows is then None)


def next_reply(ctx: ScanContext, offset: int | None, fill_wait_s: float, as_batch: bool = False) -> NextResult:
    """The reply to get_next(offset) of an open scan; call with ``ctx.lock`` held.
    ``as_batch``: a front that sends record batches itself (Arrow Flight) takes the queue's
    batch as it is, not serialized into an IPC stream first (unless the result cache keeps
    the reply); a repeated offset is then not answered again."""
    replies = ctx.replies
    if replies.skip_to:
        skip(ctx)
    if ctx.open_error is not None:
        raise ctx.open_error if isinstance(ctx.open_error, StarscanError) else NotFound(
            "fragment_instance_id does not exists")
    if offset is None:
        offset = 0  # as StarRocks' BE: an unset offset is 0
    if offset == replies.offset:
        if replies.eos:
            return _eos(ctx)
        if ctx.cached.replay is not None:
            cached = next_cached(ctx.cached)
            if cached is None:
                return _end(ctx)
            return _hand_out(ctx, *cached)
        if replies.carry is not None:
            batch, ipc, replies.carry = replies.carry, None, None
        else:
            assert ctx.run is not None
            taken = ctx.run.queue.take_reply(replies.batch_size, fill_wait_s=fill_wait_s)
            batch, ipc = taken if isinstance(taken, tuple) else (taken, None)
        if batch is EOS:
            assert ctx.run is not None
            produced = ctx.run.queue.rows_in
            if produced != replies.offset:  # never eos on a partial result
                log.error("scan %s ended with %d rows handed out of %d produced", ctx.context_id, replies.offset,
                          produced, extra=scan_fields(ctx))
                raise InternalError(f"scan integrity check failed: the scan produced {produced} rows "
                                    f"but {replies.offset} were handed out; read the scan again")
            scan_ended(ctx.cached)
            return _end(ctx)
        assert ctx.run is not None
        if as_batch and ctx.cached.fill is None:
            return _hand_out_batch(ctx, batch)
        rows = ctx.run.scan.converter.ipc_stream(batch, ipc)
        keep_reply(ctx.cached, batch.num_rows, rows)
        return _hand_out(ctx, batch.num_rows, rows)
    if offset == replies.prev_offset and replies.prev_rows is not None:
        # The client did not get our last reply and asks again: same batch.
        return NextResult(replies.prev_rows, False)
    raise NotFound(f"context_id={ctx.context_id}, send_offset={offset}, context_offset={replies.offset}")


def _hand_out(ctx: ScanContext, count: int, rows: bytes | IpcStream) -> NextResult:
    replies = ctx.replies
    replies.prev_offset, replies.prev_rows = replies.offset, rows
    replies.offset += count
    replies.rows_sent += count
    replies.bytes_sent += len(rows)
    return NextResult(rows, False)


def _hand_out_batch(ctx: ScanContext, batch: pa.RecordBatch) -> NextResult:
    replies = ctx.replies
    replies.prev_offset, replies.prev_rows = None, None
    replies.offset += batch.num_rows
    replies.rows_sent += batch.num_rows
    replies.bytes_sent += batch.get_total_buffer_size()
    return NextResult(None, False, batch=batch)


def _end(ctx: ScanContext) -> NextResult:
    replies = ctx.replies
    replies.eos = True
    replies.prev_offset, replies.prev_rows = None, None
    return _eos(ctx)


def _eos(ctx: ScanContext) -> NextResult:
    return NextResult(None, True, rows_scanned(ctx) if ctx.replies.report_rows else None)


def rows_scanned(ctx: ScanContext) -> int:
    """Rows the scan produced (the row count a reader may ask for at eos)."""
    if ctx.cached.replay is not None:
        return ctx.cached.replay.rows
    return ctx.run.queue.rows_in if ctx.run is not None else 0


def resume_at(ctx: ScanContext, offset: int) -> None:
    """A scan opened here for a reader that had ``offset`` rows of it from another BE."""
    ctx.replies.skip_to = max(0, offset)


def skip(ctx: ScanContext) -> None:
    """A resumed scan's first ``skip_to`` rows, which the reader had from the BE that held
    the scan: read and passed over (the rows come in a fixed order); the rest of the batch
    the skip ends in is the next reply's."""
    replies = ctx.replies
    target, replies.skip_to = replies.skip_to, 0
    while replies.offset < target:
        if ctx.cached.replay is not None:
            raise InvalidArgument("a scan answered from the result cache cannot be resumed at an offset")
        assert ctx.run is not None
        taken = ctx.run.queue.take_reply(min(replies.batch_size, target - replies.offset), fill_wait_s=0)
        batch = taken[0] if isinstance(taken, tuple) else taken
        if batch is EOS:
            raise NotFound(f"context_id={ctx.context_id}, send_offset={target}: the scan has only "
                           f"{replies.offset} rows")
        keep = replies.offset + batch.num_rows - target
        if keep > 0:
            replies.carry = batch.slice(batch.num_rows - keep)
        replies.offset += batch.num_rows - max(keep, 0)

"""Scan contexts: one per open_scanner, keyed by a random UUID (docs/protocol.md 4.1)."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starscan.core.errors import ContextNotFound

if TYPE_CHECKING:
    from starscan.arrow.wire import IpcStream
    from starscan.provider.result_cache import CachedResult, CacheFill
    from starscan.provider.result_queue import ResultQueue
    from starscan.provider.spark_scan import SparkScan


@dataclass
class ScanInfo:
    """What the scan's audit line, its profile and the admin page report about it."""

    query_id: str | None = None
    user: str | None = None
    table: str | None = None          # db.table
    columns: list[str] = field(default_factory=list)
    sql: str | None = None
    tablets: int | None = None
    engine: str | None = None         # "arrow" or "sql", once chosen
    result_cache: str | None = None   # "hit" or "miss" when the cache was asked
    profile: dict | None = None       # the profile's summary, when profiles are on


@dataclass
class Replies:
    """Where the reader is in the scan's replies: the offset protocol's state, written by
    the Thrift front (provider/replies.py) only."""

    batch_size: int = 0               # rows per reply, at most
    report_rows: bool = False         # the reader asked for the row count at eos
    offset: int = 0                   # rows handed out
    # The previous reply, kept so a repeated offset (lost reply) is answered again.
    prev_offset: int | None = None
    prev_rows: bytes | IpcStream | None = None
    eos: bool = False
    rows_sent: int = 0
    bytes_sent: int = 0
    # A scan resumed here from another BE: the rows to pass over before its first reply
    # (the reader had them from the BE that held it before), and what is left of the batch
    # the skip ended in.
    skip_to: int = 0
    carry: Any = None


@dataclass
class ScanRun:
    """The scan that produces the rows: Spark's (or the BE's own) readers, the bounded queue
    they fill and the query-timeout timer; made by provider/scan_start.py, once."""

    scan: SparkScan
    queue: ResultQueue
    timer: threading.Timer


@dataclass
class CachedReplies:
    """The result cache's part in a scan (provider/cached_replies.py): the cached replies
    it answers from, or the fill its replies go to."""

    replay: CachedResult | None = None     # a scan answered from the result cache
    index: int = 0                         # next reply of ``replay`` to hand out
    fill: CacheFill | None = None          # this scan's replies on their way to the cache


@dataclass
class Resumption:
    """A resumable scan's part (provider/resumable.py, starscan.plans.scan_records): its
    record's last time stamp written by this BE (None: not recorded)."""

    recorded: float | None = None


@dataclass
class ScanContext:
    """One scanner: who opened it and when, and one part per step that writes it (the
    replies, the scan, the result cache, the resumable record); each part is written only
    by its step's module."""

    context_id: str
    keep_alive_s: float
    user: str = ""
    table: str = ""
    client: str = ""                 # peer address of the connection that opened it
    report_kinds: bool = False       # the client asked for error kinds in statuses (protocol_extensions)
    created: float = field(default_factory=time.monotonic)
    last_access: float = field(default_factory=time.monotonic)
    in_use: int = 0
    # Set when the connection that last named it ended before its eos or close: the reader
    # most likely abandoned it, and it goes after this many idle seconds (ScanService.connection_closed).
    abandoned_keep_alive_s: float | None = None
    admitted: bool = False           # counted against the scanner caps
    open_error: Exception | None = None
    replies: Replies = field(default_factory=Replies)
    run: ScanRun | None = None       # when the scan started (not for a result-cache hit)
    cached: CachedReplies = field(default_factory=CachedReplies)
    resumption: Resumption = field(default_factory=Resumption)
    info: ScanInfo = field(default_factory=ScanInfo, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # What the admin page, metrics, profiles and the audit read of the parts.
    @property
    def scan(self) -> SparkScan | None:
        return self.run.scan if self.run is not None else None

    @property
    def queue(self) -> ResultQueue | None:
        return self.run.queue if self.run is not None else None

    @property
    def eos(self) -> bool:
        return self.replies.eos

    @property
    def rows_sent(self) -> int:
        return self.replies.rows_sent

    @property
    def bytes_sent(self) -> int:
        return self.replies.bytes_sent

    @property
    def batch_size(self) -> int:
        return self.replies.batch_size

    def release(self, reason=None) -> None:
        """Cancel the scan and free the queue (``reason``: the error a waiting reader gets). Idempotent."""
        run = self.run
        if run is None:
            return
        run.timer.cancel()
        run.scan.cancel(reason)
        if reason is not None:
            run.queue.fail(reason)
        run.queue.close()


# Context ids are random UUIDs (docs/protocol.md 4.1) that also say which server run issued them:
# 10 random bytes, 3 bytes of this run's epoch, 3 check bytes. An id that is not registered
# but carries a valid check and another epoch was opened before a restart, and the reply says
# so (any other unknown id gets StarRocks' exact message). Check bytes are not a secret: they
# only choose the wording of an error.
_EPOCH_BYTES, _CHECK_BYTES = 3, 3


def _uuid_bits(raw: bytes) -> bytes:
    b = bytearray(raw)
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    return bytes(b)


def _check(head: bytes) -> bytes:
    return hashlib.blake2b(head, digest_size=_CHECK_BYTES, person=b"starscan-ctx").digest()


def _new_context_id(epoch: bytes) -> str:
    head = _uuid_bits(os.urandom(10) + epoch)
    return str(uuid.UUID(bytes=head + _check(head)))


def _context_epoch(context_id: str) -> bytes | None:
    """The epoch an id of ours was issued in; None for ids that are not ours."""
    try:
        raw = uuid.UUID(context_id).bytes
    except (ValueError, AttributeError, TypeError):
        return None
    if len(context_id) != 36 or context_id != str(uuid.UUID(bytes=raw)):
        return None
    head, check = raw[:16 - _CHECK_BYTES], raw[16 - _CHECK_BYTES:]
    return head[10:] if _check(head) == check else None


class ScanContextManager:
    def __init__(self):
        self._lock = threading.Lock()
        self._contexts: dict[str, ScanContext] = {}
        # Called as listener(ctx, how) once a context is gone: how is "closed", "reaped" or
        # "shutdown" (the audit line is written there).
        self._removed_listeners: list[Callable[[ScanContext, str], None]] = []
        # This run's epoch, with the version/variant bits applied as they are in the ids.
        self.epoch = _uuid_bits(bytes(10) + os.urandom(_EPOCH_BYTES))[10:]

    def create(self, keep_alive_min: int, context_id: str | None = None) -> ScanContext:
        """A new context; ``context_id``: a resumed scan's id (another BE issued it), or None
        for a new one. KeyError for an id already held (a concurrent resume)."""
        ctx = ScanContext(context_id=context_id or _new_context_id(self.epoch), keep_alive_s=keep_alive_min * 60.0)
        with self._lock:
            if ctx.context_id in self._contexts:
                raise KeyError(ctx.context_id)
            self._contexts[ctx.context_id] = ctx
        return ctx

    def holds(self, context_id: str | None) -> bool:
        with self._lock:
            return (context_id or "") in self._contexts

    def get(self, context_id: str | None) -> ScanContext:
        with self._lock:
            ctx = self._contexts.get(context_id or "")
        if ctx is None:
            # An unset context_id reads as "" (as the BE's C++ default), never as "None".
            message = f"context_id: {context_id or ''} not found"
            epoch = _context_epoch(context_id or "")
            if epoch is not None and epoch != self.epoch:
                message += ("; it was opened before the server restarted and its scan is gone: "
                            "open a new scanner with the same plan (a new one if it expired) and read again from offset 0")
            raise ContextNotFound(message)
        return ctx

    @contextmanager
    def using(self, context_id: str | None):
        """Hold a context for one call: exempt from GC while inside, touched afterwards."""
        ctx = self.get(context_id)
        with self._lock:
            ctx.in_use += 1
        try:
            yield ctx
        finally:
            with self._lock:
                ctx.in_use -= 1
                ctx.last_access = time.monotonic()
                ctx.abandoned_keep_alive_s = None  # its reader is here

    def remove(self, context_id: str | None) -> ScanContext | None:
        with self._lock:
            ctx = self._contexts.pop(context_id or "", None)
        if ctx is not None:
            ctx.release()
            self._removed(ctx, "closed")
        return ctx

    def add_removed_listener(self, listener: Callable[[ScanContext, str], None], *, first: bool = False) -> None:
        """Call ``listener(ctx, how)`` as each context goes. ``first``: before the listeners
        already added (a scan's profile is finished before its audit line is written)."""
        with self._lock:
            if first:
                self._removed_listeners.insert(0, listener)
            else:
                self._removed_listeners.append(listener)

    def _removed(self, ctx: ScanContext, how: str) -> None:
        for listener in list(self._removed_listeners):
            try:
                listener(ctx, how)
            except Exception:  # noqa: BLE001 - an audit or metrics failure must not break close/GC
                logging.getLogger("starscan.provider").exception("a context-removed listener failed")

    def abandoned(self, context_ids: set[str], keep_alive_s: float) -> None:
        """These scanners' reader left them before their end (not inside a call now): they go
        after ``keep_alive_s`` idle seconds, unless a call names them again."""
        with self._lock:
            for cid in context_ids:
                ctx = self._contexts.get(cid)
                if ctx is not None and ctx.in_use == 0 and not ctx.replies.eos:
                    ctx.abandoned_keep_alive_s = min(keep_alive_s, ctx.keep_alive_s)

    def reap_idle(self, now: float | None = None) -> list[tuple[ScanContext, float]]:
        """Remove every context idle past its keep-alive and not inside a call."""
        now = time.monotonic() if now is None else now
        victims = []
        with self._lock:
            for cid, ctx in list(self._contexts.items()):
                idle = now - ctx.last_access
                keep = ctx.keep_alive_s if ctx.abandoned_keep_alive_s is None else ctx.abandoned_keep_alive_s
                if ctx.in_use == 0 and idle > keep:
                    victims.append((self._contexts.pop(cid), idle))
        for ctx, _ in victims:
            ctx.release()
            self._removed(ctx, "reaped")
        return victims

    def snapshot(self) -> list[ScanContext]:
        with self._lock:
            return list(self._contexts.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._contexts)

    def close_all(self, reason=None) -> None:
        with self._lock:
            contexts = list(self._contexts.values())
            self._contexts.clear()
        for ctx in contexts:
            ctx.release(reason)
            self._removed(ctx, "shutdown")

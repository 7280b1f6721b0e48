"""Scan contexts: one per open_scanner, keyed by a random UUID (PROTOCOL.md 4.1)."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

from starscan.errors import NotFound


@dataclass
class ScanContext:
    context_id: str
    keep_alive_s: float
    user: str = ""
    table: str = ""
    batch_size: int = 0
    created: float = field(default_factory=time.monotonic)
    last_access: float = field(default_factory=time.monotonic)
    offset: int = 0
    # The previous reply, kept so a repeated offset (lost reply) is answered again.
    prev_offset: int | None = None
    prev_rows: bytes | None = None
    scan: object | None = None        # SparkScan, when open succeeded
    queue: object | None = None       # ResultQueue
    open_error: Exception | None = None
    eos: bool = False
    rows_sent: int = 0
    bytes_sent: int = 0
    in_use: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    timer: threading.Timer | None = field(default=None, repr=False)

    def idle_seconds(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.last_access

    def release(self) -> None:
        """Cancel the scan and free the queue. Idempotent."""
        if self.timer is not None:
            self.timer.cancel()
        if self.scan is not None:
            self.scan.cancel()
        if self.queue is not None:
            self.queue.close()


class ScanContextManager:
    def __init__(self):
        self._lock = threading.Lock()
        self._contexts: dict[str, ScanContext] = {}

    def create(self, keep_alive_min: int) -> ScanContext:
        ctx = ScanContext(context_id=str(uuid.uuid4()), keep_alive_s=keep_alive_min * 60.0)
        with self._lock:
            self._contexts[ctx.context_id] = ctx
        return ctx

    def get(self, context_id: str | None) -> ScanContext:
        with self._lock:
            ctx = self._contexts.get(context_id or "")
        if ctx is None:
            # An unset context_id reads as "" (as the BE's C++ default), never as "None".
            raise NotFound(f"context_id: {context_id or ''} not found")
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

    def remove(self, context_id: str | None) -> ScanContext | None:
        with self._lock:
            ctx = self._contexts.pop(context_id or "", None)
        if ctx is not None:
            ctx.release()
        return ctx

    def reap_idle(self, now: float | None = None) -> list[tuple[ScanContext, float]]:
        """Remove every context idle past its keep-alive and not inside a call."""
        now = time.monotonic() if now is None else now
        victims = []
        with self._lock:
            for cid, ctx in list(self._contexts.items()):
                idle = now - ctx.last_access
                if ctx.in_use == 0 and idle > ctx.keep_alive_s:
                    victims.append((self._contexts.pop(cid), idle))
        for ctx, _ in victims:
            ctx.release()
        return victims

    def snapshot(self) -> list[ScanContext]:
        with self._lock:
            return list(self._contexts.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._contexts)

    def close_all(self) -> None:
        with self._lock:
            contexts = list(self._contexts.values())
            self._contexts.clear()
        for ctx in contexts:
            ctx.release()

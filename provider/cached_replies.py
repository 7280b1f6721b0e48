"""The result cache's step in a scan (provider/result_cache.py holds the cache itself).

At open, after every other check has passed, a scan the cache holds is answered from it:
the same replies, offsets and eos as the scan that filled it, and no Spark work. Otherwise
the scan's replies are kept on their way to the reader, and complete when it reaches eos;
a scan that ends otherwise leaves nothing behind. This module writes only the context's
``cached`` part.
"""

from __future__ import annotations

import logging

from starscan.core.errors import SnapshotGone
from starscan.core.logs import scan_fields
from starscan.provider.contexts import CachedReplies, ScanContext
from starscan.provider.open_checks import CheckedOpen
from starscan.provider.result_cache import ResultCache, cache_key
from starscan.provider.scan_sources import check_snapshot
from starscan.storage.stores import Storage

log = logging.getLogger("starscan.provider")


def look_up(cache: ResultCache, ctx: ScanContext, request: CheckedOpen, storage: Storage, time_zone: str) -> bool:
    """Whether the scan is answered from the cache (else its replies fill it, when the cache
    serves the table)."""
    plan = request.plan
    if not cache.enabled_for(plan.database, plan.table):
        return False
    # Every check has passed (signature, identity, grants, tablets, caps); the planned files
    # must still be there, exactly as a Spark scan would require.
    check_snapshot(plan, request.plan_tablets, request.tablet_ids, storage)
    # The replies of a scan in Arrow's own types (the Flight SQL front) are other bytes.
    form = f"{time_zone}|arrow" if request.arrow_types else time_zone
    key = cache_key(plan, request.plan_tablets, request.tablet_ids, request.batch_size, form, request.ordered)
    hit = cache.get(key, plan.table_location, plan.version)
    if hit is not None:
        ctx.cached.replay = hit
        ctx.info.result_cache = "hit"
        log.info("open context_id=%s query_id=%s user=%s table=%s tablets=%d batch_size=%d: from the result "
                 "cache (%d rows, %d bytes)", ctx.context_id, plan.query_id, plan.user, request.table,
                 len(request.tablet_ids), request.batch_size, hit.rows, hit.nbytes, extra=scan_fields(ctx))
        return True
    ctx.cached.fill = cache.fill(key, plan.table_location, plan.version)
    ctx.info.result_cache = "miss"
    return False


def next_cached(cached: CachedReplies) -> tuple[int, bytes] | None:
    """The next reply of a scan answered from the cache (rows, bytes), None after the last."""
    assert cached.replay is not None
    replies = cached.replay.replies
    if cached.index >= len(replies):
        return None
    cached.index += 1
    return replies[cached.index - 1]


def keep_reply(cached: CachedReplies, rows: int, data) -> None:
    """A reply of a scan that fills the cache, on its way to the reader."""
    if cached.fill is not None:
        cached.fill.add(rows, bytes(data))


def scan_ended(cached: CachedReplies) -> None:
    """The scan reached eos: what it filled is complete."""
    if cached.fill is not None:
        cached.fill.complete()


def scan_gone(cache: ResultCache, ctx: ScanContext) -> None:
    """The scan's context went (close, GC, shutdown): a fill that did not reach eos is
    dropped, and a scan that found the table's files changed drops the table's entries."""
    fill = ctx.cached.fill
    if fill is None:
        return
    fill.abandon()
    if isinstance(getattr(ctx.queue, "error", None), SnapshotGone):
        cache.drop_table(fill.location)

"""A scanner's audit line, written once when its context goes (close, GC, shutdown), and
the outcome and rows read that the audit, the profile and the metrics give it."""

from __future__ import annotations

import time

from starscan.core.errors import ScanCancelled
from starscan.provider.contexts import ScanContext
from starscan.security.audit import AuditLog


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


def rows_read(ctx) -> int | None:
    """Rows the context's scan read from files, where the BE counted them: the arrow engine's
    readers (SparkScan.rows_read); 0 for a scan answered from the result cache; None for a
    sql-engine scan (Spark's count, looked up later) or one refused at open."""
    if ctx.cached.replay is not None:
        return 0
    scan = ctx.scan
    return scan.rows_read if scan is not None else None


def splits_by_reader(ctx) -> tuple[int, int] | None:
    """A completed scan's splits read whole in the BE's own process and by Spark's tasks
    (a sql-engine scan's are all Spark's); None for a scan answered from the result cache,
    one refused at open or one that did not end (closed, failed). A scan that stopped at
    its LIMIT counts the splits that ended."""
    scan = ctx.scan
    if ctx.cached.replay is not None or scan is None or not ctx.eos or ctx.open_error is not None:
        return None
    sink = scan.sink
    ended = sum(1 for split in sink.splits if split.ended) if sink is not None else scan.splits
    by_be = min(scan.local_splits, ended)
    return by_be, ended - by_be


def audit_scan(audit: AuditLog, ctx: ScanContext, how: str) -> None:
    outcome, error = scan_outcome(ctx, how)
    info = ctx.info
    audit.record(
        "scan", context_id=ctx.context_id, query_id=info.query_id, user=info.user, client=ctx.client,
        table=info.table, columns=info.columns if info.columns or info.table else None, sql=info.sql,
        tablets=info.tablets, engine=info.engine,
        rows=ctx.rows_sent, rows_read=rows_read(ctx), bytes=ctx.bytes_sent, duration_ms=round((time.monotonic() - ctx.created) * 1000, 1),
        outcome=outcome, error=error, result_cache=info.result_cache, profile=info.profile)

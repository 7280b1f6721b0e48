"""The relay reads each scanner's next batch from its BE while the reader takes the current
one, so the hop through the FE costs the reader no round trip of its own.

Without it a relayed ``get_next`` waited for the BE's whole reply before the FE sent the
first byte of it, and the BE began the batch after that only when the reader asked: lineitem
through the relay read at 0.75-0.79x the direct routings' rows/s (bench/hosts.py). The next
``get_next`` is known: the same context at the offset after this batch's rows, as every
reader of the protocol sends it. Exactly one call is ever in flight per BE connection, and
the reply to the last offset is kept, so a reader that asks for the same offset again (its
retry after a timeout) gets the same rows. A reader that asks for another offset gets what
its BE answers to that offset. A batch read ahead and not asked for is dropped with the
scanner: one reply per scanner is the memory this costs.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from starscan.core.thrift_defs import wire

#: Threads reading ahead for all relayed scanners at once; a scanner past them reads on
#: when one is free (its reader waits no longer than without the read-ahead).
READERS_AHEAD = 128

_pool = ThreadPoolExecutor(max_workers=READERS_AHEAD, thread_name_prefix="relay-ahead")


def rows_in(reply: Any) -> int:
    """The rows of a get_next reply's Arrow IPC stream (read in place: no copy)."""
    if reply.rows is None or len(reply.rows) == 0:
        return 0
    return sum(batch.num_rows for batch in pa.ipc.open_stream(reply.rows))


class ReadAhead:
    """One scanner's replies: the last one the reader had, and the next, in flight."""

    def __init__(self) -> None:
        self.last: tuple[int, Any] | None = None     # (offset, reply) the reader had last
        self.ahead: tuple[int, Future] | None = None  # (offset, the BE's reply coming)

    def kept(self, offset: int) -> Any | None:
        """The reply the reader had for ``offset`` (it asks again), else None."""
        if self.last is not None and self.last[0] == offset:
            return self.last[1]
        return None

    def take(self, offset: int) -> Future | None:
        """The reply read ahead, if it is for ``offset``; any read ahead ends here (its
        connection is free again once it is taken or waited for)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return None
        at, future = ahead
        if at == offset:
            return future
        try:
            future.result()
        except Exception:  # noqa: BLE001 - a reply nobody asked for: its failure shows at the next call
            pass
        return None

    def had(self, offset: int, reply: Any, conn: Any, context_id: str) -> None:
        """The reader gets ``reply`` for ``offset``: keep it, and ask the BE for the next."""
        self.last = (offset, reply)
        if reply.status.status_code != wire.TStatusCode.OK or reply.eos:
            return
        following = offset + rows_in(reply)
        params = wire.TScanNextBatchParams(context_id=context_id, offset=following)
        self.ahead = (following, _pool.submit(conn.get_next, params))

    def drain(self) -> None:
        """Wait for the read in flight (before its connection is used or closed)."""
        self.take(-1)

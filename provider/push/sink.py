"""The push transport's end of one scan (``PushSink``): a task's connection's frames taken
and handed to the scan's split board (provider/splits.py), and the board's answers (stop,
yield) sent back. The board decides everything about the splits: which one a task reads,
what of its rows count, when it ends; this module carries frames.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from typing import Any

import pyarrow as pa

from starscan.core.errors import MemLimitExceeded, ScanFailed
from starscan.provider.push.wire import (
    BATCH,
    END,
    ERROR,
    FRAME,
    GO,
    ROWS,
    ROWS_AND_READ,
    SPLIT_NO,
    STOP,
    YIELD,
    drain,
    recv_arrow_buffer,
    recv_exact,
    send_quietly,
)
from starscan.provider.result_queue import ResultQueue, RoomWait
from starscan.provider.splits import Offer, SplitBoard

log = logging.getLogger("starscan.provider.push")

_ANSWERS = {Offer.YIELD: YIELD, Offer.STOP: STOP}


class PushSink(SplitBoard):
    """One scan's split board as its Spark tasks reach it: by the scan's secret token, over
    the BE's push listener (provider/push/listener.py), in the Arrow ``schema`` of the wire."""

    def __init__(self, queue: ResultQueue, schema: pa.Schema, splits: int, yield_rule: RoomWait | None,
                 ends_with_jobs: bool = False):
        super().__init__(queue, splits, yield_rule, ends_with_jobs)
        self.token = secrets.token_bytes(32)
        self.schema = schema
        self._read_lock = threading.Lock()
        self.rows_read = 0  # rows the scan's readers read from its files (their end frames, the BE's own reads)

    def read_from_files(self, rows: int) -> None:
        with self._read_lock:
            self.rows_read += rows

    def stop(self) -> list[object]:
        """Tell every task to stop; later connections are told at once."""
        holders = super().stop()
        for holder in holders:
            if isinstance(holder, socket.socket):
                send_quietly(holder, STOP)
        return holders

    def serve(self, sock: socket.socket, split_no: int, assigned: bool = False) -> None:
        """Take frames from one task until it closes; runs in the listener's handler thread.
        ``assigned``: the split came from ``claim`` and the task learns its number with the go."""
        attempt, superseded = self.begin(split_no, sock)
        if isinstance(superseded, socket.socket):
            send_quietly(superseded, STOP)  # a task Spark gave up on: its frames no longer count
        if attempt is None:
            send_quietly(sock, STOP)
            return
        try:
            sock.sendall(GO + SPLIT_NO.pack(split_no) if assigned else GO)
            while True:
                header = recv_exact(sock, FRAME.size)
                if header is None:
                    return
                kind, size = FRAME.unpack(header)
                if kind == BATCH:
                    if not self._take_batch(sock, attempt, split_no, size):
                        return
                elif kind == END:
                    payload = recv_exact(sock, size)
                    if payload is None or size not in (ROWS.size, ROWS_AND_READ.size):
                        return
                    reported, rows_read = ROWS_AND_READ.unpack(payload) if size == ROWS_AND_READ.size \
                        else (*ROWS.unpack(payload), 0)
                    self.read_from_files(rows_read)
                    attempt.end(reported)
                    return
                elif kind == ERROR:
                    payload = recv_exact(sock, size)
                    attempt.failed(bytes(payload or b"").decode("utf-8", "replace"))
                    return
                else:
                    log.warning("push connection for split %d sent an unknown frame %r: closed", split_no, kind)
                    return
        except OSError:
            return  # the task went away; the driver learns from Spark why
        except Exception as exc:  # noqa: BLE001 - a frame we could not take: the scan fails, the BE goes on
            log.exception("push connection for split %d failed", split_no)
            self.fail(ScanFailed(f"the BE could not take the rows of split {split_no}: {type(exc).__name__}: {exc}"))
        finally:
            attempt.leave()
            try:
                sock.close()
            except OSError:
                pass

    def _take_batch(self, sock: socket.socket, attempt: Any, split_no: int, size: int) -> bool:
        """One BATCH frame of ``size`` bytes offered to the split's attempt, and the task told
        to pause or stop if it must; False when the connection is done (a batch past the
        scanner's memory limit, or not of the scan's schema, fails the scan)."""
        if size > max(self.queue.max_bytes, 1 << 16) * 4:
            self.fail(MemLimitExceeded(
                f"one batch needs {size} bytes, more than the scanner's memory limit of "
                f"{self.queue.max_bytes} bytes allows; raise mem_limit"))
            send_quietly(sock, STOP)
            drain(sock)
            return False
        payload = recv_arrow_buffer(sock, size)
        if payload is None:
            return False
        try:
            batch = pa.ipc.read_record_batch(payload, self.schema)
        except Exception as exc:  # noqa: BLE001 - not a batch of this scan's schema
            self.fail(ScanFailed(f"split {split_no} sent a batch that is not Arrow of the scan's "
                                 f"schema: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__}"))
            send_quietly(sock, STOP)
            return False
        answer = _ANSWERS.get(attempt.offer(batch, payload))
        if answer is not None:
            send_quietly(sock, answer)
        return True

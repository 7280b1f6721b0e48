"""A Spark SQL query's rows streamed from its tasks to the driver's process over a socket, in
bounded memory whatever the size of the answer.

Spark's own ways to bring rows to the driver (``collect``, ``toLocalIterator``,
``collectAsArrowToPython``) hold at least one whole partition of the result in the driver's
JVM heap: a task's result is deserialized there at once. A join's partition can be many times
the size of its input, and then the driver runs out of heap (``OutOfMemoryError`` in
``task-result-getter``) and the job never ends. Here the tasks send instead: each partition
of the query's Arrow batch RDD is one Spark job (in partition order, so an ORDER BY's order
is kept) whose task connects to a listener of this process and writes its Arrow batches as
Spark makes them; the socket's flow control holds the task while the reader is slower. The
driver's JVM never holds the rows, and this process holds one batch at a time.

The connection: the task sends a hello (magic, the query's random token, its partition and
attempt), then frames of a 4-byte length and one Arrow IPC record batch message (without
the schema: the reader knows it); a length of ``END`` ends the partition. A task that fails ends its connection without the end frame: when it had sent
no rows, Spark's next attempt is taken instead; after rows were sent the query fails
(``ResultStreamBroken``), never repeating or losing a row.

Runs in Spark's Python workers as well as in the driver: standard library and pyarrow only.
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

log = logging.getLogger("starscan.spark")

MAGIC = b"SSROWS1\n"
TOKEN_BYTES = 32
HELLO = struct.Struct(">8s32sII")  # magic, token, partition, attempt
LENGTH = struct.Struct(">I")
END = 0xFFFFFFFF
#: How often a reader waiting for a task's connection looks whether the job has ended.
_POLL_S = 0.5
_HELLO_TIMEOUT_S = 30.0


class ResultStreamBroken(RuntimeError):
    """A task's connection ended after some of its rows had been sent."""


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    token: bytes


def send_partition(target: Target) -> Callable[[Iterator[bytes]], Iterator[Any]]:
    """The partition function of a streamed query: the partition's Arrow IPC batches (raw
    bytes of ``toArrowBatchRdd``) written to the driver's listener."""

    def run(raw_batches: Iterator[bytes]) -> Iterator[Any]:
        # Names from this module's import in the worker: a closure's globals would be pickled by value.
        from pyspark import TaskContext

        from starscan.spark import result_stream as wire

        task = TaskContext.get()
        assert task is not None, "a partition function runs inside a Spark task"
        with socket.create_connection((target.host, target.port), timeout=wire._HELLO_TIMEOUT_S) as conn:
            conn.settimeout(None)
            conn.sendall(wire.HELLO.pack(wire.MAGIC, target.token, task.partitionId(), task.attemptNumber()))
            for raw in raw_batches:
                conn.sendall(wire.LENGTH.pack(len(raw)))
                conn.sendall(raw)
            conn.sendall(wire.LENGTH.pack(wire.END))
        return iter(())

    return run


class ResultStream:
    """One query's listener and the batches its tasks send, partition after partition."""

    def __init__(self, bind_host: str, advertise_host: str):
        self._server = socket.create_server((bind_host, 0), backlog=16)
        self._server.settimeout(_POLL_S)
        self.target = Target(advertise_host, self._server.getsockname()[1], os.urandom(TOKEN_BYTES))

    def close(self) -> None:
        self._server.close()

    def batches(self, sc: Any, rdd: Any, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Every partition's batches in order: one job per partition, read as it sends."""
        from starscan.spark.pyspark_internals import run_job

        mapped = rdd.mapPartitions(send_partition(self.target))
        group = f"starscan-query-{self.target.token[:8].hex()}"
        done = False
        try:
            for partition in range(rdd.getNumPartitions()):
                failure: list[BaseException] = []
                job = threading.Thread(target=_run, args=(run_job, sc, mapped, partition, failure, group),
                                       name=f"starscan-query-part-{partition}", daemon=True)
                job.start()
                yield from self._partition(partition, schema, job, failure)
                job.join()
                if failure:
                    raise failure[0]
            done = True
        finally:
            if not done:  # the reader stopped early (a client's limit, a disconnect) or a task failed
                try:
                    sc.cancelJobGroup(group)  # the running task ends as cancelled, not on a broken pipe
                except Exception:  # noqa: BLE001 - the context is stopping: nothing left to cancel
                    pass
            self.close()

    def _partition(self, partition: int, schema: pa.Schema, job: threading.Thread,
                   failure: list[BaseException]) -> Iterator[pa.RecordBatch]:
        """The batches of one partition, from the first attempt that ends its stream."""
        sent = 0
        while True:
            conn = self._accept(job)
            if conn is None:  # the job ended without a connection that finished
                if failure:
                    raise failure[0]
                if sent:
                    raise ResultStreamBroken(f"the query's task of partition {partition} ended after {sent} rows "
                                             "without finishing: the rest of its rows were not sent")
                raise ResultStreamBroken(f"the query's task of partition {partition} ended without sending its rows")
            with conn:
                if not self._hello(conn, partition):
                    continue
                reader = conn.makefile("rb", buffering=1 << 20)
                try:
                    while True:
                        head = reader.read(LENGTH.size)
                        if len(head) < LENGTH.size:
                            break
                        (length,) = LENGTH.unpack(head)
                        if length == END:
                            return
                        body = reader.read(length)
                        if len(body) < length:
                            break
                        batch = pa.ipc.read_record_batch(pa.py_buffer(body), schema)
                        sent += batch.num_rows
                        yield batch
                finally:
                    reader.close()
            if sent:  # an attempt died after sending rows: another would send them again
                raise ResultStreamBroken(f"the query's task of partition {partition} failed after sending {sent} rows")

    def _accept(self, job: threading.Thread) -> socket.socket | None:
        while True:
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                if not job.is_alive():
                    return None
                continue
            conn.settimeout(_HELLO_TIMEOUT_S)
            return conn

    def _hello(self, conn: socket.socket, partition: int) -> bool:
        data = b""
        while len(data) < HELLO.size:
            chunk = conn.recv(HELLO.size - len(data))
            if not chunk:
                return False
            data += chunk
        magic, token, part, attempt = HELLO.unpack(data)
        if magic != MAGIC or not hmac.compare_digest(token, self.target.token) or part != partition:
            log.warning("a connection to a query's result stream was refused (wrong token or partition %d, not %d)",
                        part, partition)
            return False
        conn.settimeout(None)
        return True


def _run(run_job: Callable[..., None], sc: Any, mapped: Any, partition: int, failure: list[BaseException],
         group: str) -> None:
    try:
        sc.setJobGroup(group, "a query of the FE, streamed to it", interruptOnCancel=True)
        run_job(sc, mapped, partition)
    except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
        failure.append(exc)

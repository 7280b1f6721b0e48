"""What a Spark task of a scan runs, in Spark's Python worker: read its split's batches,
turn them into the wire types and push them to the scanner's BE (provider/push_wire.py).

The function is built on the driver and shipped inside the task (cloudpickle): it carries
the BE's push address, the scan's token and the column types, nothing else. Everything it
imports is the server's own code, so Spark's Python workers must run the server's
interpreter (``spark.pyspark.python``, set by starscan.spark).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class PushTarget:
    host: str
    port: int
    token: bytes
    source_schema: pa.Schema      # the Arrow schema of what the split yields (Spark's types)
    columns: tuple                # (name, SqlType, nullable) of the wire columns
    batch_rows: int = 4096        # the reader's batch_size: the task sends batches of that many rows
    local_path: str | None = None  # the BE's Unix socket, used by tasks on the BE's machine


def push_spark_arrow(target: PushTarget):
    """The partition function of the ``sql`` engine: the split's input is Spark's own Arrow
    batches (IPC bytes of ``DataFrame.toArrowBatchRdd``), produced as Spark scans, one
    batch at a time."""

    def run(raw_batches):
        def batches():
            for raw in raw_batches:
                yield pa.ipc.read_record_batch(pa.py_buffer(raw), target.source_schema)

        push_split(target, batches())
        return iter(())

    return run


def push_arrow_splits(target: PushTarget, read):
    """The partition function of the ``arrow`` engine: the split's input is the split's
    description (starscan/arrow_read.py); pyarrow reads it here."""

    def run(splits):
        from starscan.arrow_read import read_split

        for split in splits:
            push_split(target, read_split(read, split))
        return iter(())

    return run


def push_split(target: PushTarget, batches) -> None:
    """Send every batch of this task's split, converted to the wire types, then the end.
    A stop or yield from the BE ends the split early and normally (the rest of the input
    is not read); any other failure is reported to the BE and raised, so Spark sees it."""
    from pyspark import TaskContext

    from starscan.provider.push_wire import PushStopped, TaskSender
    from starscan.wire_arrow import BatchConverter

    task = TaskContext.get()
    assert task is not None, "push_split runs inside a Spark task"
    sender = TaskSender(target.host, target.port, target.token, task.partitionId(), task.attemptNumber(),
                        target.local_path)
    try:
        if not sender.go:
            return
        converter = BatchConverter(list(target.columns))
        for batch in rechunk((converter.convert(b) for b in batches if b.num_rows), target.batch_rows):
            sender.send(batch)
        sender.end()
    except PushStopped:
        pass
    except BaseException as exc:
        sender.error(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        sender.close()


def rechunk(batches, rows: int):
    """The same rows in batches of exactly ``rows`` (the last one of the split may be
    shorter): each becomes one get_next reply the BE passes on without re-slicing,
    re-joining or re-serializing it. The copying happens here, in the task."""
    pending: list[pa.RecordBatch] = []
    have = 0
    for batch in batches:
        while batch.num_rows:
            take = min(rows - have, batch.num_rows)
            pending.append(batch.slice(0, take))
            have += take
            batch = batch.slice(take)
            if have == rows:
                yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
                pending, have = [], 0
    if have:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)

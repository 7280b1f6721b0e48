"""What a Spark task of a scan runs, in Spark's Python worker: read its split's batches,
turn them into the wire types and push them to the scanner's BE (provider/push/wire.py).

The function is built on the driver and shipped inside the task (cloudpickle): it carries
the BE's push address, the scan's token and the column types, nothing else. Everything it
imports is the server's own code, so Spark's Python workers must run the server's
interpreter (``spark.pyspark.python``, set by starscan.spark.session).
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
    turn_s: float = 0.0           # the task's turn on its Spark slot (the BE's scheduler says how long)
    arrow_types_tz: str | None = None  # Arrow's own types in this time zone, not StarRocks' wire forms


def push_spark_arrow(target: PushTarget):
    """The partition function of the ``sql`` engine: the split's input is Spark's own Arrow
    batches (IPC bytes of ``DataFrame.toArrowBatchRdd``), produced as Spark scans, one
    batch at a time."""

    def run(raw_batches):
        def batches():
            for raw in raw_batches:
                yield pa.ipc.read_record_batch(pa.py_buffer(raw), target.source_schema)

        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None, "a partition function runs inside a Spark task"
        push_split(target, lambda _split, _stats: batches(), task.partitionId())  # the partition is the split
        return iter(())

    return run


def push_arrow_splits(target: PushTarget, read, splits: tuple):
    """The partition function of the ``arrow`` engine. Its task is one of the scanner's
    ``tasks_per_scanner`` readers, not one split: it asks the BE for a split nobody reads
    yet, reads it with pyarrow (starscan.arrow.read) and pushes it, then asks again, until
    none is left or the BE says stop or yield (or, after its turn, ``target.turn_s``, that
    another scan waits for a slot: provider/scheduler.py). So a scan is one Spark job per task, not per
    split: in the JVM each job costs scheduling, serializing and JIT-compiling work, and a
    split's end no longer waits for the driver to start the next one (bench/RESULTS.md,
    issue 15, third session: the JVM's CPU per million rows fell from ~77 ms to ~30 ms)."""

    def run(_runner):
        import time

        from starscan.arrow.read import read_split
        from starscan.provider.push.wire import ANY_SPLIT, KEEP_SPLIT, NEXT_SPLIT

        started = time.monotonic()
        ask = ANY_SPLIT
        while push_split(target, lambda split, stats: read_split(read, splits[split], cut=False, stats=stats), ask):
            # After its turn, the task gives its slot to a scan that waits for one (the BE
            # answers stop), at a split's end.
            ask = NEXT_SPLIT if time.monotonic() - started >= target.turn_s else KEEP_SPLIT
        return iter(())

    return run


def push_split(target: PushTarget, batches_of, split: int) -> bool:
    """Send every batch of a split, converted to the wire types, then the end: True when the
    split was sent whole. ``split`` is the split the hello names (``ANY_SPLIT``: the BE
    assigns one); ``batches_of(n, stats)`` gives split n's batches, counting what it reads from
    files in ``stats`` (starscan.arrow.read_stats) where it can. A stop or yield from the BE ends
    the split early and normally (the rest of the input is not read; False); any other
    failure is reported to the BE and raised, so Spark sees it."""
    from pyspark import TaskContext

    from starscan.arrow.read_stats import ReadStats
    from starscan.arrow.split_plan import SplitReadError
    from starscan.arrow.wire import BatchConverter
    from starscan.provider.push.wire import PushStopped, TaskSender

    task = TaskContext.get()
    assert task is not None, "push_split runs inside a Spark task"
    sender = TaskSender(target.host, target.port, target.token, split, task.attemptNumber(), target.local_path)
    try:
        if not sender.go:
            return False
        converter = BatchConverter(list(target.columns), target.arrow_types_tz)
        stats = ReadStats()
        batches = batches_of(sender.split, stats)
        for batch in rechunk((converter.convert(b) for b in batches if b.num_rows), target.batch_rows):
            sender.send(batch)
        sender.end(stats.rows_read)
        return True
    except PushStopped:
        return False
    except BaseException as exc:
        # The arrow reader's own errors say what failed, naming the table and the file.
        sender.error(str(exc) if isinstance(exc, SplitReadError) else f"{type(exc).__name__}: {exc}")
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

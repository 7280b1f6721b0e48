"""Readers of the BE and what they read: plans (``plan_for``), a sequential BE reader on a
real Thrift connection as the Java readers make their calls (``Reader``), rows as
comparable values (``arrow_rows``, ``spark_rows``), Spark's job states and a /metrics
scrape."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from starscan.client import thrift_client
from starscan.core.thrift_defs import wire

OK = wire.TStatusCode.OK
NOT_FOUND = wire.TStatusCode.NOT_FOUND


def plan_for(client, db: str, table: str, sql: str) -> tuple[str, list[int]]:
    body = client.plan(db, table, sql)
    return body["opaqued_query_plan"], [int(t) for t in body["partitions"]]


class Reader:
    """One BE connection, calls made one after another as the Java readers do."""

    def __init__(self, be_addr, timeout_s: float = 120.0):
        self.client = thrift_client(*be_addr, timeout_s=timeout_s)

    def open(self, db, table, plan, tablets, batch_size=1024, user="root", passwd="", **kw):
        return self.client.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database=db, table=table, tablet_ids=list(tablets),
            opaqued_query_plan=plan, batch_size=batch_size, user=user, passwd=passwd, **kw))

    def open_ok(self, *args, **kw) -> str:
        opened = self.open(*args, **kw)
        assert opened.status.status_code == OK, opened.status
        return opened.context_id

    def next(self, cid: str, offset: int):
        return self.client.get_next(wire.TScanNextBatchParams(context_id=cid, offset=offset))

    def next_batch(self, cid: str, offset: int) -> pa.RecordBatch:
        res = self.next(cid, offset)
        assert res.status.status_code == OK and not res.eos, res.status
        return pa.ipc.open_stream(res.rows).read_next_batch()

    def drain(self, cid: str, offset: int = 0) -> int:
        """get_next until eos; returns the rows read."""
        while True:
            res = self.next(cid, offset)
            assert res.status.status_code == OK, res.status
            if res.eos:
                return offset
            offset += pa.ipc.open_stream(res.rows).read_all().num_rows

    def drain_batches(self, cid: str, offset: int = 0,
                      seconds: list[float] | None = None) -> tuple[list[pa.RecordBatch], int]:
        """get_next until eos; returns the batches (one per reply) and the final offset.
        ``seconds``: each call's duration is added to it."""
        batches = []
        while True:
            started = time.monotonic()
            res = self.next(cid, offset)
            if seconds is not None:
                seconds.append(time.monotonic() - started)
            assert res.status.status_code == OK, res.status
            if res.eos:
                assert not res.rows
                return batches, offset
            batch = one_batch(res.rows)
            batches.append(batch)
            offset += batch.num_rows

    def read_tablets(self, db, table, plan, tablets, after_first_batch=None, batch_size=64) -> list[dict]:
        """Every row of the plan, a scanner per tablet read to eos; ``after_first_batch()`` runs
        once, right after the first batch arrived (a writer committing mid-read)."""
        rows: list[dict] = []
        for tablet in tablets:
            cid = self.open_ok(db, table, plan, [int(tablet)], batch_size=batch_size)
            offset = 0
            while True:
                res = self.next(cid, offset)
                assert res.status.status_code == OK, res.status
                if res.eos:
                    break
                batch = pa.ipc.open_stream(res.rows).read_all()
                rows += batch.to_pylist()
                offset += batch.num_rows
                if after_first_batch is not None:
                    after_first_batch()
                    after_first_batch = None
            self.close_scanner(cid)
        return rows

    def close_scanner(self, cid: str):
        return self.client.close_scanner(wire.TScanCloseParams(context_id=cid))

    def close(self):
        self.client.close()


def scrape(fe_url: str) -> dict:
    """{(sample name, frozenset(labels)): value} from /metrics."""
    resp = httpx.get(f"{fe_url}/metrics", timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), 0.0)


def follow_process(fe: str, out, *extra: str, table: str = "inc.stream", consumer: str = "exporter"):
    """A `starscan follow` process writing ``table``'s appends into ``out`` (killed by tests)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    return subprocess.Popen([sys.executable, "-m", "starscan", "follow", table, "--consumer", consumer,
                             "--into", str(out), "--fe", fe, "--poll-s", "0.05", *extra],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def one_batch(rows: bytes) -> pa.RecordBatch:
    batches = list(pa.ipc.open_stream(rows))
    assert len(batches) == 1 and batches[0].num_rows > 0
    return batches[0]


def canon(value, zone: str = "UTC"):
    """A hashable value in the StarRocks encoding (Spark dates/timestamps become text)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):  # TIMESTAMP from Spark: a naive local datetime
        value = value.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        return tuple(sorted((k, canon(v, zone)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(canon(v, zone) for v in value)
    return value


def arrow_rows(batches) -> Counter:
    out: Counter = Counter()
    for b in batches:
        for row in b.to_pylist():
            out[tuple(canon(v) for v in row.values())] += 1
    return out


def spark_rows(spark, server, db, table, tablets, columns, where=None) -> Counter:
    """What Spark reads from exactly the files of ``tablets``, filtered by ``where``."""
    snap = server.warehouse.snapshot(db, table)
    paths = [str(Path(snap.location) / f.path) for t in tablets for f in snap.by_id[t].files]
    df = spark.read.option("basePath", str(snap.location)).parquet(*paths)
    if where:
        df = df.where(where)
    # A timestamp_ntz would arrive naive too, but these tests select none.
    return Counter(tuple(canon(v, server.settings.time_zone) for v in r) for r in df.select(*columns).collect())


def status_tracker(spark):
    """Spark's status tracker once its listener bus is drained. Spark records a job's start
    and end from that bus, a moment after the job's own thread went on, so a job a scan just
    ran (or runs now) is surely in the tracker only then."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return spark.sparkContext.statusTracker()


def job_states(spark, group: str) -> dict[int, str]:
    tracker = status_tracker(spark)
    out = {}
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        if info is not None:
            out[job_id] = str(info.status)
    return out


@contextmanager
def runtime_settings(server, **changes: object) -> Iterator[None]:
    """The server's run-time settings ``changes`` (through the run-time config path) for the
    ``with`` block; the values it had are set again afterwards."""
    saved = {key: getattr(server.service.settings, key) for key in changes}
    server.ops.update_config(changes)
    try:
        yield
    finally:
        server.ops.update_config(saved)


@contextmanager
def scan_engine_setting(server) -> Iterator[Callable[[str], None]]:
    """A setter of the server's ``scan_engine`` through the run-time config path; the engine
    it had is set again afterwards."""
    saved = server.service.settings.scan_engine
    try:
        yield lambda engine: server.ops.update_config({"scan_engine": engine})
    finally:
        server.ops.update_config({"scan_engine": saved})


def engine_counts(server) -> dict[str, float]:
    """Scans started on each engine so far (the server's starscan_scans_by_engine counter)."""
    out = {}
    for metric in server.ops.metrics.scans_by_engine.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                out[sample.labels["engine"]] = sample.value
    return out

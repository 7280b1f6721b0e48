"""Resumable scans (docs/scaling.md "Resumable scans"): two BEs that share the deployment's
state directory, on the session's Spark. A scanner opened on one is read on at any offset on
the other, with exactly the rows that would have followed; a close on either is final for
both. (tests/integration/test_scale_out.py kills a BE process behind one address.)"""

from __future__ import annotations

import contextlib

import pyarrow as pa
import pytest
from support.readers import NOT_FOUND, OK, Reader, plan_for
from support.servers import running_server
from support.waits import wait_until

SQL = "select l_orderkey, l_linenumber, l_comment from demo.lineitem where l_quantity > 5"


@pytest.fixture(scope="module", params=[0, 2], ids=["spark-tasks", "own-read-slots"])
def two_bes(spark, base_settings, server, request):
    """Two BEs whose scans are read by Spark's tasks (after the BE's first split), or by the
    BEs' own read slots (as a `--role be` node reads by default)."""
    settings = base_settings.model_copy(update={"resumable_scans": True, "scan_local_reads": True, "http_port": 0, "be_port": 0,
                                                "query_port": 0, "scan_context_gc_interval_s": 0.5,
                                                "scan_local_read_slots": request.param})
    with running_server(spark, settings) as a, running_server(spark, settings) as b:
        yield a, b


def _rows(rows: bytes) -> list[tuple]:
    table = pa.ipc.open_stream(rows).read_all()
    return list(zip(*(table.column(i).to_pylist() for i in range(table.num_columns))))


def _read(reader: Reader, cid: str, offset: int = 0, replies: int | None = None) -> tuple[list[tuple], int]:
    """get_next from ``offset`` until eos, or for ``replies`` replies."""
    out: list[tuple] = []
    while replies is None or replies > 0:
        res = reader.next(cid, offset)
        assert res.status.status_code == OK, res.status
        if res.eos:
            break
        got = _rows(res.rows)
        out += got
        offset += len(got)
        replies = None if replies is None else replies - 1
    return out, offset


@contextlib.contextmanager
def _readers(*servers):
    readers = [Reader(("127.0.0.1", s.be_port)) for s in servers]
    try:
        yield readers
    finally:
        for r in readers:
            r.close()


def test_a_scan_opened_on_one_be_is_read_on_at_any_offset_on_the_other(two_bes, client):
    a, b = two_bes
    plan, tablets = plan_for(client, "demo", "lineitem", SQL)
    with _readers(a, b) as (on_a, on_b):
        whole, _ = _read(on_a, on_a.open_ok("demo", "lineitem", plan, tablets, batch_size=1000))
        assert len(whole) > 5000

        cid = on_a.open_ok("demo", "lineitem", plan, tablets, batch_size=1000)
        first, offset = _read(on_a, cid, replies=2)
        _, lost = _read(on_a, cid, offset, replies=1)  # a reply that never reached the reader
        assert lost > offset
        rest, end = _read(on_b, cid, offset)           # the reader goes on at its offset on b
        assert first + rest == whole                   # the same rows, in the same order
        assert end == len(whole)
        assert b.contexts.holds(cid)
        on_b.close_scanner(cid)

        # closed on b: gone on a too (a's reaper drops it), and resumed nowhere
        wait_until(lambda: not a.contexts.holds(cid), timeout_s=30, interval_s=0.2,
                   what="the context closed on b to be dropped on a")
        for reader in (on_a, on_b):
            res = reader.next(cid, end)
            assert res.status.status_code == NOT_FOUND and f"context_id: {cid} not found" in res.status.error_msgs[0]


def test_a_resumed_scan_at_an_offset_past_its_rows_is_refused(two_bes, client):
    a, b = two_bes
    plan, tablets = plan_for(client, "demo", "lineitem", "select l_orderkey from demo.lineitem where l_orderkey < 100")
    with _readers(a, b) as (on_a, on_b):
        cid = on_a.open_ok("demo", "lineitem", plan, tablets, batch_size=1000)
        res = on_b.next(cid, 10_000_000)
        assert res.status.status_code == NOT_FOUND
        assert "send_offset=10000000" in res.status.error_msgs[0]
        on_a.close_scanner(cid)


def test_a_scan_of_a_stopped_be_is_resumed_by_another(two_bes, spark, base_settings, client):
    """A BE stopped (SIGTERM's path: its scans cancelled) keeps its scans' records: a reader
    goes on with another BE, or with the same one restarted, at its offset."""
    _, b = two_bes
    settings = base_settings.model_copy(update={"resumable_scans": True, "http_port": 0, "be_port": 0, "query_port": 0})
    plan, tablets = plan_for(client, "demo", "lineitem", SQL)
    with _readers(b) as (on_b,):
        whole, _ = _read(on_b, on_b.open_ok("demo", "lineitem", plan, tablets, batch_size=1000))
    with running_server(spark, settings) as stopping, _readers(stopping) as (on_stopping,):
        cid = on_stopping.open_ok("demo", "lineitem", plan, tablets, batch_size=1000)
        first, offset = _read(on_stopping, cid, replies=3)
    with _readers(b) as (on_b,):
        rest, _ = _read(on_b, cid, offset)
        on_b.close_scanner(cid)
    assert first + rest == whole

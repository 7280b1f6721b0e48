"""A BE serves scans from its first second (issue 38): it listens before its SparkSession is
up (starscan.spark.handle), reads arrow-engine scans itself in the meantime, and holds the
scans that need Spark until Spark is there (slower, not refused).

The BE under test is an in-process BE-only server whose Spark "starts" when the test opens a
gate (then it is the suite's session); the plans come from the suite's FE."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from starscan.client import StarscanClient


@pytest.fixture
def gated_be(spark, base_settings):
    from starscan.app.server import StarscanServer
    from starscan.spark.handle import SparkHandle
    from starscan.spark.session import spark_conf

    gate = threading.Event()

    def start_spark():
        assert gate.wait(300), "the test never let Spark start"
        return spark

    later = SparkHandle(start_spark, spark_conf(base_settings), watch=False)  # the suite's session: not ours to restart
    settings = base_settings.model_copy(update={"be_http_port": 0, "scan_engine": "auto", "scan_local_reads": True})
    srv = StarscanServer(settings, later, fe=False, be=True).start()
    try:
        yield srv, later, gate
    finally:
        gate.set()
        srv.stop()


def _routed(plan: dict, be_port: int) -> dict:
    return {**plan, "partitions": {t: {**info, "routings": [f"127.0.0.1:{be_port}"]}
                                   for t, info in plan["partitions"].items()}}


def test_arrow_scans_are_read_before_spark_is_up_and_spark_scans_wait_for_it(server, fe_url, gated_be):
    srv, later, gate = gated_be
    client = StarscanClient(fe_url, "root", "", timeout_s=60)
    sql = "select l_orderkey, l_linenumber, l_shipdate from demo.lineitem where l_quantity > 10"
    want = Counter(tuple(r.values()) for r in client.read("demo", "lineitem", sql).to_pylist())
    assert sum(want.values()) > 1000
    plan = client.plan("demo", "lineitem", sql)
    got = client.read("demo", "lineitem", sql, plan=_routed(plan, srv.be_port))
    assert Counter(tuple(r.values()) for r in got.to_pylist()) == want
    assert not later.ready.is_set()  # read whole without Spark

    # A scan only Spark SQL runs (a function in the predicate) waits for Spark, then is read.
    spark_sql = "select l_orderkey, l_linenumber from demo.lineitem where upper(l_shipmode) = 'MAIL'"
    want_spark = Counter(tuple(r.values()) for r in client.read("demo", "lineitem", spark_sql).to_pylist())
    result: dict = {}

    def read() -> None:
        try:
            result["rows"] = client.read("demo", "lineitem", spark_sql,
                                         plan=_routed(client.plan("demo", "lineitem", spark_sql), srv.be_port))
        except Exception as exc:  # noqa: BLE001 - handed to the test thread
            result["error"] = exc

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(3)
    assert reader.is_alive() and not result, "a scan that needs Spark ended before Spark was up"
    gate.set()
    reader.join(120)
    assert "error" not in result, result.get("error")
    assert Counter(tuple(r.values()) for r in result["rows"].to_pylist()) == want_spark

"""Servers with settings of their own, on the session's one SparkSession.

The shared ``server`` fixture runs with limits relaxed (conftest); the security, limit and
TLS tests each start one of these with the settings they check, in a warehouse of their own
when they change users, grants or the plan secret."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import httpx

from starscan.tables.catalog import Warehouse


@contextlib.contextmanager
def running_server(spark, settings):
    from starscan.app.server import StarscanServer

    srv = StarscanServer(settings, spark).start()
    try:
        yield srv
    finally:
        srv.stop()


def own_warehouse(spark, path: Path) -> Path:
    """A warehouse with db1.t1 (3 rows, 2 tablets) and db2.t2 (the same rows)."""
    from conftest import write_vector_table

    warehouse = Warehouse(path, 0)
    write_vector_table(spark, warehouse)
    t2 = warehouse.table_path("db2", "t2")
    t2.parent.mkdir(parents=True, exist_ok=True)
    spark.read.parquet(str(warehouse.table_path("db1", "t1"))).coalesce(1).write.parquet(str(t2))
    return path


def plan(fe_url: str, db: str, table: str, sql: str, auth: str, client: httpx.Client | None = None,
         **kwargs) -> httpx.Response:
    body = json.dumps({"sql": sql})
    headers = {"Authorization": auth}
    if client is not None:
        return client.post(f"{fe_url}/api/{db}/{table}/_query_plan", content=body, headers=headers)
    return httpx.post(f"{fe_url}/api/{db}/{table}/_query_plan", content=body, headers=headers, timeout=60, **kwargs)


def basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def wait_until(predicate, timeout_s: float = 60.0, interval_s: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)

"""Locust load test of a running starscan server (issue 6; driven by bench/load.sh).

Two kinds of users, half each by default:

- ``ThriftScanUser``: plans a scan over HTTP once (its plan is reused, as a reader re-reading a
  table does), then repeatedly reads it through the BE's Thrift API: ``open_scanner``, ``get_next``
  until eos, ``close_scanner``. Every Thrift call is reported to locust's ``request`` event with its
  latency and the bytes received (``get_next``: the Arrow IPC stream), so the statistics have one
  row per call; a whole scan is also reported as ``scan (open..close)``.
- ``PlanUser``: ``POST /api/<db>/<table>/_query_plan`` over HTTP (keep-alive, Basic auth).

Environment (load.sh sets them): ``LOAD_DB``/``LOAD_TABLE`` (demo.lineitem), ``LOAD_SCAN_SQL``,
``LOAD_PLAN_SQL``, ``LOAD_BATCH_SIZE`` (4096), ``LOAD_USER``/``LOAD_PASSWORD`` (root / empty),
``LOAD_THINK_S`` (0: back-to-back). Run: ``locust -f bench/locustfile.py --host http://127.0.0.1:8030``.
"""

from __future__ import annotations

import base64
import json
import os
import time
from functools import partial

import httpx
from locust import HttpUser, User, constant, task

DB = os.environ.get("LOAD_DB", "demo")
TABLE = os.environ.get("LOAD_TABLE", "lineitem")
SCAN_SQL = os.environ.get(
    "LOAD_SCAN_SQL",
    f"select l_orderkey, l_quantity, l_shipdate from {DB}.{TABLE} where l_shipdate >= '1998-01-01'")
PLAN_SQL = os.environ.get("LOAD_PLAN_SQL", f"select l_orderkey, l_shipdate from {DB}.{TABLE} where l_quantity > 10")
BATCH_SIZE = int(os.environ.get("LOAD_BATCH_SIZE", "4096"))
USER = os.environ.get("LOAD_USER", "root")
PASSWORD = os.environ.get("LOAD_PASSWORD", "")
THINK_S = float(os.environ.get("LOAD_THINK_S", "0"))
MAX_CALLS_PER_SCAN = 1_000_000  # a bound on the get_next loop; far above any scan here
AUTH = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
HEADERS = {"Authorization": AUTH, "Content-Type": "application/json; charset=UTF-8"}


class ThriftScanUser(User):
    wait_time = constant(THINK_S)
    weight = int(os.environ.get("LOAD_THRIFT_WEIGHT", "1"))

    def on_start(self) -> None:
        r = httpx.post(f"{self.host}/api/{DB}/{TABLE}/_query_plan", content=json.dumps({"sql": SCAN_SQL}),
                       headers=HEADERS, timeout=120)
        r.raise_for_status()
        self.plan = r.json()
        self.tablets: dict[str, list[int]] = {}
        for tablet, info in self.plan["partitions"].items():
            self.tablets.setdefault(info["routings"][0], []).append(int(tablet))
        self.clients = {}

    def on_stop(self) -> None:
        for client in self.clients.values():
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass

    def _client(self, endpoint: str):
        from starscan.client import thrift_client

        client = self.clients.get(endpoint)
        if client is None:
            host, port = endpoint.rsplit(":", 1)
            client = self.clients[endpoint] = thrift_client(host, int(port), timeout_s=300)
        return client

    def _call(self, name: str, fn, size_of=lambda res: 0):
        """One Thrift call, reported to locust; a transport error drops the connection."""
        t0 = time.perf_counter()
        exc = None
        res = None
        try:
            res = fn()
            if res.status.status_code != 0:
                exc = RuntimeError(f"{name}: status {res.status.status_code}: {res.status.error_msgs}")
        except Exception as e:  # noqa: BLE001 - reported to locust as a failure
            exc = e
            for endpoint in list(self.clients):
                self.clients.pop(endpoint).close()
        self.environment.events.request.fire(
            request_type="thrift", name=name, response_time=(time.perf_counter() - t0) * 1000.0,
            response_length=size_of(res) if res is not None else 0, exception=exc, context={})
        if exc is not None:
            raise _Reported() from exc
        return res

    @task
    def scan(self) -> None:
        from starscan.core.thrift_defs import wire

        t0 = time.perf_counter()
        total = 0
        exc = None
        try:
            for endpoint, tablets in self.tablets.items():
                client = self._client(endpoint)
                opened = self._call("open_scanner", partial(client.open_scanner, wire.TScanOpenParams(
                    cluster="default_cluster", database=DB, table=TABLE, tablet_ids=tablets,
                    opaqued_query_plan=self.plan["opaqued_query_plan"], batch_size=BATCH_SIZE,
                    user=USER, passwd=PASSWORD)))
                offset = 0
                try:
                    for _ in range(MAX_CALLS_PER_SCAN):
                        res = self._call("get_next", partial(client.get_next, wire.TScanNextBatchParams(
                            context_id=opened.context_id, offset=offset)), lambda r: len(r.rows or b""))
                        if res.eos:
                            break
                        total += len(res.rows)
                        offset += _rows_in(res.rows)
                    else:
                        raise RuntimeError(f"no eos after {MAX_CALLS_PER_SCAN} get_next calls")
                finally:
                    if endpoint in self.clients:
                        self._call("close_scanner", partial(client.close_scanner,
                            wire.TScanCloseParams(context_id=opened.context_id)))
        except _Reported as e:
            exc = e.__cause__
        except Exception as e:  # noqa: BLE001
            exc = e
        self.environment.events.request.fire(
            request_type="thrift", name="scan (open..close)", response_time=(time.perf_counter() - t0) * 1000.0,
            response_length=total, exception=exc, context={})


class PlanUser(HttpUser):
    wait_time = constant(THINK_S)
    weight = int(os.environ.get("LOAD_PLAN_WEIGHT", "1"))

    @task
    def query_plan(self) -> None:
        with self.client.post(f"/api/{DB}/{TABLE}/_query_plan", data=json.dumps({"sql": PLAN_SQL}), headers=HEADERS,
                              name="_query_plan", catch_response=True, timeout=120) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
            elif '"status":200' not in r.text.replace(" ", ""):
                r.failure(f"body: {r.text[:200]}")


class _Reported(Exception):
    """A failure already reported for its call."""


def _rows_in(ipc: bytes) -> int:
    import pyarrow as pa

    return sum(b.num_rows for b in pa.ipc.open_stream(ipc))

"""A small starscan/StarRocks reader: plan over HTTP, then open / get_next... / close.

Used by the tests, the benchmarks and `starscan scan`. It behaves like the StarRocks Spark
connector: tablets grouped per BE, one scanner per group, offsets advanced by the rows
received, eos ends a scanner, close always sent.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Iterator

import httpx
import pyarrow as pa
from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.transport import TCyBufferedTransportFactory

from starscan.thrift_defs import wire


class ScanError(Exception):
    def __init__(self, call: str, status):
        self.call = call
        self.status_code = status.status_code
        self.messages = list(status.error_msgs or [])
        name = wire.TStatusCode._VALUES_TO_NAMES.get(status.status_code, str(status.status_code))
        super().__init__(f"{call}: {name}: {'; '.join(self.messages)}")


class PlanError(Exception):
    def __init__(self, http_status: int, body: str):
        self.http_status = http_status
        self.body = body
        super().__init__(f"_query_plan answered HTTP {http_status}: {body}")


@dataclass
class ScanStats:
    rows: int = 0
    batches: int = 0
    bytes: int = 0
    scanners: int = 0
    first_batch_s: float | None = None
    columns: list = field(default_factory=list)


def thrift_client(host: str, port: int, timeout_s: float = 60.0):
    return make_client(
        wire.TStarrocksExternalService, host, port,
        proto_factory=TCyBinaryProtocolFactory(), trans_factory=TCyBufferedTransportFactory(),
        timeout=int(timeout_s * 1000),
    )


class StarscanClient:
    def __init__(self, fe: str, user: str = "root", password: str = "", timeout_s: float = 60.0):
        self.fe = fe if fe.startswith("http") else f"http://{fe}"
        self.user = user
        self.password = password
        self.timeout_s = timeout_s

    def _auth(self) -> str:
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()

    def plan(self, db: str, table: str, sql: str) -> dict:
        r = httpx.post(
            f"{self.fe}/api/{db}/{table}/_query_plan",
            content=json.dumps({"sql": sql}),
            headers={"Authorization": self._auth(), "Content-Type": "application/json; charset=UTF-8"},
            timeout=self.timeout_s,
        )
        if r.status_code != 200:
            raise PlanError(r.status_code, r.text)
        body = r.json()
        if body.get("status") != 200:
            raise PlanError(r.status_code, r.text)
        return body

    def batches(self, db: str, table: str, sql: str, batch_size: int = 4096, stats: ScanStats | None = None,
                keep_alive_min: int | None = None, mem_limit: int | None = None, query_timeout: int | None = None
                ) -> Iterator[pa.RecordBatch]:
        import time

        started = time.perf_counter()
        stats = stats if stats is not None else ScanStats()
        plan = self.plan(db, table, sql)
        groups: dict[str, list[int]] = {}
        for tablet, info in plan["partitions"].items():
            groups.setdefault(info["routings"][0], []).append(int(tablet))
        for endpoint, tablets in groups.items():
            host, port = endpoint.split(":")
            client = thrift_client(host, int(port), self.timeout_s)
            try:
                opened = client.open_scanner(wire.TScanOpenParams(
                    cluster="default_cluster", database=db, table=table, tablet_ids=tablets,
                    opaqued_query_plan=plan["opaqued_query_plan"], batch_size=batch_size,
                    user=self.user, passwd=self.password, keep_alive_min=keep_alive_min,
                    mem_limit=mem_limit, query_timeout=query_timeout,
                ))
                if opened.status.status_code != wire.TStatusCode.OK:
                    raise ScanError("open_scanner", opened.status)
                stats.scanners += 1
                stats.columns = [(c.name, c.type) for c in opened.selected_columns]
                offset = 0
                try:
                    while True:
                        res = client.get_next(wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
                        if res.status.status_code != wire.TStatusCode.OK:
                            raise ScanError("get_next", res.status)
                        if res.eos:
                            break
                        reader = pa.ipc.open_stream(res.rows)
                        for batch in reader:
                            if stats.first_batch_s is None:
                                stats.first_batch_s = time.perf_counter() - started
                            offset += batch.num_rows
                            stats.rows += batch.num_rows
                            stats.batches += 1
                            stats.bytes += batch.nbytes
                            yield batch
                finally:
                    try:
                        client.close_scanner(wire.TScanCloseParams(context_id=opened.context_id))
                    except Exception:
                        pass
            finally:
                client.close()

    def read(self, db: str, table: str, sql: str, batch_size: int = 4096, **kwargs) -> pa.Table:
        batches = list(self.batches(db, table, sql, batch_size, **kwargs))
        if not batches:
            return pa.table({})
        return pa.Table.from_batches(batches)

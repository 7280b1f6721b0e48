"""A reader run on a test host (``ip netns exec <host> python host_reader.py MODE JSON``) by
the multi-host tier: it reads an id table (``id`` 0.., each once) and prints, as JSON lines
on stdout, ``{"batch": n}`` after each batch (so the test can cut a link or kill a BE at a
known point of the read) and at the end ``{"rows": .., "distinct": .., "sum": ..}`` (or
``{"error": ..}``).

Modes (the readers starscan's users run):
- ``client``: starscan's bundled client (``StarscanClient``): plan, tablets per first
  routing, failover to the next routing;
- ``thrift``: the StarRocks connectors' shape: ``_query_plan`` over HTTP, tablets grouped by
  their first routing, one scanner per group, each call tried ``retries`` + 1 times on a new
  connection at the same offset, a socket timeout of ``timeout_s`` (the Flink connector: 1 s,
  no retry), never another routing;
- ``flight_sql``: ADBC's Flight SQL driver (a SELECT at the FE's Flight SQL port, each
  endpoint read from the location it names);
- ``mysql``: pymysql on the FE's MySQL port."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections import defaultdict
from typing import Any

import pyarrow as pa


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


class Tally:
    """The ids read (``count_only``: only rows and Arrow bytes, for a benchmark's reads of
    another table), and the seconds from the first call to the last row."""

    def __init__(self, count_only: bool = False) -> None:
        self.count_only = count_only
        self.rows = 0
        self.bytes = 0
        self.sum = 0
        self.ids: set[int] = set()
        self.batches = 0
        self.started = time.perf_counter()

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self.count_only:
            self.rows += batch.num_rows
            self.bytes += batch.nbytes
            self.batches += 1
            return
        self.add(batch.column("id").to_pylist())

    def add(self, ids: list[int]) -> None:
        self.rows += len(ids)
        self.sum += sum(ids)
        self.ids.update(ids)
        self.batches += 1
        say(batch=self.batches)

    def done(self, **more: Any) -> None:
        seconds = time.perf_counter() - self.started
        say(rows=self.rows, distinct=len(self.ids), sum=self.sum, bytes=self.bytes, seconds=seconds, **more)


def read_client(job: dict, tally: Tally) -> dict:
    from starscan.client import ScanStats, StarscanClient

    stats = ScanStats()
    client = StarscanClient(job["fe"], timeout_s=job.get("timeout_s", 30))
    for batch in client.batches(job["db"], job["table"], job["sql"], batch_size=4096, stats=stats):
        tally.add_batch(batch)
    return {"failovers": stats.failovers, "retries": stats.retries}


def _basic() -> str:
    return "Basic " + base64.b64encode(b"root:").decode()


def _plan(job: dict) -> dict:
    """The FE's ``_query_plan`` of the job's SQL, as root."""
    import httpx

    r = httpx.post(f"{job['fe']}/api/{job['db']}/{job['table']}/_query_plan", json={"sql": job["sql"]},
                   headers={"Authorization": _basic()}, timeout=60)
    r.raise_for_status()
    return r.json()


class _OneAddress:
    """A connector's connection to one routing: each call tried ``retries`` + 1 times, each
    time on a new connection, at the same offset."""

    def __init__(self, routing: str, retries: int, timeout_s: float):
        self.routing, self.retries, self.timeout_s = routing, retries, timeout_s
        self.client: Any = None
        self.reconnects = 0

    def call(self, name: str, params: Any) -> Any:
        from starscan.client import thrift_client

        host, _, port = self.routing.rpartition(":")
        failure: Exception | None = None
        for _ in range(self.retries + 1):
            try:
                if self.client is None:
                    self.client = thrift_client(host, int(port), timeout_s=self.timeout_s)
                return getattr(self.client, name)(params)
            except Exception as exc:  # noqa: BLE001 - a transport failure: a new connection, the same call
                failure = exc
                self.close()
                self.reconnects += 1
        raise RuntimeError(f"{name} at {self.routing} failed: {type(failure).__name__}: {failure}")

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client = None


def read_thrift(job: dict, tally: Tally) -> dict:
    from starscan.core.thrift_defs import wire

    plan = _plan(job)
    groups: dict[str, list[int]] = defaultdict(list)
    for tablet, info in plan["partitions"].items():
        groups[info["routings"][0]].append(int(tablet))
    reconnects = 0
    for routing, tablets in sorted(groups.items()):
        conn = _OneAddress(routing, job.get("retries", 0), job.get("timeout_s", 1.0))
        opened = conn.call("open_scanner", wire.TScanOpenParams(
            cluster="default_cluster", database=job["db"], table=job["table"], tablet_ids=tablets, batch_size=4096,
            opaqued_query_plan=plan["opaqued_query_plan"], user="root", passwd=""))
        if opened.status.status_code != wire.TStatusCode.OK:
            raise RuntimeError(f"open_scanner at {routing}: {opened.status}")
        offset = 0
        while True:
            res = conn.call("get_next", wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
            if res.status.status_code != wire.TStatusCode.OK:
                raise RuntimeError(f"get_next at {routing}: {res.status}")
            if res.eos:
                break
            batch = pa.ipc.open_stream(res.rows).read_all()
            tally.add_batch(batch)
            offset += batch.num_rows
        conn.call("close_scanner", wire.TScanCloseParams(context_id=opened.context_id))
        conn.close()
        reconnects += conn.reconnects
    return {"routings": sorted(groups), "reconnects": reconnects}


def read_flight_sql(job: dict, tally: Tally) -> dict:
    import adbc_driver_flightsql.dbapi as flight_sql
    from adbc_driver_flightsql import DatabaseOptions

    with flight_sql.connect(job["uri"], db_kwargs={"username": "root", "password": "",
                                                   DatabaseOptions.TIMEOUT_FETCH.value: "60"}) as conn, \
            conn.cursor() as cur:
        cur.execute(job["sql"])
        for batch in cur.fetch_record_batch():
            tally.add_batch(batch)
    return {}


def read_mysql(job: dict, tally: Tally) -> dict:
    import pymysql

    host, _, port = job["address"].rpartition(":")
    with pymysql.connect(host=host, port=int(port), user="root", password="", read_timeout=300) as conn, \
            conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(job["sql"])
        while rows := cur.fetchmany(4096):
            tally.add([int(r[0]) for r in rows])
    return {}


def read_plan(job: dict, tally: Tally) -> dict:
    """Only the plan: its routings (and the FE's Flight SQL endpoints' locations)."""
    return {"routings": sorted({b for info in _plan(job)["partitions"].values() for b in info["routings"]})}


def read_flight_locations(job: dict, tally: Tally) -> dict:
    """Only the FE's answer to a Flight SQL query: every endpoint's locations."""
    import pyarrow.flight as flight
    from google.protobuf import any_pb2

    from starscan.flight import flight_sql_pb2 as sql_pb2

    client = flight.connect(job["uri"])
    options = flight.FlightCallOptions(headers=[client.authenticate_basic_token("root", "")])
    command = any_pb2.Any()
    command.Pack(sql_pb2.CommandStatementQuery(query=job["sql"]))
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command.SerializeToString()), options)
    return {"locations": sorted({loc.uri.decode() for e in info.endpoints for loc in e.locations})}


MODES = {"client": read_client, "thrift": read_thrift, "flight_sql": read_flight_sql, "mysql": read_mysql,
         "plan": read_plan, "flight_locations": read_flight_locations}


PRELOAD = {"client": ("starscan.client", "thriftpy2", "httpx"), "thrift": ("starscan.client", "thriftpy2", "httpx"),
           "flight_sql": ("adbc_driver_flightsql.dbapi",), "mysql": ("pymysql",)}


def main() -> None:
    mode, job = sys.argv[1], json.loads(sys.argv[2])
    for module in PRELOAD.get(mode, ()):  # before the clock starts: a reader's imports are not its read
        __import__(module)
    tally = Tally(job.get("count_only", False))
    try:
        more = MODES[mode](job, tally)
    except Exception as exc:  # noqa: BLE001 - the test reads the failure
        say(error=f"{type(exc).__name__}: {exc}", rows=tally.rows)
        sys.exit(1)
    tally.done(**more)


if __name__ == "__main__":
    main()

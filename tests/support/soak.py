"""The soak's workload (bench/soak.py runs it for minutes and records it; the reliability
tests run it for seconds): reader threads over the demo tables in four scenarios (clean,
through a proxy that cuts the BE's writes, slow with a small mem_limit, abandoned without
close_scanner) and a client process killed every few seconds; every finished read compared
as a multiset with Spark's rows, then the leak check once the reaper has had its time."""

from __future__ import annotations

import gc
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path

import psutil

from support.processes import PeakRSS, jvm_process, log
from support.proxies import FaultProxy
from support.readers import arrow_rows, canon

MAX_MINUTES = 120.0
QUERIES = [  # (db, table, columns, where); batch sizes are drawn from BATCH_SIZES
    ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_quantity", "l_shipdate"], None),
    ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_comment"], "l_shipmode = 'AIR'"),
    ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_extendedprice", "l_returnflag"], "l_quantity > 40"),
    ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_receiptdate"], "l_orderkey < 2000"),
    ("demo", "all_types", ["id", "c_int", "c_bigint", "c_string", "c_date", "c_datetime", "c_decimal128"], None),
]
BATCH_SIZES = [1000, 4096, 16384, 65536]
SCENARIOS = ["clean", "drops", "slow", "abandon"]
WEIGHTS = [4, 3, 2, 1]

KILLED_CLIENT = r"""
import sys
from starscan.client import thrift_client
from starscan.core.thrift_defs import wire
host, port, plan, tablets = sys.argv[1], int(sys.argv[2]), sys.argv[3], [int(t) for t in sys.argv[4].split(",")]
c = thrift_client(host, port)
o = c.open_scanner(wire.TScanOpenParams(cluster="default_cluster", database="demo", table="lineitem",
    tablet_ids=tablets, opaqued_query_plan=plan, batch_size=1000, user="root", passwd=""))
if o.status.status_code == 0:
    c.get_next(wire.TScanNextBatchParams(context_id=o.context_id, offset=0))
print(o.context_id, flush=True)
sys.stdin.read()
"""


def sql_of(db, table, cols, where) -> str:
    return f"select {', '.join(cols)} from `{db}`.`{table}`" + (f" where {where}" if where else "")


class Soak:
    def __init__(self, args, server, spark):
        self.args, self.server, self.spark = args, server, spark
        self.fe = f"127.0.0.1:{server.http_port}"
        self.be = f"127.0.0.1:{server.be_port}"
        self.lock = threading.Lock()
        self.c = Counter()
        self.errors: list[str] = []
        self.expected: dict[str, Counter] = {}
        self.deadline = 0.0
        self.proxy = FaultProxy(("127.0.0.1", server.be_port), cut_probability=args.drop_probability,
                                seed=args.seed)

    # ---- bookkeeping ----
    def count(self, **kw) -> None:
        with self.lock:
            self.c.update(kw)

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)
        log(f"ERROR {text}")

    def oracle(self) -> None:
        from pyspark.sql import functions as F  # noqa: F401

        zone = self.server.settings.time_zone
        for db, table, cols, where in QUERIES:
            snap = self.server.warehouse.snapshot(db, table)
            df = self.spark.read.option("basePath", str(snap.location)).parquet(
                *[str(Path(snap.location) / f.path) for t in snap.tablets for f in t.files])
            if where:
                df = df.where(where)
            self.expected[sql_of(db, table, cols, where)] = Counter(
                tuple(canon(v, zone) for v in r) for r in df.select(*cols).collect())

    # ---- scenarios ----
    def check(self, sql: str, got: Counter, scenario: str) -> None:
        want = self.expected[sql]
        if got != want:
            missing, extra = sum((want - got).values()), sum((got - want).values())
            self.error(f"{scenario}: wrong rows for {sql}: {missing} missing, {extra} unexpected")
            self.count(wrong_rows=missing + extra)
        else:
            self.count(rows_checked=sum(got.values()), reads_checked=1)

    def read(self, rng: random.Random, scenario: str) -> None:
        from starscan.client import ScanStats, StarscanClient

        db, table, cols, where = rng.choice(QUERIES)
        sql = sql_of(db, table, cols, where)
        batch_size = rng.choice(BATCH_SIZES)
        stats = ScanStats()
        if scenario == "drops":
            client = StarscanClient(self.fe, retries=100, failovers=0, timeout_s=300, be_host_mapping={self.be: self.proxy.address})
        else:
            client = StarscanClient(self.fe, retries=0, failovers=0, timeout_s=300)
        kw = {}
        if scenario == "slow":
            kw["mem_limit"] = 2 << 20
        try:
            batches = []
            for batch in client.batches(db, table, sql, batch_size, stats=stats, **kw):
                batches.append(batch)
                if scenario == "slow":
                    time.sleep(rng.uniform(0.01, self.args.slow_pause_s))
        except Exception as exc:  # noqa: BLE001 - every failure is an error in this workload
            self.error(f"{scenario}: {sql} batch_size={batch_size}: {type(exc).__name__}: {exc}")
            return
        self.count(**{f"reads_{scenario}": 1}, reconnects=stats.retries)
        if stats.verified != stats.scanners:
            self.error(f"{scenario}: the end-of-scan row count was not reported for {sql}")
        self.check(sql, arrow_rows(batches), scenario)

    def abandon(self, rng: random.Random) -> None:
        from starscan.client import thrift_client
        from starscan.core.thrift_defs import wire

        db, table, cols, where = rng.choice(QUERIES)
        body = self._plan(db, table, sql_of(db, table, cols, where))
        client = thrift_client("127.0.0.1", self.server.be_port, 120)
        try:
            opened = client.open_scanner(wire.TScanOpenParams(
                cluster="default_cluster", database=db, table=table,
                tablet_ids=[int(t) for t in body["partitions"]], opaqued_query_plan=body["opaqued_query_plan"],
                batch_size=rng.choice(BATCH_SIZES), user="root", passwd=""))
            if opened.status.status_code != 0:
                self.error(f"abandon: open_scanner failed: {opened.status}")
                return
            offset = 0
            for _ in range(rng.randint(0, 3)):
                res = client.get_next(wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
                if res.status.status_code != 0:
                    self.error(f"abandon: get_next failed: {res.status}")
                    return
                if res.eos:
                    break
                import pyarrow as pa

                offset += sum(b.num_rows for b in pa.ipc.open_stream(res.rows))
            self.count(abandoned=1)
        finally:
            client.close()  # no close_scanner

    def _plan(self, db, table, sql) -> dict:
        from starscan.client import StarscanClient

        return StarscanClient(self.fe).plan(db, table, sql)

    def reader(self, i: int) -> None:
        rng = random.Random(self.args.seed * 1000 + i)
        while time.monotonic() < self.deadline:
            scenario = rng.choices(SCENARIOS, WEIGHTS)[0]
            try:
                if scenario == "abandon":
                    self.abandon(rng)
                else:
                    self.read(rng, scenario)
            except Exception as exc:  # noqa: BLE001
                self.error(f"{scenario}: unexpected {type(exc).__name__}: {exc}")

    def run(self) -> dict:
        """The workload for ``--minutes``, then the wait for the reaper and the leak check."""
        args, server, spark = self.args, self.server, self.spark
        earlier = set(producer_threads())  # another server's in this process (the test suite's) end in their own time
        before = memory()
        peak = PeakRSS().start()
        log(f"soak: {args.readers} readers for {args.minutes:g} min")
        self.deadline = time.monotonic() + args.minutes * 60
        threads = [threading.Thread(target=self.reader, args=(i,), daemon=True) for i in range(args.readers)]
        threads.append(threading.Thread(target=self.killer, daemon=True))
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(args.minutes * 60 + 600)
        wall = time.perf_counter() - t0
        hung = sum(t.is_alive() for t in threads)
        # Abandoned and killed clients' contexts go after keep-alive + one reaper tick.
        wait_deadline = time.monotonic() + args.keep_alive_s + 60
        while time.monotonic() < wait_deadline and any(leaks(server, spark, earlier).values()):
            time.sleep(0.2)
        left = leaks(server, spark, earlier)
        after = memory()
        peaks = peak.stop()
        self.proxy.close()
        ok = not self.errors and not hung and not self.c["wrong_rows"] and not any(left.values())
        return {"wall": wall, "hung": hung, "left": left, "before": before, "after": after, "peaks": peaks, "ok": ok}

    def killer(self) -> None:
        body = self._plan("demo", "lineitem", "select * from `demo`.`lineitem`")
        tablets = ",".join(body["partitions"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
        while time.monotonic() < self.deadline:
            proc = subprocess.Popen(
                [sys.executable, "-c", KILLED_CLIENT, "127.0.0.1", str(self.server.be_port), body["opaqued_query_plan"],
                 tablets], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            try:
                line = proc.stdout.readline().strip()
                if not line:
                    self.error("killed client: it did not open a scanner")
            finally:
                proc.kill()
                proc.wait(30)
            self.count(killed_clients=1)
            end = time.monotonic() + self.args.kill_every
            while time.monotonic() < min(end, self.deadline):
                time.sleep(0.1)


def producer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if re.fullmatch(r"scan-[0-9a-f]{8}", t.name)]


def leaks(server, spark, earlier: Collection[threading.Thread] = ()) -> dict:
    """What the run left: the server's contexts, scan producer threads except ``earlier``, and
    Spark stages still running."""
    contexts = len(server.contexts)
    producers = [t for t in producer_threads() if t not in earlier]
    stages = list(spark.sparkContext.statusTracker().getActiveStageIds())
    return {"contexts": contexts, "producers": len(producers), "stages": len(stages)}


def memory() -> dict:
    import pyarrow as pa

    gc.collect()
    me = psutil.Process()
    jvm = jvm_process()
    return {"rss": me.memory_info().rss, "jvm": jvm.memory_info().rss if jvm else 0,
            "arrow": pa.total_allocated_bytes()}

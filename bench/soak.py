"""Soak: a mixed scan workload with faults injected for a bounded time (issue 5; not a test).

Starts an in-process starscan server (FE + BE on 127.0.0.1, local Spark) on a warehouse with
the demo tables, then runs ``--readers`` threads for ``--minutes``. Each reader loops over
scenarios chosen at random:

- ``clean``: a plain read through ``StarscanClient``;
- ``drops``: a read through a TCP proxy that cuts ``--drop-probability`` of the BE's writes
  (``tests/support/proxies.py``; the client reconnects and repeats its offset);
- ``slow``: a read that pauses between batches with a small ``mem_limit`` (production pauses);
- ``abandon``: open, read a few batches, walk away without ``close_scanner`` (the reaper's job).

A separate thread starts a client *process* every ``--kill-every`` seconds that opens a
scanner, reads a batch and is killed with SIGKILL (its socket reset).

Every completed read is compared row by row (as a multiset) with Spark's own rows for the
query; the client also checks the server's end-of-scan row count. At the end the soak waits
for the reaper and reports leaks: contexts left, producer threads left, Spark stages still
active, and RSS / Arrow memory at start and end. Any error, wrong row or leak is printed and
makes the exit status 1.

    python bench/soak.py --minutes 10                     # the issue's 10-minute soak
    python bench/soak.py --minutes 0.1 --no-append        # a few seconds (the test suite's smoke)
"""

from __future__ import annotations

import argparse
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

import common
import psutil
from support.proxies import FaultProxy  # after common: it puts tests/ on the path
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
        common.log(f"ERROR {text}")

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
        peak = common.PeakRSS().start()
        common.log(f"soak: {args.readers} readers for {args.minutes:g} min")
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
    jvm = common.jvm_process()
    return {"rss": me.memory_info().rss, "jvm": jvm.memory_info().rss if jvm else 0,
            "arrow": pa.total_allocated_bytes()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=1.0, help=f"workload duration (at most {MAX_MINUTES:g})")
    ap.add_argument("--readers", type=int, default=16)
    ap.add_argument("--warehouse", default="/tmp/starscan-soak-wh")
    ap.add_argument("--scale", type=float, default=0.005, help="demo.lineitem scale (written when missing)")
    ap.add_argument("--drop-probability", type=float, default=0.05, help="chance the proxy cuts one BE write")
    ap.add_argument("--kill-every", type=float, default=5.0, help="seconds between killed client processes")
    ap.add_argument("--slow-pause-s", type=float, default=0.05, help="longest pause of a slow reader")
    ap.add_argument("--keep-alive-s", type=float, default=3.0, help="keep-alive of contexts (seconds)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--no-append", action="store_true", help="print only; do not touch RESULTS.md")
    args = ap.parse_args(argv)
    if not 0 < args.minutes <= MAX_MINUTES:
        ap.error(f"--minutes must be in (0, {MAX_MINUTES:g}]")

    env = common.environment()
    started = time.perf_counter()
    limits = dict(max_scanners=100_000, max_scanners_per_user=100_000, plan_rate_per_user=0,
                  total_queue_max_bytes=64 << 30, query_port=0)
    from starscan.settings.config import Settings

    overrides = {k: v for k, v in limits.items() if k in Settings.model_fields}
    server, spark, settings = common.start_server(
        args.warehouse, driver_memory=args.driver_memory, scan_context_gc_interval_s=1.0,
        keep_alive_s=args.keep_alive_s, queue_max_bytes=8 << 20, **overrides)
    try:
        if not server.warehouse.databases() or "lineitem" not in server.warehouse.tables("demo"):
            from starscan.app.demo import create_demo

            common.log(f"writing the demo tables at scale {args.scale} into {args.warehouse}")
            create_demo(spark, server.warehouse, args.scale, 256 << 10)
        soak = Soak(args, server, spark)
        soak.oracle()
        server_start_s = time.perf_counter() - started
        tablets = len(server.warehouse.snapshot("demo", "lineitem").tablets)
        lineitem_rows = sum(soak.expected[sql_of(*QUERIES[0])].values())
        result = soak.run()
        wall, hung, left, before, after, peaks = (result[k] for k in ("wall", "hung", "left", "before", "after", "peaks"))
    finally:
        server.stop()
    c = soak.c
    ok = result["ok"]
    header = ["minutes", "readers", "reads checked", "rows checked", "wrong rows", "errors",
              "proxy cuts / client reconnects", "killed clients", "abandoned scanners", "slow reads",
              "contexts left", "producer threads left", "Spark stages left", "hung readers",
              "server RSS start / end / peak", "JVM RSS start / end", "Arrow bytes start / end", "verdict"]
    row = [f"{wall / 60:.1f}", args.readers, f"{c['reads_checked']:,}", f"{c['rows_checked']:,}", c["wrong_rows"],
           len(soak.errors), f"{soak.proxy.cuts} / {c['reconnects']}", c["killed_clients"], c["abandoned"],
           c["reads_slow"], left["contexts"], left["producers"], left["stages"], hung,
           f"{common.gb(before['rss'])} / {common.gb(after['rss'])} / {common.gb(peaks.get('root'))}",
           f"{common.gb(before['jvm'])} / {common.gb(after['jvm'])}",
           f"{before['arrow']:,} / {after['arrow']:,}", "PASS" if ok else "FAIL"]
    conditions = {
        "what": "mixed reads of demo tables, each compared as a multiset with Spark's rows for the query; "
                "faults: a TCP proxy cutting BE writes (the client reconnects and repeats its offset), client "
                "processes killed with SIGKILL after one batch, scanners abandoned without close_scanner, slow "
                "readers with a 2 MiB mem_limit",
        "workload": f"{args.readers} reader threads for {args.minutes:g} min; scenarios clean/drops/slow/abandon "
                    f"weighted {WEIGHTS}; batch sizes {BATCH_SIZES}; a killed client every {args.kill_every:g} s; "
                    f"drop probability {args.drop_probability:g} per BE write; seed {args.seed}",
        "data": f"demo.lineitem {lineitem_rows:,} rows in {tablets} tablets, demo.all_types; {len(QUERIES)} queries",
        "server": f"in-process StarscanServer, SparkSession local[2], spark.driver.memory={args.driver_memory}, "
                  f"queue_max_bytes=8 MiB, keep_alive {args.keep_alive_s:g} s, reaper tick 1 s; "
                  f"start + oracle {server_start_s:.1f} s",
        "leaks": "measured after the workload, once the reaper had keep-alive + 60 s to reclaim abandoned and "
                 "killed clients' contexts; RSS by psutil, Arrow bytes = pyarrow.total_allocated_bytes()",
    }
    if soak.errors:
        conditions["first errors"] = "; ".join(e[:300] for e in soak.errors[:3])
    common.report("soak: faults under a mixed workload (issue 5)", conditions,
                  common.markdown_table(header, [row]), env, not args.no_append)
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

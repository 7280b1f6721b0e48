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
import sys
import time

import common
from support.soak import BATCH_SIZES, MAX_MINUTES, QUERIES, WEIGHTS, Soak, sql_of  # after common: it puts tests/ on the path


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

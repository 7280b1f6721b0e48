"""Per-call latency of `open_scanner` and `get_next` for readers configured like the StarRocks
Flink connector (issue 22; not a test).

The Flink connector uses `scan.connect.timeout-ms` (default 1000) as the connect and read
timeout of its Thrift client and has no Thrift retries: any call slower than about a second
fails the Flink job. Its defaults: batch_size 1000, keep_alive_min 10, query_timeout 600,
mem_limit 1 GiB, SQL ``select * from `db`.`tbl```.

Starts an in-process starscan server on ``demo.lineitem`` at ``--scale`` (written once into
``--warehouse``), warms it with one full scan, then for each reader count runs that many
concurrent full scans, each reader in its own process (as separate Flink subtasks are), and
times every call. Reported: p50 / p99 / max of each call, calls over 1 s, rows/s, first
reply after open, errors.

    python bench/call_latency.py                                   # scale 0.1 and 1; 1, 4 and 8 readers
    python bench/call_latency.py --scales 0.1 --readers 1,4 --no-append

``--shape cluster``: the Flink connector's deployment instead (bench/flink_shape.py): an FE and
two BEs, 40 tablets, jobs of parallelism 8 with a 1 s timeout: cold, warm, first runs of
selective filters, and with the machine loaded; ``--flink-run`` runs the real connector.

    python bench/call_latency.py --shape cluster
    python bench/call_latency.py --shape cluster --flink-run /path/to/flink-read.sh
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import common

DB, TABLE = "demo", "lineitem"
SQL = "select * from `demo`.`lineitem`"
FLINK = {"batch_size": 1000, "keep_alive_min": 10, "query_timeout": 600, "mem_limit": 1 << 30}


def reader(fe: str, timeout_s: float, out) -> None:
    """One Flink-like reader: plan, open, get_next until eos, close; every call timed."""
    from flink_shape import timed_scan

    from starscan.client import StarscanClient, thrift_client
    from starscan.core.thrift_defs import wire

    client = StarscanClient(fe, retries=0, failovers=0)
    result = {"open": [], "next": [], "rows": 0, "error": None, "first_reply_s": None, "wall_s": 0.0}
    started = time.perf_counter()

    def first(_table, seconds: float) -> None:
        if result["first_reply_s"] is None:
            result["first_reply_s"] = seconds

    try:
        body = client.plan(DB, TABLE, SQL)
        tablets = [int(t) for t in body["partitions"]]
        host, port = next(iter(body["partitions"].values()))["routings"][0].split(":")
        conn = thrift_client(host, int(port), timeout_s=timeout_s)
        try:
            opened_s, result["next"], result["rows"] = timed_scan(conn, wire.TScanOpenParams(
                cluster="default_cluster", database=DB, table=TABLE, tablet_ids=tablets,
                opaqued_query_plan=body["opaqued_query_plan"], user="root", passwd="", **FLINK), first)
            result["open"].append(opened_s)
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001 - reported, a timeout included
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    result["wall_s"] = time.perf_counter() - started
    out.put(result)


def run_readers(fe: str, n: int, timeout_s: float) -> list[dict]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=reader, args=(fe, timeout_s, out)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join(60)
    return results


def row_for(scale: float, phase: str, n: int, results: list[dict], timeout_s: float) -> list:
    opens = [x for r in results for x in r["open"]]
    nexts = [x for r in results for x in r["next"]]
    errors = [r["error"] for r in results if r["error"]]
    rows = sum(r["rows"] for r in results)
    wall = max(r["wall_s"] for r in results)
    first = [r["first_reply_s"] for r in results if r["first_reply_s"] is not None]

    def ms(values, q):
        return common.fmt(common.percentile(values, q) * 1000, 0) if values else "–"

    return [
        scale, phase, n, len(nexts),
        f"{ms(opens, 50)} / {ms(opens, 99)} / {ms(opens, 100)}",
        f"{ms(nexts, 50)} / {ms(nexts, 99)} / {ms(nexts, 100)}",
        sum(1 for x in opens + nexts if x > 1.0),
        f"{ms(first, 50)} / {ms(first, 100)}",
        common.fmt(rows / wall / 1e6, 2) if wall else "–",
        f"{len(errors)}" + (f" ({errors[0]})" if errors else ""),
    ]


HEADER = ["scale", "phase", "readers", "get_next calls", "open_scanner ms p50 / p99 / max", "get_next ms p50 / p99 / max",
          "calls > 1 s", "first reply after open ms p50 / max", "M rows/s (aggregate)", "errors"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", default="0.1,1", help="lineitem scales (default 0.1,1)")
    ap.add_argument("--readers", default="1,4,8", help="concurrent readers (default 1,4,8)")
    ap.add_argument("--shape", choices=["single", "cluster"], default="single",
                    help="single: one in-process server, full scans; cluster: the Flink connector's deployment "
                         "(bench/flink_shape.py)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="client socket timeout in s (default 30 for single: latencies are measured, not cut at "
                         "Flink's 1 s; 1 for cluster, the Flink connector's default)")
    ap.add_argument("--cold-starts", type=int, default=1, help="cluster: jobs right after the BEs (re)start (default 1)")
    ap.add_argument("--warm-runs", type=int, default=4, help="cluster: warm full-scan jobs (default 4)")
    ap.add_argument("--loaded-runs", type=int, default=3, help="cluster: jobs with the machine loaded (default 3)")
    ap.add_argument("--load", type=int, default=6, help="cluster: busy processes during the loaded runs (default 6)")
    ap.add_argument("--flink-run", default=None,
                    help="cluster: a script that runs the real StarRocks Flink connector's job (bench/flink_shape.py)")
    ap.add_argument("--master", default=None, help="Spark master (default: starscan's default)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a starscan setting for the server (repeatable), e.g. scan_tasks_per_scanner=1")
    ap.add_argument("--cold-readers", type=int, default=8,
                    help="readers started at once right after the server starts, its warm-up still running "
                         "(0: no cold row; default 8)")
    ap.add_argument("--warehouse", default="/tmp/starscan-bench-latency-wh", help="warehouse dir, reused across runs")
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    args = ap.parse_args(argv)
    if args.shape == "cluster":
        import flink_shape

        args.timeout = args.timeout or 1.0
        env = common.environment()
        table, conditions = flink_shape.run(args)
        title = "call_latency: the Flink connector's shape" + (" (real connector)" if args.flink_run else "")
        table_md = common.markdown_table(flink_shape.HEADER, table) + "\n"
        conditions["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        common.print_section(title, conditions, table_md, env)
        if not args.no_append:
            common.log(f"recorded in {common.write_record(title, conditions, table_md, env, benchmark='flink_shape')}")
        return 0
    args.timeout = args.timeout or 30.0

    from starscan.settings.config import Settings

    master = args.master or Settings.model_fields["spark_master"].default
    env = common.environment()
    rows = []
    for scale in [float(x) for x in args.scales.split(",")]:
        warehouse = Path(args.warehouse) / f"scale-{scale}"
        common.log(f"scale {scale}: starting Spark ({master}) and the server")
        overrides = dict(item.split("=", 1) for item in args.set)
        server, spark, settings = common.start_server(warehouse, master=master, **overrides)
        try:
            from scan_throughput import ensure_lineitem

            ensure_lineitem(spark, server.warehouse, scale, settings.tablet_target_bytes)
            fe = f"127.0.0.1:{server.http_port}"
            if args.cold_readers:
                warming = not server.warmed.is_set()
                common.log(f"scale {scale}: {args.cold_readers} reader(s) at once, cold (warm-up running: {warming})")
                rows.append(row_for(scale, "cold" + (" (warm-up running)" if warming else ""), args.cold_readers,
                                    run_readers(fe, args.cold_readers, args.timeout), args.timeout))
                print(json.dumps(rows[-1]), flush=True)
            server.warmed.wait(600)
            common.log("warm-up: one full scan")
            run_readers(fe, 1, args.timeout)
            for n in [int(x) for x in args.readers.split(",")]:
                common.log(f"scale {scale}: {n} reader(s)")
                rows.append(row_for(scale, "warm", n, run_readers(fe, n, args.timeout), args.timeout))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
            spark.stop()
    conditions = {
        "what": "every open_scanner and get_next call timed in the reader (a separate process per reader, "
                "thriftpy2 client), full scans of demo.lineitem, Flink connector defaults: batch_size 1000, "
                "keep_alive_min 10, query_timeout 600, mem_limit 1 GiB; 'calls > 1 s' would fail a Flink job with "
                "the default scan.connect.timeout-ms",
        "server": f"in-process StarscanServer, Spark master {master}, settings {args.set or 'default'}, defaults otherwise "
                  "(scan_tasks_per_scanner, reply_fill_wait_s, 16 MiB splits); cold: readers started right after "
                  "the server (its background warm-up running, the data already written); warm: after the "
                  "server's warm-up and one full scan",
        "data": f"demo.lineitem written by starscan.app.demo at scales {args.scales} (tablet_target_bytes default)",
    }
    common.report("call_latency: Flink-like readers", conditions, common.markdown_table(HEADER, rows) + "\n", env,
                  append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())

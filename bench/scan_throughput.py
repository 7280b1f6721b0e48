"""Scan throughput through starscan against Spark's own `toArrow()` (issue 3's benchmark; not a test).

Creates (or reuses) ``demo.lineitem`` at ``--scale`` in ``--warehouse``, starts an in-process
starscan server (FE + BE on 127.0.0.1, free ports, local Spark), and measures

- the full scan ``select * from demo.lineitem`` and a 4-column filtered scan, read through the
  protocol (plan over HTTP, open_scanner / get_next... / close_scanner over Thrift) by 1 and
  by 4 concurrent scanners (threads, each doing the whole read; aggregate MB/s);
- in the same run and the same SparkSession, the reference ``spark.read.parquet(path).toArrow()``
  (and the same with the projection and filter), in-process.

Reported: MB/s of Arrow delivered (sum of ``RecordBatch.nbytes`` ÷ wall time), rows/s, time to
first batch (from the plan request), peak RSS of the server's Python process and of Spark's JVM
(psutil, every 50 ms), of the client process, and CPU use. One warm-up run first, reported apart.

    python bench/scan_throughput.py                                   # scale 1, 1 and 4 scanners
    python bench/scan_throughput.py --scale 0.02 --repeats 1 --no-append
    python bench/scan_throughput.py --batch-size 1024,4096,16384,65536 --concurrency 1   # reply sizes
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import common
import psutil

DB, TABLE = "demo", "lineitem"
FULL_SQL = "select * from demo.lineitem"
FILTER_COLUMNS = ["l_orderkey", "l_quantity", "l_extendedprice", "l_shipdate"]
FILTER_SQL = ("select l_orderkey, l_quantity, l_extendedprice, l_shipdate from demo.lineitem "
              "where l_shipdate >= '1995-01-01'")
MARKER = "_bench_lineitem.json"  # in <warehouse>/demo.db: hidden from starscan (leading '_', a file)


# ---- data --------------------------------------------------------------------------------

def ensure_lineitem(spark, warehouse, scale: float, tablet_target_bytes: int) -> tuple[bool, float]:
    """Write demo.lineitem unless the warehouse already has it at this scale and file size."""
    from starscan.app.demo import lineitem_files, write_lineitem

    path = warehouse.table_path(DB, TABLE)
    marker = warehouse.database_path(DB) / MARKER
    layout = {"scale": scale, "tablet_target_bytes": tablet_target_bytes,
              "files": lineitem_files(scale, tablet_target_bytes)}
    if path.is_dir() and marker.exists() and json.loads(marker.read_text()) == layout:
        return False, 0.0
    common.log(f"writing demo.lineitem at scale {scale} ({layout['files']} files) into {path}")
    warehouse.database_path(DB).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_lineitem(spark, str(path), scale, tablet_target_bytes)
    warehouse.invalidate(DB, TABLE)
    marker.write_text(json.dumps(layout))
    return True, time.perf_counter() - t0


def lineitem_in(warehouse_dir: Path, scale: float, tablet_target_bytes: int) -> tuple[int, int]:
    """demo.lineitem at ``scale`` in the warehouse folder (written by a server of this process
    unless it is there): its files and bytes. For the benchmarks that start nodes of their
    own on the same warehouse (scale_out.py, hosts.py)."""
    common.log("making sure demo.lineitem is there")
    server, spark, _ = common.start_server(warehouse_dir)
    try:
        ensure_lineitem(spark, server.warehouse, scale, tablet_target_bytes)
        snap = server.warehouse.snapshot(DB, TABLE)
        return len(snap.files), sum(f.size for f in snap.files)
    finally:
        server.stop()
        spark.stop()


# ---- the client side ---------------------------------------------------------------------

def table_of(sql: str) -> tuple[str, str]:
    """(database, table) of a benchmark's ``select ... from db.table ...``."""
    import re

    found = re.search(r"\bfrom\s+`?(\w+)`?\.`?(\w+)`?", sql, re.IGNORECASE)
    if found is None:
        raise ValueError(f"no db.table in {sql!r}")
    return found.group(1), found.group(2)


def run_scanners(fe: str, sql: str, concurrency: int, batch_size: int, ordered: bool = False) -> dict:
    """``concurrency`` threads, each reading the whole query through the protocol; batches are
    counted and dropped. ``ordered``: as the bundled client reads by default (rows in a fixed
    order, failover on), else as a StarRocks connector does (no order asked, no failover)."""
    from starscan.client import ScanStats, StarscanClient

    barrier = threading.Barrier(concurrency + 1)
    results: list[dict] = [None] * concurrency  # type: ignore[list-item]

    def scanner(i: int) -> None:
        stats = ScanStats()
        no_order = {} if ordered else {"failovers": 0}  # failovers=0: no order asked, a scanner's tasks in parallel
        client = StarscanClient(fe, "root", "", timeout_s=600.0, **no_order)
        barrier.wait()
        t0 = time.perf_counter()
        error = None
        try:
            for _batch in client.batches(*table_of(sql), sql, batch_size, stats=stats):
                pass
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            error = repr(exc)
        results[i] = {"wall_s": time.perf_counter() - t0, "end": time.perf_counter(), "rows": stats.rows,
                      "bytes": stats.bytes, "batches": stats.batches, "first_batch_s": stats.first_batch_s,
                      "error": error}

    threads = [threading.Thread(target=scanner, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    wall = max(r["end"] for r in results) - started
    for r in results:
        r.pop("end")
    times = os.times()
    return {"wall_s": wall, "scanners": results, "client_cpu_s": times.user + times.system,
            "client_max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def scan_in_subprocess(fe: str, sql: str, concurrency: int, batch_size: int, timeout_s: float,
                       sampler: common.PeakRSS, ordered: bool = False) -> dict:
    spec = json.dumps({"fe": fe, "sql": sql, "concurrency": concurrency, "batch_size": batch_size,
                       "ordered": ordered})
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler.label(proc.pid, "client")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"client process timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"client process failed (rc={proc.returncode}): {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def measure_starscan(server, sql: str, concurrency: int, args, batch_size: int, ordered: bool = False) -> dict:
    fe = f"127.0.0.1:{server.http_port}"
    jvm = common.jvm_process()
    me = psutil.Process()
    cpu0 = common.cpu_seconds([me, jvm])
    sampler = common.PeakRSS().start()
    try:
        if args.client_in_process:
            res = run_scanners(fe, sql, concurrency, batch_size, ordered)
            res["client_cpu_s"] = 0.0  # counted with the server process
            res["client_max_rss"] = None
        else:
            res = scan_in_subprocess(fe, sql, concurrency, batch_size, args.timeout, sampler, ordered)
    finally:
        peaks = sampler.stop()
    cpu = common.cpu_seconds([me, jvm]) - cpu0 + res["client_cpu_s"]
    errors = [s["error"] for s in res["scanners"] if s["error"]]
    return {
        "wall_s": res["wall_s"],
        "bytes": sum(s["bytes"] for s in res["scanners"]),
        "rows": sum(s["rows"] for s in res["scanners"]),
        "rows_per_scanner": [s["rows"] for s in res["scanners"]],
        "bytes_per_scanner": [s["bytes"] for s in res["scanners"]],
        "batches": sum(s["batches"] for s in res["scanners"]),
        "first_batch_s": [s["first_batch_s"] for s in res["scanners"] if s["first_batch_s"] is not None],
        "server_rss": peaks.get("root"), "jvm_rss": peaks.get("jvm"),
        "client_rss": peaks.get("client") or res.get("client_max_rss"),
        "cores": cpu / res["wall_s"] if res["wall_s"] > 0 else float("nan"),
        "errors": errors,
    }


def measure_reference(spark, path: str, filtered: bool) -> dict:
    """``spark.read.parquet(path)[.select(4 columns).where(...)].toArrow()`` in this process."""
    from pyspark.sql import functions as F

    jvm = common.jvm_process()
    me = psutil.Process()
    cpu0 = common.cpu_seconds([me, jvm])
    sampler = common.PeakRSS().start()
    try:
        t0 = time.perf_counter()
        df = spark.read.parquet(path)
        if filtered:
            df = df.where(F.col("l_shipdate") >= F.lit("1995-01-01").cast("date")).select(*FILTER_COLUMNS)
        table = df.toArrow()
        wall = time.perf_counter() - t0
        nbytes, rows = table.nbytes, table.num_rows
        del table
    except Exception as exc:  # noqa: BLE001 - toArrow collects the whole result in the driver: it can run out of heap
        text = str(exc)
        reason = "TaskResultLost (driver out of memory)" if "TaskResultLost" in text else text.splitlines()[0][:120]
        return {"errors": [reason]}
    finally:
        peaks = sampler.stop()
    cpu = common.cpu_seconds([me, jvm]) - cpu0
    return {"wall_s": wall, "bytes": nbytes, "rows": rows, "rows_per_scanner": [rows], "bytes_per_scanner": [nbytes],
            "batches": None, "first_batch_s": [], "server_rss": peaks.get("root"), "jvm_rss": peaks.get("jvm"),
            "client_rss": None, "cores": cpu / wall if wall > 0 else float("nan"), "errors": []}


# ---- report ------------------------------------------------------------------------------

def row_for(case: str, reader: str, scanners: int, runs: list[dict], batch_size: int | None = None) -> list:
    ok = [r for r in runs if not r["errors"]]
    errors = sum(len(r["errors"]) for r in runs)
    if not ok:
        first_error = next((e for r in runs for e in r["errors"]), "")
        return [case, reader, batch_size or "–", scanners, f"0 of {len(runs)} ({errors} errors: {first_error})"] + ["–"] * 11
    walls = [r["wall_s"] for r in ok]
    mbs = [r["bytes"] / 1e6 / r["wall_s"] for r in ok]
    rps = [r["rows"] / r["wall_s"] for r in ok]
    first = [x for r in ok for x in r["first_batch_s"]]
    w_min, w_med = common.min_median(walls)
    mb_best, mb_med = common.best_median(mbs)
    _, rps_med = common.best_median(rps)
    f_min, f_med = common.min_median(first)
    rows_each = ok[0]["rows_per_scanner"][0]
    mb_each = ok[0]["bytes_per_scanner"][0] / 1e6
    consistent = all(r["rows_per_scanner"] == [rows_each] * len(r["rows_per_scanner"]) for r in ok)
    runs_text = f"{len(ok)}" + (f" ({errors} errors)" if errors else "") + ("" if consistent else " (row counts differ!)")
    replies = ok[0]["batches"]
    return [
        case, reader, batch_size or "–", scanners, runs_text, f"{rows_each:,}",
        "–" if replies is None else f"{replies // scanners:,}", common.fmt(mb_each),
        f"{common.fmt(w_min, 2)} / {common.fmt(w_med, 2)}",
        f"{common.fmt(mb_best)} / {common.fmt(mb_med)}",
        common.fmt(rps_med / 1e6, 2),
        f"{common.fmt(f_min, 2)} / {common.fmt(f_med, 2)}" if first else "= total",
        common.gb(max((r["server_rss"] or 0) for r in ok)),
        common.gb(max((r["jvm_rss"] or 0) for r in ok)),
        common.gb(max((r["client_rss"] or 0) for r in ok)),
        common.fmt(common.percentile([r["cores"] for r in ok], 50), 2),
    ]


HEADER = ["scan", "reader", "batch_size", "scanners", "runs", "rows per scanner", "get_next replies per scanner",
          "Arrow MB per scanner", "wall s min / median",
          "MB/s best / median (aggregate)", "M rows/s median (aggregate)", "first batch s min / median",
          "server Python peak RSS", "JVM peak RSS", "client peak RSS", "cores median"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale of demo.lineitem (default 1.0: ~6M rows)")
    ap.add_argument("--concurrency", default="1,4", help="comma-separated scanner counts (default 1,4)")
    ap.add_argument("--batch-size", default="4096",
                    help="open_scanner batch_size, comma-separated for several (default 4096); the filtered "
                         "scan uses the first")
    ap.add_argument("--repeats", type=int, default=3, help="measured runs per case (default 3)")
    ap.add_argument("--warehouse", default="/tmp/starscan-bench-wh", help="warehouse dir, reused across runs")
    ap.add_argument("--tablet-target-bytes", type=int, default=32 << 20,
                    help="Parquet bytes per lineitem file when it is written (default 32 MiB, "
                         "= spark.sql.files.maxPartitionBytes)")
    ap.add_argument("--driver-memory", default="2g", help="spark.driver.memory (default 2g, starscan's default)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds at most per measured run (default 1800)")
    ap.add_argument("--client-in-process", action="store_true",
                    help="run the scanner threads in the server's process (default: a separate client process)")
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:  # client process mode
        spec = json.loads(args.worker)
        print(json.dumps(run_scanners(**spec)))
        return 0

    concurrencies = [int(x) for x in args.concurrency.split(",") if x.strip()]
    batch_sizes = [int(x) for x in args.batch_size.split(",") if x.strip()]
    env = common.environment()
    warehouse_dir = Path(args.warehouse).resolve()
    common.log("starting Spark and the server")
    t0 = time.perf_counter()
    server, spark, settings = common.start_server(warehouse_dir, driver_memory=args.driver_memory)
    start_s = time.perf_counter() - t0
    rows = []
    try:
        wrote, write_s = ensure_lineitem(spark, server.warehouse, args.scale, args.tablet_target_bytes)
        path = str(server.warehouse.table_path(DB, TABLE))
        snap = server.warehouse.snapshot(DB, TABLE)
        parquet_bytes = sum(f.size for t in snap.tablets for f in t.files)

        common.log("warm-up: starscan full scan, 1 scanner")
        rows.append(row_for("warm-up: full", "starscan", 1, [measure_starscan(server, FULL_SQL, 1, args, batch_sizes[0])],
                            batch_sizes[0]))
        common.log("warm-up: reference full toArrow")
        rows.append(row_for("warm-up: full", "Spark toArrow (in-process)", 1, [measure_reference(spark, path, False)]))

        for case, sql, filtered in (("full", FULL_SQL, False), ("4 columns + filter", FILTER_SQL, True)):
            for batch_size in (batch_sizes if not filtered else batch_sizes[:1]):
                for c in concurrencies:
                    runs = []
                    for i in range(args.repeats):
                        common.log(f"{case}: starscan, batch_size {batch_size}, {c} scanner(s), run {i + 1}/{args.repeats}")
                        runs.append(measure_starscan(server, sql, c, args, batch_size))
                    rows.append(row_for(case, "starscan", c, runs, batch_size))
            runs = []
            for i in range(args.repeats):
                common.log(f"{case}: reference toArrow, run {i + 1}/{args.repeats}")
                runs.append(measure_reference(spark, path, filtered))
            rows.append(row_for(case, "Spark toArrow (in-process)", 1, runs))
    finally:
        server.stop()
        spark.stop()

    table_md = common.markdown_table(HEADER, rows) + "\n"
    client_where = "threads in the server's process" if args.client_in_process else \
        "threads in a separate client process (starscan.client StarscanClient, batches counted and dropped)"
    conditions = {
        "what": "MB/s = Arrow bytes delivered (sum of RecordBatch.nbytes) ÷ wall time, MB = 10^6 B; "
                "for N scanners the aggregate over all N (each reads the whole result); rows/s likewise; "
                "first batch is measured from the plan request; min / median and best / median over the runs",
        "data": f"demo.lineitem scale {args.scale} written by starscan.app.demo "
                f"({'written in this run, ' + format(write_s, '.1f') + ' s' if wrote else 'reused'}): "
                f"{len(snap.tablets)} Parquet files, {parquet_bytes / 1e6:,.1f} MB; page cache warm after the warm-up",
        "queries": f"full `{FULL_SQL}`; filtered `{FILTER_SQL}`",
        "server": f"in-process StarscanServer, SparkSession {settings.spark_master}, spark.driver.memory={args.driver_memory}, "
                  f"starscan's Spark defaults (maxPartitionBytes 16m, maxRecordsPerBatch 4096, FAIR), "
                  f"queue_max_bytes={settings.queue_max_bytes >> 20} MiB, reply_fill_wait_s={settings.reply_fill_wait_s}; "
                  f"server + Spark start {start_s:.1f} s",
        "client": f"{client_where}; batch_size as in the table",
        "reference": "spark.read.parquet(path)[.where(l_shipdate >= date'1995-01-01').select(4 columns)].toArrow() "
                     "in the server's process and SparkSession (the server idle meanwhile). Its Arrow types differ "
                     "(DATE stays date32; starscan sends DATE as a string per the protocol), so compare rows/s too",
        "runs": f"1 warm-up (starscan full scan, then reference full), then {args.repeats} measured run(s) per row",
        "memory": "peak RSS sampled every 50 ms (psutil): server Python = this process, JVM = its `java` child, "
                  "client = the client process; cores = CPU s of server + JVM + client ÷ wall, of "
                  f"{env.get('nproc')}",
    }
    title = f"scan_throughput: demo.lineitem scale {args.scale}, scanners {args.concurrency}"
    common.report(title, conditions, table_md, env, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`_query_plan` latency on a table of many files (not a test).

Builds ``bench.wide`` with N tiny Parquet files written directly with pyarrow (the server
packs them into tablets: starscan.tables.tablets), makes sure ``demo.lineitem`` exists as a small peer table, starts an in-process starscan
server (FE + BE on 127.0.0.1, free ports, local Spark), then measures over real HTTP:

- the first call after start (Spark reads the table's schema once per table version);
- cold: the table's listing cache is invalidated before each call (``warehouse.invalidate``);
- warm, 1 caller, from this process and from a separate client process;
- warm, C concurrent callers (threads in a separate client process, each with its own
  ``httpx.Client``; a bounded total request count and a time cap);
- after an append: one file more in the table (a partition folder of ``bench.wide_part``), and
  the first call once the listing is over two TTLs old (that caller lists the table), twice.

Target: p99 under 50 ms warm at 50 concurrent callers on the 10,000-file table.

    python bench/plan_latency.py                      # 10,000 files, 2,000 requests, 50 callers
    python bench/plan_latency.py --tablets 500 --requests 200 --no-append
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import common

USER, PASSWORD = "root", ""
WIDE_DB, WIDE_TABLE = "bench", "wide"
PART_TABLE = "wide_part"
WIDE_SQL = "select c_int, c_str, c_date from bench.wide where c_int > 3"
PART_SQL = "select c_int, c_str, c_date from bench.wide_part where p = 7 and c_int > 3"
SMALL_DB, SMALL_TABLE = "demo", "lineitem"
SMALL_SQL = "select l_orderkey, l_shipdate from demo.lineitem where l_quantity > 10"
ROWS_PER_FILE = 10


def auth_header() -> dict[str, str]:
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}", "Content-Type": "application/json; charset=UTF-8"}


# ---- data --------------------------------------------------------------------------------

def _tiny_table(i: int):
    import datetime as dt

    import pyarrow as pa

    base = i * ROWS_PER_FILE
    ids = list(range(base, base + ROWS_PER_FILE))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "c_int": pa.array([x % 10 for x in ids], pa.int32()),
        "c_str": pa.array([f"row-{x}" for x in ids], pa.string()),
        "c_date": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=x % 365) for x in ids], pa.date32()),
    })


TEMPLATES = 1000  # distinct files written by pyarrow; the others are byte copies of them


def write_wide(table_dir: Path, tablets: int, partitions: int = 0) -> None:
    """N files of ~10 rows; with ``partitions`` > 0, spread over Hive folders ``p=0..partitions-1``.
    The first ``TEMPLATES`` files are written by pyarrow, the rest are byte copies of them
    under their own names (a million files written one by one by pyarrow took too long for
    a bench whose subject is planning; a plan reads no footer of a small file)."""
    import io

    import pyarrow.parquet as pq

    marker = table_dir / "_bench_layout.json"
    layout = {"tablets": tablets, "partitions": partitions, "rows_per_file": ROWS_PER_FILE}
    if marker.exists() and json.loads(marker.read_text()) == layout:
        return
    if table_dir.exists():
        import shutil

        shutil.rmtree(table_dir)
    table_dir.mkdir(parents=True)
    started = time.perf_counter()
    templates: list[bytes] = []
    for i in range(tablets):
        if partitions:
            folder = table_dir / f"p={i % partitions}"
            folder.mkdir(exist_ok=True)
        else:
            folder = table_dir
        if i < TEMPLATES:
            buf = io.BytesIO()
            pq.write_table(_tiny_table(i), buf)
            templates.append(buf.getvalue())
        (folder / f"part-{i:05d}.parquet").write_bytes(templates[i % TEMPLATES])
    marker.write_text(json.dumps(layout))  # hidden from starscan and Spark (leading '_')
    common.log(f"wrote {tablets} files into {table_dir} in {time.perf_counter() - started:.1f} s")


def ensure_small_table(spark, warehouse, scale: float) -> None:
    from starscan.app.demo import write_lineitem

    path = warehouse.table_path(SMALL_DB, SMALL_TABLE)
    if path.is_dir() and any(p.suffix == ".parquet" for p in path.iterdir()):
        return
    common.log(f"writing demo.lineitem at scale {scale}")
    warehouse.database_path(SMALL_DB).mkdir(parents=True, exist_ok=True)
    write_lineitem(spark, str(path), scale, 128 << 20)
    warehouse.invalidate(SMALL_DB, SMALL_TABLE)


# ---- load generation ---------------------------------------------------------------------

def url_for(port: int, db: str, table: str) -> str:
    return f"http://127.0.0.1:{port}/api/{db}/{table}/_query_plan"


def one_call(client, url: str, body: bytes) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    r = client.post(url, content=body, headers=auth_header())
    content = r.content  # the whole body is read before the clock stops
    return time.perf_counter() - t0, r.status_code, len(content)


def run_load(url: str, sql: str, concurrency: int, requests: int, time_cap_s: float, think_s: float = 0.0,
             start_at: float | None = None) -> dict:
    """C threads, each with its own httpx.Client, share a budget of ``requests`` calls.

    Closed loop: each caller sends its next request when the previous answer is read (plus
    ``think_s``), so with no think time the latency is about callers / throughput.
    ``start_at`` (``time.time()``): the measured calls start then, so that the callers of
    several client processes start together.
    """
    import httpx

    body = json.dumps({"sql": sql}).encode()
    lock = threading.Lock()
    remaining = [requests]
    latencies: list[float] = []
    errors: list[str] = []
    sizes: list[int] = []
    barrier = threading.Barrier(concurrency + 1)
    go = threading.Event()

    def worker() -> None:
        with httpx.Client(timeout=max(60.0, time_cap_s)) as client:
            try:
                one_call(client, url, body)  # connection set-up, not measured
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                with lock:
                    errors.append(f"warm-up: {exc!r}")
            barrier.wait()
            go.wait()
            deadline = time.perf_counter() + time_cap_s
            while time.perf_counter() < deadline:
                with lock:
                    if remaining[0] <= 0:
                        return
                    remaining[0] -= 1
                try:
                    lat, status, size = one_call(client, url, body)
                except Exception as exc:  # noqa: BLE001
                    with lock:
                        errors.append(repr(exc))
                    continue
                with lock:
                    if status == 200:
                        latencies.append(lat)
                        sizes.append(size)
                    else:
                        errors.append(f"HTTP {status}")
                if think_s > 0:
                    time.sleep(think_s)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    started = time.perf_counter()
    cpu_before = os.times()
    go.set()
    for t in threads:
        t.join(timeout=time_cap_s + 120)
    wall = time.perf_counter() - started
    cpu_after = os.times()
    return {
        "latencies": latencies, "errors": errors[:20], "error_count": len(errors), "wall_s": wall,
        "resp_bytes": (sum(sizes) / len(sizes)) if sizes else 0, "capped": remaining[0] > 0,
        # the measured calls only (not the process's start or the callers' first calls)
        "client_cpu_s": (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system),
    }


START_MARGIN_S = 3.0  # time for every client process to start and make its first calls


def run_load_in_subprocess(url: str, sql: str, concurrency: int, requests: int, time_cap_s: float,
                           think_s: float = 0.0, processes: int = 1) -> dict:
    """The same load from separate Python processes (the callers do not share the server's
    GIL): ``concurrency`` callers and ``requests`` calls spread over ``processes`` client
    processes (each its own interpreter, so the callers do not queue for one GIL either),
    all starting their measured calls at the same moment."""
    processes = max(1, min(processes, concurrency))
    start_at = time.time() + START_MARGIN_S + 0.5 * processes
    procs = []
    for i in range(processes):
        share = concurrency // processes + (1 if i < concurrency % processes else 0)
        calls = requests // processes + (1 if i < requests % processes else 0)
        args = json.dumps({"url": url, "sql": sql, "concurrency": share, "requests": calls,
                           "time_cap_s": time_cap_s, "think_s": think_s, "start_at": start_at})
        procs.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", args],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=time_cap_s + 300)
        if proc.returncode != 0:
            raise RuntimeError(f"client process failed (rc={proc.returncode}): {err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "latencies": [x for r in results for x in r["latencies"]],
        "errors": [e for r in results for e in r["errors"]][:20],
        "error_count": sum(r["error_count"] for r in results),
        "wall_s": max(r["wall_s"] for r in results),
        "resp_bytes": sum(r["resp_bytes"] for r in results) / len(results),
        "capped": any(r["capped"] for r in results),
        "client_cpu_s": sum(r["client_cpu_s"] for r in results),
    }


def sequential(server, db: str, table: str, sql: str, n: int, cold: bool, time_cap_s: float) -> dict:
    import httpx

    url = url_for(server.http_port, db, table)
    body = json.dumps({"sql": sql}).encode()
    latencies, errors, sizes = [], [], []
    started = time.perf_counter()
    with httpx.Client(timeout=120.0) as client:
        one_call(client, url, body)  # connection set-up; also fills the caches once
        started = time.perf_counter()
        for _ in range(n):
            if time.perf_counter() - started > time_cap_s:
                break
            if cold:
                server.warehouse.invalidate(db, table)
            lat, status, size = one_call(client, url, body)
            if status == 200:
                latencies.append(lat)
                sizes.append(size)
            else:
                errors.append(f"HTTP {status}")
    return {"latencies": latencies, "errors": errors, "error_count": len(errors),
            "wall_s": time.perf_counter() - started, "resp_bytes": sum(sizes) / len(sizes) if sizes else 0,
            "capped": len(latencies) + len(errors) < n}


def first_call(server, db: str, table: str, sql: str) -> dict:
    import httpx

    url = url_for(server.http_port, db, table)
    with httpx.Client(timeout=600.0) as client:
        t0 = time.perf_counter()
        r = client.post(url, content=json.dumps({"sql": sql}).encode(), headers=auth_header())
        content = r.content
        lat = time.perf_counter() - t0
    body = json.loads(content) if r.status_code == 200 else {}
    if r.status_code != 200 or body.get("status") != 200:
        raise RuntimeError(f"_query_plan for {db}.{table} failed: HTTP {r.status_code} {r.text[:500]}")
    return {"latencies": [lat], "errors": [], "error_count": 0, "wall_s": lat, "resp_bytes": len(content),
            "capped": False, "tablets_planned": len(body["partitions"])}


# ---- main --------------------------------------------------------------------------------

def measure_table(server, label: str, db: str, table: str, sql: str, args) -> tuple[list, int]:
    """All phases for one table: ([(table label, phase, callers, result)], tablets planned)."""
    out = []
    url = url_for(server.http_port, db, table)
    common.log(f"{label}: first call after start")
    before = common.psutil.Process().memory_info().rss
    with common.PeakRSS(interval_s=0.1) as peaks:
        first = first_call(server, db, table, sql)
        first["rss"] = (before, peaks.peaks.get("root", 0), common.psutil.Process().memory_info().rss)
        out.append((label, "first call after start", 1, first))
        common.log(f"{label}: cold x{args.cold_requests}")
        cold = sequential(server, db, table, sql, args.cold_requests, True, args.time_cap)
    cold["rss"] = (before, peaks.peaks.get("root", 0), common.psutil.Process().memory_info().rss)
    out.append((label, "cold (listing invalidated before each call)", 1, cold))
    common.log(f"{label}: warm sequential x{args.seq_requests}")
    out.append((label, "warm, client in server process", 1,
                sequential(server, db, table, sql, args.seq_requests, False, args.time_cap)))
    out.append((label, "warm, client process", 1,
                with_server_cpu(run_load_in_subprocess, url, sql, 1, args.seq_requests, args.time_cap)))
    for processes in args.client_processes:
        common.log(f"{label}: warm, {args.concurrency} concurrent callers in {processes} client process(es), "
                   f"{args.requests} requests")
        out.append((label, "warm, client process" if processes == 1 else f"warm, {processes} client processes",
                    args.concurrency, with_server_cpu(run_load_in_subprocess, url, sql, args.concurrency, args.requests,
                                                      args.time_cap, args.think_ms / 1000, processes)))
    if table in (WIDE_TABLE, PART_TABLE):
        folder = Path(server.warehouse.table_location(db, table)) / ("p=7" if table == PART_TABLE else "")
        ttl = server.settings.listing_cache_ttl_s
        for n in (1, 2):
            common.log(f"{label}: one file appended ({n}), first call once the listing is over two TTLs old")
            out.append((label, f"append {n}: first call after one file more in {folder.name or 'the table folder'}",
                        1, after_append(server, db, table, sql, folder, ttl, n)))
        for path in folder.glob("part-appended-*.parquet"):
            path.unlink()  # the table as the bench wrote it
    return out, first["tablets_planned"]


def after_append(server, db: str, table: str, sql: str, folder: Path, ttl_s: float, n: int) -> dict:
    """One file more in ``folder`` (a byte copy of one of the table's, as a streaming job's
    append), then, once the listing is more than two TTLs old (so the next caller lists the
    table itself instead of being answered while it is listed behind), one call timed. The
    second append follows the first's listing: a listing reads only the folders that changed
    unless every file is due to be stat-ed again (once per ten times that last took), which
    the first may meet."""
    import shutil

    template = next(folder.glob("part-0*.parquet"))
    shutil.copyfile(template, folder / f"part-appended-{n}.parquet")
    time.sleep(2 * ttl_s + 0.5)
    res = first_call(server, db, table, sql)
    snap = server.warehouse.snapshot(db, table)
    if not any(f.path.endswith(f"part-appended-{n}.parquet") for f in snap.files):
        raise RuntimeError(f"{db}.{table}: the appended file is not in the listing after the call")
    return res


def with_server_cpu(run, *args) -> dict:
    """``run``'s result plus the CPU seconds this process (the server: FE, BE, Spark's
    driver-side Python) spent meanwhile."""
    before = os.times()
    res = run(*args)
    after = os.times()
    res["server_cpu_s"] = (after.user - before.user) + (after.system - before.system)
    return res


def _rss(res: dict) -> str:
    """The server process's resident memory before the table's first call, its peak during
    the first call (and, on the cold row, the cold calls too) and after."""
    if "rss" not in res:
        return ""
    return " / ".join(f"{b / 1e9:.2f}" for b in res["rss"])


def _cpu_per_request(res: dict, n: int) -> str:
    if "server_cpu_s" not in res or "client_cpu_s" not in res or n < 1:
        return "–"
    return f"{res['server_cpu_s'] / n * 1e3:.2f} / {res['client_cpu_s'] / n * 1e3:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tablets", type=int, default=10_000, help="files of bench.wide (default 10000); tablets are what the server makes of them")
    ap.add_argument("--requests", type=int, default=2000, help="total requests of the concurrent phase (default 2000)")
    ap.add_argument("--concurrency", type=int, default=50, help="concurrent callers (default 50)")
    ap.add_argument("--client-processes", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2],
                    help="the concurrent phase once per value: the callers spread over that many client processes "
                         "(default 1,2: in one process the 50 callers also queue for that process's GIL)")
    ap.add_argument("--seq-requests", type=int, default=200, help="requests of each warm sequential phase (default 200)")
    ap.add_argument("--cold-requests", type=int, default=30, help="requests of the cold phase (default 30)")
    ap.add_argument("--think-ms", type=float, default=0.0,
                    help="pause of each concurrent caller between its calls (default 0: back to back)")
    ap.add_argument("--time-cap", type=float, default=120.0, help="seconds at most per phase (default 120)")
    ap.add_argument("--warehouse", default="/tmp/starscan-bench-wh", help="warehouse dir, reused across runs")
    ap.add_argument("--small-scale", type=float, default=0.01, help="scale of demo.lineitem when it must be written")
    ap.add_argument("--partitioned", action="store_true",
                    help="also bench.wide_part: the same files in 100 Hive partitions, query pruned to one")
    ap.add_argument("--listing-ttl", type=float, default=None, help="listing_cache_ttl_s (default: the server's, 5 s)")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--warmup-rows", type=int, default=None,
                    help="warmup_rows of the server (default: the server's, 1,000,000: the BE's warm-up, "
                         "which the first plan stops; 0: none at all)")
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:  # client process mode
        spec = json.loads(args.worker)
        print(json.dumps(run_load(**spec)))
        return 0

    env = common.environment()
    warehouse_dir = Path(args.warehouse).resolve()
    write_wide(warehouse_dir / f"{WIDE_DB}.db" / WIDE_TABLE, args.tablets)
    if args.partitioned:
        write_wide(warehouse_dir / f"{WIDE_DB}.db" / PART_TABLE, args.tablets, partitions=100)

    # All callers are one user: the per-user plan rate cap (plan_rate_per_user, default 50/s)
    # would answer HTTP 429 and measure the limiter, not the planner.
    overrides = {"plan_rate_per_user": 0}
    if args.listing_ttl is not None:
        overrides["listing_cache_ttl_s"] = args.listing_ttl
    if args.warmup_rows is not None:
        overrides["warmup_rows"] = args.warmup_rows
    common.log("starting Spark and the server")
    t0 = time.perf_counter()
    server, spark, settings = common.start_server(warehouse_dir, driver_memory=args.driver_memory, **overrides)
    start_s = time.perf_counter() - t0
    rows = []
    verdict = ""
    try:
        ensure_small_table(spark, server.warehouse, args.small_scale)
        results = []
        tables = [(f"{WIDE_DB}.{WIDE_TABLE}", WIDE_DB, WIDE_TABLE, WIDE_SQL)]
        if args.partitioned:
            tables.append((f"{WIDE_DB}.{PART_TABLE} (pruned to 1 of 100 partitions)", WIDE_DB, PART_TABLE, PART_SQL))
        tables.append((f"{SMALL_DB}.{SMALL_TABLE}", SMALL_DB, SMALL_TABLE, SMALL_SQL))
        for label, db, table, sql in tables:
            measured, planned = measure_table(server, label, db, table, sql, args)
            snap = server.warehouse.snapshot(db, table)  # after: the first call is the table's first listing
            for entry in measured:
                results.append((entry, len(snap.tablets), planned))

        for (label, phase, callers, res), tablets, planned in results:
            s = common.summarize(res["latencies"], res["wall_s"])
            note = " (time cap hit)" if res.get("capped") else ""
            rows.append([label, f"{tablets:,} / {planned:,}", phase + note, callers, s["n"], res["error_count"],
                         common.fmt(s["p50"]), common.fmt(s["p90"]), common.fmt(s["p99"]), common.fmt(s["max"]),
                         common.fmt(s["rps"]) if s["n"] > 1 else "–",
                         common.fmt(res["resp_bytes"] / 1e3, 0), _cpu_per_request(res, s["n"]), _rss(res)])
            if label == f"{WIDE_DB}.{WIDE_TABLE}" and callers == args.concurrency and callers > 1:
                met = s["n"] > 0 and res["error_count"] == 0 and s["p99"] < 50.0
                scope = "" if args.tablets == 10_000 and args.concurrency == 50 else \
                    f" (the target is defined for 10,000 files and 50 callers; this run: {args.tablets:,} files, {args.concurrency} callers)"
                verdict += (f"Target p99 < 50 ms warm at {args.concurrency} concurrent callers on {label} ({phase}): "
                            f"**{'MET' if met else 'NOT MET'}**, p99 = {common.fmt(s['p99'])} ms, "
                            f"{res['error_count']} errors, think time {args.think_ms:g} ms{scope}.\n")
                for err in res["errors"][:5]:
                    verdict += f"  error sample: {err}\n"
    finally:
        server.stop()
        spark.stop()

    header = ["table", "tablets / planned", "phase", "callers", "n", "errors", "p50 ms", "p90 ms", "p99 ms",
              "max ms", "req/s", "response KB", "CPU ms per request: server / client",
              "server RSS GB: before / peak / after"]
    table_md = common.markdown_table(header, rows) + "\n\n" + verdict
    conditions = {
        "what": "`_query_plan` latency over real HTTP to 127.0.0.1 (httpx, keep-alive, Basic auth root:''), "
                "from sending the request until the whole body is read; HTTP 200 only",
        "cpu": "CPU ms per request: the server process's CPU time (FE, BE and Spark's driver-side Python; not the JVM) "
               "and the client process's (the measured calls only) during the phase, divided by its requests; both "
               "share the machine's cores",
        "server": f"in-process StarscanServer (uvicorn FE + thriftpy2 BE), SparkSession {settings.spark_master}, "
                  f"spark.driver.memory={args.driver_memory}, listing_cache_ttl_s={settings.listing_cache_ttl_s}, "
                  f"plan_rate_per_user={settings.plan_rate_per_user:g} (no per-user cap: every caller is root), "
                  f"warmup_rows={settings.warmup_rows:,} (the BE's warm-up, its table written by pyarrow, stops as the first plan begins; 0: none); "
                  f"server + Spark start {start_s:.1f} s",
        "tables": f"bench.wide: {args.tablets:,} Parquet files of {ROWS_PER_FILE} rows (id bigint, c_int int, "
                  f"c_str string, c_date date; {TEMPLATES:,} written by pyarrow, the others byte copies of them), no partitions; demo.lineitem: written by starscan.app.demo (reused if present)",
        "memory": "server RSS: the in-process server's resident memory (FE, BE and Spark's driver-side Python in one "
                  "process; not the JVM), sampled every 100 ms by psutil",
        "queries": f"`{WIDE_SQL}`; `{SMALL_SQL}`" + (f"; `{PART_SQL}`" if args.partitioned else ""),
        "cold": f"{args.cold_requests} sequential calls, `server.warehouse.invalidate(db, table)` before each "
                "(directory listing and plan rebuilt; the schema stays cached per table version)",
        "warm": f"sequential: {args.seq_requests} calls; concurrent: {args.concurrency} threads spread over "
                f"{' and '.join(map(str, args.client_processes))} separate client process(es) (one row each; they start "
                f"their measured calls together), each thread with its own httpx.Client, {args.requests} requests in total, "
                f"time cap {args.time_cap:.0f} s "
                f"per phase; closed loop with think time {args.think_ms:g} ms (with none, latency ≈ callers ÷ req/s: Little's law); "
                "each thread makes one unmeasured call first",
    }
    title = f"plan_latency: {args.tablets:,} files, {args.concurrency} callers"
    common.report(title, conditions, table_md, env, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())

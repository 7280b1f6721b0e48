"""The MySQL port beside a real MariaDB server, on the same rows (issue 68; not a test).

One run, one machine: ``demo.lineitem`` written by ``starscan.app.demo.create_demo`` at
``--scale`` (default 1 = ~6 M rows, the files reused across runs), served by

- **starscan**: in this process, FE (MySQL port, Flight SQL) and BE on local Spark; a plain
  SELECT on the MySQL port is read by the BE's scan core and streamed a batch at a time;
- **MariaDB**: Debian's ``mariadbd`` (``apt-get install mariadb-server``), started by the
  benchmark on 127.0.0.1 with a data folder of its own, the same rows loaded into an InnoDB
  table of the same column types (``LOAD DATA LOCAL INFILE`` of a CSV written from the
  Parquet files), its buffer pool large enough to hold them (warm after the load);

and read by clients that share no code with starscan: **mysqlclient** (``MySQLdb``, the C
client; ``apt-get install libmariadb-dev pkg-config`` then ``pip install mysqlclient``) and
**PyMySQL**, each with an unbuffered cursor (``SSCursor``: rows as they arrive), in a
separate client process per run; and ADBC's Flight SQL driver on starscan's Flight SQL port.

Workloads: the whole table (``SELECT * FROM demo.lineitem``), then two queries the FE answers
on Spark SQL (a GROUP BY, a join) with their time to the first row. Each system and client
gets one warm-up read, then ``--repeats`` timed runs (best and median reported). Memory: the
starscan process's Python RSS and its JVM's before the first timed run, and their peak,
sampled every 50 ms during each read. Recorded in bench/results/ and bench/RESULTS.md (``--no-append``).

    python bench/mysql_port.py                               # SF1
    python bench/mysql_port.py --scale 0.05 --repeats 1 --no-append   # quick check
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import common
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from support.waits import free_port

WHOLE = "SELECT * FROM demo.lineitem"
GROUP_BY = ("SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q, avg(l_extendedprice) AS p "
            "FROM demo.lineitem GROUP BY l_returnflag, l_linestatus")
JOIN = ("SELECT a.l_orderkey, a.l_linenumber, b.q FROM demo.lineitem a JOIN "
        "(SELECT l_orderkey, max(l_quantity) AS q FROM demo.lineitem GROUP BY l_orderkey) b "
        "ON a.l_orderkey = b.l_orderkey")

# A read in a client process of its own: rows counted as they arrive, the time to the first.
_CLIENT = r"""
import json, sys, time
kind, host, port, user, password, sql = sys.argv[1:7]
t0 = time.perf_counter()
first = None
rows = 0
if kind == "adbc":
    import adbc_driver_flightsql.dbapi as flight_sql
    with flight_sql.connect(f"grpc://{host}:{port}", db_kwargs={"username": user, "password": password},
                            autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(sql)
        for batch in cur.fetch_record_batch():
            first = first or time.perf_counter()
            rows += batch.num_rows
else:
    if kind == "mysqlclient":
        import MySQLdb, MySQLdb.cursors
        conn = MySQLdb.connect(host=host, port=int(port), user=user, passwd=password,
                               cursorclass=MySQLdb.cursors.SSCursor)
    else:
        import pymysql, pymysql.cursors
        conn = pymysql.connect(host=host, port=int(port), user=user, password=password,
                               cursorclass=pymysql.cursors.SSCursor, read_timeout=3600)
    cur = conn.cursor()
    cur.execute(sql)
    while True:
        chunk = cur.fetchmany(10000)
        if not chunk:
            break
        first = first or time.perf_counter()
        rows += len(chunk)
    cur.close()
    conn.close()
end = time.perf_counter()
print(json.dumps({"rows": rows, "s": end - t0, "first_s": (first or end) - t0}))
"""

_SQL_TYPES = {"int32": "INT", "int64": "BIGINT", "date32[day]": "DATE", "string": "VARCHAR(255)",
              "large_string": "VARCHAR(255)", "double": "DOUBLE"}


def _mariadb_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_decimal(arrow_type):
        return f"DECIMAL({arrow_type.precision},{arrow_type.scale})"
    return _SQL_TYPES[str(arrow_type)]


class MariaDb:
    """Debian's mariadbd on 127.0.0.1, a data folder of its own, stopped with the benchmark."""

    def __init__(self, root: Path, buffer_pool: str):
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.buffer_pool = buffer_pool

    def start(self) -> MariaDb:
        for tool in ("mariadbd", "mariadb-install-db"):
            if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
                raise SystemExit(f"{tool} not found: apt-get install mariadb-server")
        data = self.root / "data"
        if data.exists():
            shutil.rmtree(data)
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        self.proc = subprocess.Popen(
            [server, "--no-defaults", f"--datadir={data}", "--user=root", "--bind-address=127.0.0.1",
             f"--port={self.port}", f"--socket={self.root / 'mysqld.sock'}", "--local-infile=1",
             f"--innodb-buffer-pool-size={self.buffer_pool}", "--innodb-flush-log-at-trx-commit=2",
             "--skip-log-bin", f"--pid-file={self.root / 'mysqld.pid'}"],
            stdout=open(self.root / "mariadbd.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.connect().close()
                return self
            except Exception:  # noqa: BLE001 - not up yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"mariadbd did not start: see {self.root / 'mariadbd.log'}") from None
                time.sleep(0.3)

    def connect(self, **kw):
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", local_infile=True, **kw)

    def load(self, path: str) -> tuple[int, float]:
        """The Parquet files' rows in demo.lineitem (InnoDB, the same column types)."""
        t0 = time.perf_counter()
        dataset = ds.dataset(path, format="parquet")
        columns = ", ".join(f"`{f.name}` {_mariadb_type(f.type)}" for f in dataset.schema)
        csv_path = self.root / "lineitem.csv"
        with open(csv_path, "w", newline="") as out:
            writer = csv.writer(out)
            for batch in dataset.to_batches():
                arrays = [pc.cast(c, pa.string()) if not pa.types.is_string(c.type) else c for c in batch.columns]
                writer.writerows(zip(*(a.to_pylist() for a in arrays)))
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS demo")
            cur.execute("DROP TABLE IF EXISTS demo.lineitem")
            cur.execute(f"CREATE TABLE demo.lineitem ({columns}) ENGINE=InnoDB")
            cur.execute(f"LOAD DATA LOCAL INFILE '{csv_path}' INTO TABLE demo.lineitem FIELDS TERMINATED BY ',' "
                        "OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\r\\n'")
            conn.commit()
            cur.execute("SELECT count(*) FROM demo.lineitem")
            rows = cur.fetchone()[0]
        csv_path.unlink()
        return rows, time.perf_counter() - t0

    def version(self) -> str:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT version()")
            return str(cur.fetchone()[0])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Memory:
    """Peak RSS of the starscan process and its JVM while a read runs, over their idle RSS."""

    def __init__(self, jvm: psutil.Process | None):
        self.me, self.jvm = psutil.Process(), jvm
        self._stop = threading.Event()
        self.peak = (0, 0)

    def rss(self) -> tuple[int, int]:
        jvm = 0
        if self.jvm is not None:
            try:
                jvm = self.jvm.memory_info().rss
            except psutil.Error:
                pass
        return self.me.memory_info().rss, jvm

    def __enter__(self) -> Memory:
        self.idle = self.rss()
        self.peak = self.idle
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            now = self.rss()
            self.peak = (max(self.peak[0], now[0]), max(self.peak[1], now[1]))

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _memory(runs: list[dict], process: str) -> str:
    """The process's RSS before the first timed run and its peak over the runs."""
    if process not in runs[0]:
        return ""
    return f"{runs[0][process][0]:,.0f} -> {max(r[process][1] for r in runs):,.0f}"


def read(kind: str, port: int, sql: str, timeout_s: float, password: str = "") -> dict:
    out = subprocess.run([sys.executable, "-c", _CLIENT, kind, "127.0.0.1", str(port), "root", password, sql],
                         capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} on port {port} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale of demo.lineitem (default 1: ~6 M rows)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per system, client and query (default 2)")
    ap.add_argument("--clients", default="mysqlclient,pymysql", help="MySQL clients to run (default both)")
    ap.add_argument("--warehouse", default="/tmp/starscan-compare-wh",
                    help="parent of the per-scale warehouses, shared with bench/compare.py")
    ap.add_argument("--tablet-target-bytes", type=int, default=32 << 20)
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--buffer-pool", default="4G", help="MariaDB's innodb_buffer_pool_size (default 4G)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one read may take")
    ap.add_argument("--no-append", action="store_true", help="print only; do not record the run")
    args = ap.parse_args(argv)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if "mysqlclient" in clients:
        try:
            import MySQLdb  # noqa: F401
        except ImportError:
            raise SystemExit("mysqlclient is not installed: apt-get install libmariadb-dev pkg-config; "
                             "pip install mysqlclient (or --clients pymysql)") from None
    env = common.environment()
    warehouse_dir = Path(args.warehouse).resolve() / f"sf{args.scale:g}-{args.tablet_target_bytes}"
    warehouse_dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="starscan-mariadb-"))
    server, spark, _ = common.start_server(warehouse_dir, driver_memory=args.driver_memory, query_port=0,
                                           tablet_target_bytes=args.tablet_target_bytes, warmup_rows=0)
    maria = MariaDb(root, args.buffer_pool)
    rows_out: list[list] = []
    notes: dict[str, str] = {}
    try:
        from starscan.app.demo import create_demo

        create_demo(spark, server.warehouse, args.scale, args.tablet_target_bytes)
        path = str(server.warehouse.table_path("demo", "lineitem"))
        common.log("starting MariaDB and loading the same rows")
        maria.start()
        loaded, load_s = maria.load(path)
        notes["MariaDB"] = f"{maria.version()}, InnoDB, {loaded:,} rows loaded in {load_s:.0f} s, buffer pool {args.buffer_pool}"
        memory = Memory(common.jvm_process())
        systems = [("starscan", server.query_port, c) for c in clients] + [("MariaDB", maria.port, c) for c in clients]
        systems.append(("starscan Flight SQL", server.flight_sql_port, "adbc"))
        results: dict[tuple, list[dict]] = {}
        for sql_name, sql in (("whole table", WHOLE), ("GROUP BY", GROUP_BY), ("join", JOIN)):
            for system, port, client in systems:
                common.log(f"{sql_name}: {system} / {client}: warm-up")
                read(client, port, sql, args.timeout)
                for _ in range(args.repeats):
                    with memory:
                        got = read(client, port, sql, args.timeout)
                    if system.startswith("starscan"):
                        got["python"] = (memory.idle[0] / 1e6, memory.peak[0] / 1e6)
                        got["jvm"] = (memory.idle[1] / 1e6, memory.peak[1] / 1e6)
                    results.setdefault((sql_name, system, client), []).append(got)
                    common.log(f"  {got['rows']:,} rows in {got['s']:.2f} s")
        for (sql_name, system, client), runs in results.items():
            best = min(runs, key=lambda r: r["s"])
            median = sorted(r["s"] for r in runs)[len(runs) // 2]
            peer = results.get((sql_name, "MariaDB", client))
            ratio = ""
            if peer and system != "MariaDB":
                ratio = f"{min(r['s'] for r in peer) / best['s']:.2f}x"
            rows_out.append([sql_name, system, client, f"{best['rows']:,}", common.fmt(best["rows"] / best["s"] / 1e6, 2),
                             common.fmt(best["s"], 2), common.fmt(median, 2), common.fmt(best["first_s"], 2), ratio,
                             _memory(runs, "python"), _memory(runs, "jvm")])
    finally:
        maria.stop()
        server.stop()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    table = common.markdown_table(
        ["query", "system", "client", "rows", "M rows/s (best)", "best s", "median s", "first row s",
         "x MariaDB's rows/s (same client)", "starscan Python RSS before -> peak, MB", "starscan JVM RSS before -> peak, MB"],
        rows_out)
    conditions = {"data": f"demo.lineitem scale {args.scale:g} ({warehouse_dir})", "repeats": args.repeats,
                  "warm-up": "one read per system, client and query before the timed runs", **notes}
    common.report("MySQL port beside MariaDB (issue 68)", conditions, table, env, not args.no_append)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sys.exit(main())

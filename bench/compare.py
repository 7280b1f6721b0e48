"""starscan side by side with Spark Connect, Arrow Flight and plain pyarrow (issue 6; not a test).

One run, one process tree, the same generated data (``demo.lineitem`` written by
``starscan.app.demo.create_demo`` at ``--scale``, default 1 = ~6 M rows):

- **starscan** (in this process: FE over HTTP + BE over Thrift on local Spark), read through the
  protocol by ``starscan.client`` (thriftpy2) and by a client that Debian's Apache Thrift
  compiler generates from ``idl/StarrocksExternalService.thrift`` at run time (the official
  ``thrift`` library, as ``tests/wire/test_wire_official.py``);
- **Spark Connect**: a local Spark Connect server (``spark-submit --class ...SparkConnectServer``
  from pyspark's own jars, child process, 127.0.0.1, the same Spark settings as starscan's
  session) read with ``spark.read.parquet(path)[...].toArrow()``;
- **Arrow Flight**: a ``pyarrow.flight`` server (child process, 127.0.0.1) that reads the same
  Parquet files with ``pyarrow.dataset`` per request (projection and filter pushed down) and streams
  the batches;
- **pyarrow**: the reader process reads the files itself with ``pyarrow.dataset`` (no server).

Workloads: the full scan and a 4-column scan with a selective filter; per system and query the
first run on the freshly started server ("cold", 1 reader), then ``--repeats`` runs ("warm") with
1 and with 4 concurrent readers (``--concurrency``). Readers are threads in a separate client
process (one per run), each reading the whole result; batches are counted and dropped.

Reported: MB/s of Arrow delivered (sum of ``RecordBatch.nbytes`` / wall, aggregate), rows/s, time
to first batch p50 / p95 (from the request; ``toArrow()`` has no first batch: = total), the
server's peak RSS (its processes sampled every 50 ms) and CPU seconds, and the ratios to Spark
Connect and to Flight for the same workload. Appended to ``bench/RESULTS.md`` (``--no-append``).

    python bench/compare.py                              # SF1, 1 and 4 readers, 3 warm repeats
    python bench/compare.py --scale 0.01 --repeats 1 --no-append    # quick check
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import common
import psutil
from support.waits import free_port

from starscan.app.huge_pages import set_transparent_huge_pages

DB, TABLE = "demo", "lineitem"
FILTER_COLUMNS = ["l_orderkey", "l_quantity", "l_extendedprice", "l_shipdate"]
SYSTEMS = ("starscan", "starscan-official-thrift", "starscan-cache", "read-arrow-1", "read-arrow-4", "direct-1",
           "direct-4", "direct-native-1", "flight-sql", "flight-sql-be", "spark-connect", "flight", "pyarrow")
STARSCAN_SYSTEMS = ("starscan", "starscan-official-thrift", "starscan-cache", "read-arrow-1", "read-arrow-4", "direct-1",
                    "direct-4", "direct-native-1", "flight-sql", "flight-sql-be")
LABELS = {
    "starscan": "starscan (thriftpy2 client)",
    "starscan-cache": "starscan, result cache on (thriftpy2 client)",
    "starscan-official-thrift": "starscan (Apache Thrift client)",
    "read-arrow-1": "starscan, starscan.client.connect().read_batches, 1 worker",
    "read-arrow-4": "starscan, starscan.client.connect().read_batches, 4 workers",
    "direct-1": "starscan direct reads (direct=True: the client reads the files), 1 worker",
    "direct-4": "starscan direct reads (direct=True: the client reads the files), 4 workers",
    "direct-native-1": "starscan direct reads, native_types=True (dates as date32, as pyarrow gives them), 1 worker",
    "flight-sql": "starscan over Arrow Flight SQL (ADBC client), the FE relaying the BE's streams (flight_proxy on)",
    "flight-sql-be": "starscan over Arrow Flight SQL (ADBC client), endpoints read from the BE (flight_proxy off)",
    "spark-connect": "Spark Connect toArrow()",
    "flight": "Arrow Flight (pyarrow, Parquet per request)",
    "pyarrow": "pyarrow reads the files (no server)",
}
IDL = common.REPO_DIR / "idl" / "StarrocksExternalService.thrift"


WARM_TABLE = "warm.lineitem"
WARM_SCALE = 0.05  # 300k rows: enough for class loading and JIT, another table than the measured one


def ensure_warm_table(spark, warehouse) -> str:
    """The table every system reads once before its cold run (equal warm-up for all)."""
    from starscan.app.demo import write_lineitem

    path = warehouse.table_path(*WARM_TABLE.split("."))
    if not path.is_dir():
        warehouse.database_path(WARM_TABLE.split(".")[0]).mkdir(parents=True, exist_ok=True)
        write_lineitem(spark, str(path), WARM_SCALE, 32 << 20)
        warehouse.invalidate(*WARM_TABLE.split("."))
    return str(path)


def queries(filter_date: str) -> dict[str, dict]:
    return {
        "full": {"sql": f"select * from {DB}.{TABLE}", "columns": None, "filter_date": None},
        "filter": {"sql": f"select {', '.join(FILTER_COLUMNS)} from {DB}.{TABLE} where l_shipdate >= '{filter_date}'",
                   "columns": FILTER_COLUMNS, "filter_date": filter_date},
    }


# ======================================================================================
# reader process: one run of one system with N concurrent readers
# ======================================================================================

def _read_starscan(spec: dict, stats: dict) -> None:
    from starscan.client import ScanStats, StarscanClient

    s = ScanStats()
    client = StarscanClient(spec["fe"], "root", "", timeout_s=spec["timeout"], failovers=0)  # all of a scanner's tasks
    t0 = time.perf_counter()
    db, table = spec.get("table", f"{DB}.{TABLE}").split(".")
    for _ in client.batches(db, table, spec["sql"], spec["batch_size"], stats=s):
        pass
    stats.update(rows=s.rows, bytes=s.bytes, batches=s.batches, first_batch_s=s.first_batch_s,
                 wall_s=time.perf_counter() - t0)


def _read_arrow(spec: dict, stats: dict) -> None:
    """The public reader: one scanner per tablet (request_tablet_size 1), ``workers`` at once;
    the direct systems read every tablet from its files (``direct=True``)."""
    from starscan.client import connect

    workers = int(spec["system"].rsplit("-", 1)[1])
    conn = connect(spec["fe"], "root", "", max_workers=workers, request_tablet_size=1, batch_size=spec["batch_size"],
                   request_read_timeout_ms=int(spec["timeout"] * 1000), direct=spec["system"].startswith("direct"),
                   native_types="native" in spec["system"])
    table = spec.get("table", f"{DB}.{TABLE}")
    where = f"l_shipdate >= '{spec['filter_date']}'" if spec.get("filter_date") else None
    t0 = time.perf_counter()
    _count(conn.read_batches(table, columns=spec.get("columns"), where=where), stats, t0)


def _read_flight_sql(spec: dict, stats: dict) -> None:
    """ADBC's Flight SQL driver: log in (before the clock, as other clients are made before
    it), execute, read every endpoint's batches (the driver fetches endpoints in parallel)."""
    import adbc_driver_flightsql.dbapi as flight_sql

    with flight_sql.connect(spec["flight_sql"], db_kwargs={"username": "root", "password": ""},
                            autocommit=True) as conn, conn.cursor() as cur:
        t0 = time.perf_counter()
        cur.execute(spec["sql"])
        _count(cur.fetch_record_batch(), stats, t0)


def _count(batches, stats: dict, t0: float) -> None:
    """Count and drop ``batches`` (empty ones skipped) into ``stats``, timed from ``t0``."""
    rows = nbytes = count = 0
    first = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if first is None:
            first = time.perf_counter() - t0
        rows += batch.num_rows
        nbytes += batch.nbytes
        count += 1
    stats.update(rows=rows, bytes=nbytes, batches=count, first_batch_s=first, wall_s=time.perf_counter() - t0)


def _read_official(spec: dict, stats: dict) -> None:
    """Plan over HTTP (httpx), then the generated Apache Thrift client: plain TSocket, buffered,
    binary protocol, as the Java connectors; offsets advanced by the rows received."""
    import httpx
    import pyarrow as pa

    sys.path.insert(0, spec["gen_dir"])
    from starscan_wire import TStarrocksExternalService as service  # noqa: E402
    from starscan_wire import ttypes  # noqa: E402
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    proto_cls = getattr(TBinaryProtocol, "TBinaryProtocolAccelerated", TBinaryProtocol.TBinaryProtocol)
    t0 = time.perf_counter()
    db, table = spec.get("table", f"{DB}.{TABLE}").split(".")
    r = httpx.post(f"http://{spec['fe']}/api/{db}/{table}/_query_plan", json={"sql": spec["sql"]},
                   auth=("root", ""), timeout=spec["timeout"])
    r.raise_for_status()
    plan = r.json()
    groups: dict[str, list[int]] = {}
    for tablet, info in plan["partitions"].items():
        groups.setdefault(info["routings"][0], []).append(int(tablet))
    rows = nbytes = batches = 0
    first = None
    for endpoint, tablets in groups.items():
        host, port = endpoint.rsplit(":", 1)
        sock = TSocket.TSocket(host, int(port))
        sock.setTimeout(int(spec["timeout"] * 1000))
        transport = TTransport.TBufferedTransport(sock)
        client = service.Client(proto_cls(transport, strictRead=False, strictWrite=True))
        transport.open()
        try:
            opened = client.open_scanner(ttypes.TScanOpenParams(
                cluster="default_cluster", database=db, table=table, tablet_ids=tablets,
                opaqued_query_plan=plan["opaqued_query_plan"], batch_size=spec["batch_size"],
                query_timeout=3600, mem_limit=2147483648, user="root", passwd=""))
            if opened.status.status_code != 0:
                raise RuntimeError(f"open_scanner: {opened.status.error_msgs}")
            offset = 0
            try:
                for _ in range(10_000_000):  # bounded: far more calls than any scan here needs
                    res = client.get_next(ttypes.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
                    if res.status.status_code != 0:
                        raise RuntimeError(f"get_next: {res.status.error_msgs}")
                    if res.eos:
                        break
                    for batch in pa.ipc.open_stream(res.rows):
                        if first is None:
                            first = time.perf_counter() - t0
                        offset += batch.num_rows
                        rows += batch.num_rows
                        nbytes += batch.nbytes
                        batches += 1
            finally:
                client.close_scanner(ttypes.TScanCloseParams(context_id=opened.context_id))
        finally:
            transport.close()
    stats.update(rows=rows, bytes=nbytes, batches=batches, first_batch_s=first, wall_s=time.perf_counter() - t0)


def _read_connect(spec: dict, stats: dict, session) -> None:
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    df = session.read.parquet(spec["path"])
    if spec["filter_date"]:
        df = df.where(F.col("l_shipdate") >= F.lit(spec["filter_date"]).cast("date")).select(*spec["columns"])
    table = df.toArrow()
    wall = time.perf_counter() - t0
    stats.update(rows=table.num_rows, bytes=table.nbytes, batches=None, first_batch_s=wall, wall_s=wall)


def _read_flight(spec: dict, stats: dict) -> None:
    import pyarrow.flight as flight

    t0 = time.perf_counter()
    client = flight.connect(f"grpc://127.0.0.1:{spec['flight_port']}")
    ticket = flight.Ticket(json.dumps({"columns": spec["columns"], "filter_date": spec["filter_date"],
                                       "path": spec["path"]}).encode())
    reader = client.do_get(ticket)

    def batches():
        for _ in range(100_000_000):  # bounded
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            if chunk.data is not None:
                yield chunk.data

    try:
        _count(batches(), stats, t0)
    finally:
        client.close()


def _dataset_scanner(path: str, columns, filter_date):
    import pyarrow.dataset as ds

    dataset = ds.dataset(path, format="parquet")
    flt = ds.field("l_shipdate") >= dt.date.fromisoformat(filter_date) if filter_date else None
    return dataset.scanner(columns=columns, filter=flt)


def _read_pyarrow(spec: dict, stats: dict) -> None:
    t0 = time.perf_counter()
    _count(_dataset_scanner(spec["path"], spec["columns"], spec["filter_date"]).to_batches(), stats, t0)


# What a reading program imports at its top, per system: imported before the clock starts
# (a reader's own lazy imports on first use stay in it). starscan.client takes ~0.1 s and
# pyarrow.flight ~0.02 s here, which the runs used to count as scan time.
CLIENT_MODULES = {"starscan": ["starscan.client"], "starscan-cache": ["starscan.client"],
                  "starscan-official-thrift": ["httpx", "thrift.protocol.TBinaryProtocol", "thrift.transport.TSocket"],
                  "read-arrow-1": ["starscan.client"], "read-arrow-4": ["starscan.client"],
                  "direct-1": ["starscan.client"], "direct-4": ["starscan.client"],
                  "direct-native-1": ["starscan.client"], "flight": ["pyarrow.flight"], "pyarrow": ["pyarrow.dataset"],
                  "flight-sql": ["adbc_driver_flightsql.dbapi"], "flight-sql-be": ["adbc_driver_flightsql.dbapi"],
                  "spark-connect": ["pyspark.sql.functions"]}


def run_readers(spec: dict) -> dict:
    """``spec['readers']`` threads, each reading the whole result once."""
    import importlib

    n = spec["readers"]
    system = spec["system"]
    for module in CLIENT_MODULES.get(system, []):
        importlib.import_module(module)
    sessions = [None] * n
    if system == "spark-connect":  # sessions are made before the clock starts
        from pyspark.sql import SparkSession

        sessions = [SparkSession.builder.remote(spec["connect_url"]).create() for _ in range(n)]
    fn = {"starscan": _read_starscan, "starscan-cache": _read_starscan, "starscan-official-thrift": _read_official,
          "read-arrow-1": _read_arrow, "read-arrow-4": _read_arrow, "direct-1": _read_arrow, "direct-4": _read_arrow,
          "direct-native-1": _read_arrow, "flight-sql": _read_flight_sql, "flight-sql-be": _read_flight_sql,
          "flight": _read_flight,
          "pyarrow": _read_pyarrow}.get(system)
    barrier = threading.Barrier(n + 1)
    results: list[dict] = [{} for _ in range(n)]

    def reader(i: int) -> None:
        barrier.wait()
        try:
            if system == "spark-connect":
                _read_connect(spec, results[i], sessions[i])
            else:
                fn(spec, results[i])
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            results[i]["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        results[i]["end"] = time.perf_counter()

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    cpu_started = os.times()
    for t in threads:
        t.join(spec["timeout"])
    wall = max(r.get("end", time.perf_counter()) for r in results) - started
    for r in results:
        r.pop("end", None)
        if "wall_s" not in r and "error" not in r:
            r["error"] = "reader did not finish in time"
    for s in sessions:
        if s is not None:
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                pass
    times = os.times()
    return {"wall_s": wall, "readers": results, "client_cpu_s": times.user + times.system,
            "client_scan_cpu_s": times.user + times.system - cpu_started.user - cpu_started.system}


# ======================================================================================
# Flight server process
# ======================================================================================

def flight_server(spec: dict) -> int:
    import pyarrow.flight as flight

    class ParquetFlight(flight.FlightServerBase):
        def do_get(self, context, ticket):
            req = json.loads(ticket.ticket.decode())
            scanner = _dataset_scanner(req.get("path") or spec["path"], req.get("columns"), req.get("filter_date"))
            return flight.RecordBatchStream(scanner.to_reader())

    server = ParquetFlight("grpc://127.0.0.1:0")
    print(json.dumps({"port": server.port}), flush=True)
    server.serve()
    return 0


# ======================================================================================
# the orchestrating process
# ======================================================================================

def wait_port(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server process exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s")


def start_connect(spark_conf: dict[str, str], driver_memory: str, log_path: Path) -> tuple[subprocess.Popen, int]:
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    port = free_port()
    conf = {
        "spark.master": "local[2]", "spark.driver.memory": driver_memory,
        "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
    }
    for key in ("spark.ui.enabled", "spark.sql.files.maxPartitionBytes", "spark.sql.execution.arrow.maxRecordsPerBatch",
                "spark.sql.session.timeZone", "spark.scheduler.mode"):
        if key in spark_conf:
            conf[key] = spark_conf[key]
    cmd = [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--name", "compare-spark-connect"]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
    logf = open(log_path, "w")  # noqa: SIM115 - closed with the process
    # Through a shim that gives the JVM the machine's transparent huge pages, as the readers
    # (the flag this process's BE set is inherited across exec).
    shim = ("import os, sys; from starscan.app.huge_pages import set_transparent_huge_pages; "
            "set_transparent_huge_pages(True); os.execv(sys.argv[1], sys.argv[1:])")
    proc = subprocess.Popen([sys.executable, "-c", shim, *cmd], stdout=logf, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    wait_port(port, proc, 180)
    return proc, port


def start_flight(path: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--flight-server", json.dumps({"path": path})],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("the Flight server did not start")
    return proc, json.loads(line)["port"]


def gen_official_client(out: Path) -> str | None:
    """Generate the Apache Thrift client; None (with the reason logged) when unavailable."""
    compiler = shutil.which("thrift")
    try:
        import thrift  # noqa: F401
    except ImportError:
        common.log("official Thrift library not installed (pip install thrift): skipping that client")
        return None
    if compiler is None:
        common.log("no `thrift` compiler (apt-get install thrift-compiler): skipping the official client")
        return None
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([compiler, "--gen", "py", "-out", str(out), str(IDL)], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        common.log(f"thrift --gen py failed: {proc.stderr[-500:]}")
        return None
    return str(out)


class ServerMeter:
    """Peak RSS (sum over the server's processes, sampled every 50 ms) and CPU seconds; also
    the peak of each role when ``procs_fn`` gives ``(role, process)`` pairs.

    The sampling thread runs in this process, which is also starscan's server (in-process):
    its own CPU (psutil walks /proc for the JVM's children at every sample: ~7 % of the
    server process's samples in a py-spy profile of a warm full scan) is taken off this
    process's figures, so they are the server's alone."""

    def __init__(self, procs_fn):
        self.procs_fn = procs_fn
        self.peak = 0
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = None
        self._cpu0 = 0.0
        self._own_cpu_s = 0.0  # the sampling thread's, in this process

    def _roles(self):
        out = []
        for p in self.procs_fn():
            role, proc = p if isinstance(p, tuple) else ("server", p)
            if proc is not None:
                out.append((role, proc))
        return out

    def _procs(self):
        return [p for _, p in self._roles()]

    def _sample(self):
        total = 0
        by_role: dict[str, int] = {}
        for role, p in self._roles():
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            total += rss
            by_role[role] = by_role.get(role, 0) + rss
        self.peak = max(self.peak, total)
        for role, rss in by_role.items():
            self.peaks[role] = max(self.peaks.get(role, 0), rss)

    def _loop(self):
        while not self._stop.is_set():
            t = time.thread_time()
            self._sample()
            self._own_cpu_s += time.thread_time() - t
            self._stop.wait(0.05)

    def _cpu_by_pid(self) -> dict[int, tuple[str, float]]:
        out = {}
        for role, p in self._roles():
            try:
                times = p.cpu_times()
            except psutil.Error:
                continue
            out[p.pid] = (role, times.user + times.system)
        return out

    def __enter__(self):
        self._cpu0 = common.cpu_seconds(self._procs())
        self._cpu_start = self._cpu_by_pid()
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self._sample()
        self.cpu_s = common.cpu_seconds(self._procs()) - self._cpu0
        # CPU seconds of the run by role (a process that ended during the run is not counted).
        self.cpu_by_role: dict[str, float] = {}
        for pid, (role, cpu) in self._cpu_by_pid().items():
            start = self._cpu_start.get(pid, (role, 0.0))[1]
            own = self._own_cpu_s if pid == os.getpid() else 0.0
            self.cpu_by_role[role] = self.cpu_by_role.get(role, 0.0) + cpu - start - own
            self.cpu_s -= own


def tree(proc: psutil.Process | None, exclude: set[int] = frozenset()):
    def procs():
        if proc is None:
            return []
        try:
            kids = proc.children(recursive=True)
        except psutil.Error:
            kids = []
        return [proc] + [k for k in kids if k.pid not in exclude]
    return procs


def measure(system: str, spec: dict, meter_fn, timeout_s: float, counters=None) -> dict:
    """One run of ``spec`` in a client process; ``counters()`` (starscan's systems) gives the
    server's read counters, kept as their change over the run."""
    proc = None
    counted = counters() if counters is not None else None
    with ServerMeter(meter_fn) as meter:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        spec_pid = proc.pid
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return {"error": f"client process timed out after {timeout_s:.0f} s", "client_pid": spec_pid}
    if proc.returncode != 0:
        return {"error": f"client process rc={proc.returncode}: {err.strip().splitlines()[-1][:300] if err.strip() else ''}"}
    res = json.loads(out.strip().splitlines()[-1])
    if counted is not None:
        res["server_counters"] = {k: v - counted[k] for k, v in counters().items()}
    res["server_rss"] = meter.peak
    res["rss_by_role"] = meter.peaks
    res["server_cpu_s"] = meter.cpu_s
    res["cpu_by_role"] = meter.cpu_by_role
    errors = [r["error"] for r in res["readers"] if r.get("error")]
    res["error"] = errors[0] if errors else None
    res["errors"] = len(errors)
    return res


def summarize(runs: list[dict]) -> dict | None:
    ok = [r for r in runs if not r.get("error")]
    if not ok:
        return None
    mbs = [sum(x["bytes"] for x in r["readers"]) / 1e6 / r["wall_s"] for r in ok]
    rps = [sum(x["rows"] for x in r["readers"]) / r["wall_s"] for r in ok]
    first = [x["first_batch_s"] for r in ok for x in r["readers"] if x.get("first_batch_s") is not None]
    rows_each = {x["rows"] for r in ok for x in r["readers"]}
    return {
        "runs": len(ok), "failed": len(runs) - len(ok),
        "rows_each": sorted(rows_each), "mb_each": ok[0]["readers"][0]["bytes"] / 1e6,
        "mbs": common.percentile(mbs, 50), "mbs_best": max(mbs), "rps": common.percentile(rps, 50),
        "ttfb50": common.percentile(first, 50), "ttfb95": common.percentile(first, 95),
        "rss": max(r["server_rss"] for r in ok), "cpu_s": common.percentile([r["server_cpu_s"] for r in ok], 50),
        "rss_by_role": {role: max(r.get("rss_by_role", {}).get(role, 0) for r in ok)
                        for role in {k for r in ok for k in r.get("rss_by_role", {})}},
        "wall": common.percentile([r["wall_s"] for r in ok], 50),
        "reads": _reads(ok),
        # CPU ms per million rows delivered, by process, median over the runs
        "cpu_ms_per_m": {role: common.percentile([_per_m_rows(r, r.get("cpu_by_role", {}).get(role, 0.0)) for r in ok], 50)
                         for role in {k for r in ok for k in r.get("cpu_by_role", {})}}
        | {"reader": common.percentile([_per_m_rows(r, r.get("client_scan_cpu_s", 0.0)) for r in ok], 50)},
    }


def _reads(runs: list[dict]) -> dict | None:
    """starscan's reads over ``runs``: the page cache's share of the row groups the BE read
    itself, and the share of the splits the BE read itself (the rest: Spark's tasks)."""
    got = [r["server_counters"] for r in runs if r.get("server_counters")]
    if not got:
        return None
    total = {k: sum(c.get(k, 0) for c in got) for k in ("page_cache_hits", "page_cache_misses", "splits_be", "splits_spark")}
    groups, splits = total["page_cache_hits"] + total["page_cache_misses"], total["splits_be"] + total["splits_spark"]
    return {"page_cache_hit": total["page_cache_hits"] / groups if groups else None,
            "be_splits": total["splits_be"] / splits if splits else None, **total}


def server_counters(server) -> dict:
    """The in-process server's page cache and splits_read counters."""
    registry, cache = server.ops.metrics.registry, server.service.chunk_cache
    splits = {r: registry.get_sample_value("starscan_splits_read_total", {"reader": r}) or 0.0 for r in ("be", "spark")}
    return {"page_cache_hits": cache.hits, "page_cache_misses": cache.misses,
            "splits_be": splits["be"], "splits_spark": splits["spark"]}


def _per_m_rows(run: dict, cpu_s: float) -> float:
    rows = sum(x["rows"] for x in run["readers"])
    return cpu_s * 1e3 / (rows / 1e6) if rows else 0.0


def _own_slots(settings) -> str:
    slots = settings.scan_local_read_slots
    return f"{os.cpu_count()} (the default: the machine's cores)" if slots is None else str(slots)


#: The modules each system's reader or server needs beyond the server's own (the bench extra).
_SYSTEM_MODULES = {
    "spark-connect": ("grpc_status", "pyspark.sql.connect"),
    "flight-sql": ("adbc_driver_flightsql",), "flight-sql-be": ("adbc_driver_flightsql",),
    "starscan-official-thrift": ("thrift",),
}


def _needs(systems: list[str]) -> list[str]:
    return sorted({m for s in systems for m in _SYSTEM_MODULES.get(s, ())})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale of demo.lineitem (default 1.0: ~6 M rows)")
    ap.add_argument("--repeats", type=int, default=3, help="warm runs per system, query and reader count (default 3: pyarrow's own scan is bimodal here, and two runs move the ratios to it by about 30 %%)")
    ap.add_argument("--concurrency", default="1,4", help="reader counts for the warm runs (default 1,4)")
    ap.add_argument("--cold-concurrency", default="1,4",
                    help="reader counts for the cold runs, each after the BE's page cache is emptied (default 1,4)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--batch-size", type=int, default=4096, help="open_scanner batch_size (default 4096)")
    ap.add_argument("--filter-date", default="1998-01-01",
                    help="the filtered scan keeps l_shipdate >= this (default 1998-01-01: about 12 %% of the rows)")
    ap.add_argument("--warehouse", default="/tmp/starscan-compare-wh",
                    help="parent of the per-scale warehouses, reused across runs (default /tmp/starscan-compare-wh)")
    ap.add_argument("--tablet-target-bytes", type=int, default=32 << 20,
                    help="Parquet bytes per lineitem file when the data is written (default 32 MiB)")
    ap.add_argument("--driver-memory", default="2g", help="spark.driver.memory of starscan and of Spark Connect (2g)")
    ap.add_argument("--cache-bytes", type=int, default=2 << 30,
                    help="result_cache_max_bytes (and per-entry cap) while starscan-cache runs (default 2 GiB: an "
                         "SF1 full result is ~1.2 GB of IPC)")
    ap.add_argument("--tasks-per-scanner", type=int, default=None,
                    help="scan_tasks_per_scanner of the starscan server (default: starscan's default)")
    ap.add_argument("--local-read-slots", type=int, default=None,
                    help="scan_local_read_slots of the starscan server (default: starscan's default, the machine's "
                         "cores; 0: every split read by a Spark task, as before issue 39)")
    ap.add_argument("--page-cache-bytes", type=int, default=None,
                    help="starscan's page_cache_max_bytes (default: the server's, a fifth of the memory; 0: off)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds at most per measured run (default 900)")
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--flight-server", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker or args.flight_server:
        # The BE in this bench's process turns transparent huge pages off for itself, and
        # children inherit the flag: the readers and the peers run as the machine has them.
        set_transparent_huge_pages(True)
    if args.worker:
        print(json.dumps(run_readers(json.loads(args.worker))))
        return 0
    if args.flight_server:
        return flight_server(json.loads(args.flight_server))

    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems: {sorted(unknown)}")
    concurrency = [int(x) for x in args.concurrency.split(",") if x.strip()]
    cold_concurrency = [int(x) for x in args.cold_concurrency.split(",") if x.strip()] or [1]
    missing = common.missing_modules(_needs(systems))
    if missing:
        ap.error(f"the systems asked for need {', '.join(missing)}, which this Python does not have: "
                 "install the benchmarks' extra (pip install -e '.[bench]', or .venv/bin/pip install -e '.[bench]' "
                 "after ./quickstart.sh test), or leave those systems out with --systems")
    qs = queries(args.filter_date)
    env = common.environment()
    tmp = Path(tempfile.mkdtemp(prefix="starscan-compare-"))
    warehouse_dir = Path(args.warehouse).resolve() / f"sf{args.scale:g}-{args.tablet_target_bytes}"
    warehouse_dir.mkdir(parents=True, exist_ok=True)

    common.log(f"starting starscan (warehouse {warehouse_dir})")
    t0 = time.perf_counter()
    # No start-up warm-up: every system gets the same one before its cold run (below).
    extra = {} if args.tasks_per_scanner is None else {"scan_tasks_per_scanner": args.tasks_per_scanner}
    if args.local_read_slots is not None:
        extra["scan_local_read_slots"] = args.local_read_slots
    if args.page_cache_bytes is not None:
        extra["page_cache_max_bytes"] = args.page_cache_bytes
    server, spark, settings = common.start_server(warehouse_dir, driver_memory=args.driver_memory,
                                                  tablet_target_bytes=args.tablet_target_bytes, warmup_rows=0, **extra)
    page_cache_bytes = server.service.chunk_cache.max_bytes
    start_s = time.perf_counter() - t0
    if any(s.startswith("direct") for s in systems):
        server.users.grant("root", "direct_read:*.*")  # the direct systems' plans (off by default)
    me = psutil.Process()
    starscan_jvm = common.jvm_process()
    extra_procs: list[subprocess.Popen] = []
    results: dict[tuple, list[dict]] = {}
    notes = {}
    loads: list[str] = []
    try:
        from starscan.app.demo import create_demo

        t0 = time.perf_counter()
        created = create_demo(spark, server.warehouse, args.scale, args.tablet_target_bytes)
        write_s = time.perf_counter() - t0
        path = str(server.warehouse.table_path(DB, TABLE))
        warm_path = ensure_warm_table(spark, server.warehouse)
        snap = server.warehouse.snapshot(DB, TABLE)
        parquet_bytes = sum(f.size for t in snap.tablets for f in t.files)
        notes["data"] = (f"demo.lineitem scale {args.scale:g} by starscan.app.demo.create_demo "
                         f"({'written in this run, ' + format(write_s, '.1f') + ' s' if created else 'reused'}): "
                         f"{len(snap.tablets)} Parquet files, {parquet_bytes / 1e6:,.1f} MB; page cache warm "
                         "(the files were just written or read)")
        spark_conf = dict(spark.sparkContext.getConf().getAll())

        fe = f"127.0.0.1:{server.http_port}"
        base = {"fe": fe, "path": path, "batch_size": args.batch_size, "timeout": args.timeout,
                "flight_sql": f"grpc://127.0.0.1:{server.flight_sql_port}"}
        gen_dir = gen_official_client(tmp / "gen") if "starscan-official-thrift" in systems else None
        if "starscan-official-thrift" in systems and gen_dir is None:
            systems.remove("starscan-official-thrift")

        for system in systems:
            loads.append(f"{system} {os.getloadavg()[0]:.2f}")
            cache = server.service.result_cache
            cache.configure(args.cache_bytes if system == "starscan-cache" else 0, args.cache_bytes, ["*.*"])
            server.live_settings.bound(flight_proxy=system != "flight-sql-be")
            counters = None
            if system in STARSCAN_SYSTEMS:
                # Each starscan system's cold run finds the page cache as a new server has it
                # (empty), not filled by the system before it.
                server.service.chunk_cache.clear()
                counters = functools.partial(server_counters, server)
                def meter_fn():  # this process, its JVM, and Spark's Python workers under the JVM
                    try:
                        workers = starscan_jvm.children(recursive=True) if starscan_jvm else []
                    except psutil.Error:
                        workers = []
                    return [("python", me), ("jvm", starscan_jvm)] + [("workers", w) for w in workers]
                spec0 = dict(base, gen_dir=gen_dir)
                # starscan-cache: the cold run is the Spark scan that fills the cache, warm runs are hits.
                # A fresh server is cold only for the first reader; the official client runs second.
            elif system == "spark-connect":
                common.log("starting the Spark Connect server")
                t1 = time.perf_counter()
                proc, port = start_connect(spark_conf, args.driver_memory, tmp / "connect.log")
                extra_procs.append(proc)
                notes["spark connect start"] = f"{time.perf_counter() - t1:.1f} s"
                meter_fn = tree(psutil.Process(proc.pid))
                spec0 = dict(base, connect_url=f"sc://127.0.0.1:{port}")
            elif system == "flight":
                proc, port = start_flight(path)
                extra_procs.append(proc)
                meter_fn = tree(psutil.Process(proc.pid))
                spec0 = dict(base, flight_port=port)
            else:
                meter_fn = lambda: []  # noqa: E731 - no server
                spec0 = dict(base)
            common.log(f"{system}: warm-up, a full scan of {WARM_TABLE}")
            warm_spec = dict(spec0, system=system, sql=f"select * from {WARM_TABLE}", columns=None, filter_date=None,
                             path=warm_path, table=WARM_TABLE, readers=1)
            warmups = notes.setdefault("warm-up", {})
            warmups[system] = f"{measure(system, warm_spec, meter_fn, args.timeout).get('wall_s', float('nan')):.1f} s"
            for qname, q in qs.items():
                spec = dict(spec0, system=system, sql=q["sql"], columns=q["columns"], filter_date=q["filter_date"])
                for n in cold_concurrency:
                    if system in STARSCAN_SYSTEMS:
                        server.service.chunk_cache.clear()  # every cold run: the BE's page cache as a new server has it
                    common.log(f"{system}: {qname}, cold, {n} reader(s)")
                    results[(system, qname, "cold", n)] = [measure(system, dict(spec, readers=n), meter_fn,
                                                                   args.timeout, counters)]
                for n in concurrency:
                    runs = []
                    for i in range(args.repeats):
                        common.log(f"{system}: {qname}, warm, {n} reader(s), run {i + 1}/{args.repeats}")
                        runs.append(measure(system, dict(spec, readers=n), meter_fn, args.timeout, counters))
                    results[(system, qname, "warm", n)] = runs
                for key in [k for k in results if k[0] == system and k[1] == qname]:
                    for r in results[key]:
                        if r.get("error"):
                            common.log(f"  {key}: {r['error']}")
            if system == "spark-connect" and extra_procs:
                _stop(extra_procs.pop())
    finally:
        for proc in extra_procs:
            _stop(proc)
        server.stop()
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    table_md, targets = render(results, systems, qs, concurrency, cold_concurrency, page_cache_bytes)
    conditions = {
        "what": "MB/s = Arrow bytes delivered (sum of RecordBatch.nbytes) ÷ wall time, MB = 10^6 B, aggregate over "
                "the readers (each reads the whole result); rows/s likewise; first batch from the request (plan "
                "included for starscan; toArrow() has none: = its total); server RSS = peak of the sum over the "
                "server's processes (starscan: this Python process + its JVM; Connect: the spark-submit tree; Flight: "
                "its process), sampled every 50 ms; CPU s = the server's CPU seconds in the run (median; "
                "starscan's without the bench's sampling thread, which runs in its process); "
                "ratios = MB/s (rows/s) ÷ the same workload's Spark Connect or Flight MB/s (rows/s)",
        "data": notes.get("data", ""),
        "queries": f"full `{qs['full']['sql']}`; filter `{qs['filter']['sql']}` (same projection/filter for "
                   "Connect, Flight and pyarrow)",
        "types": "starscan sends DATE as text (docs/protocol.md 5.2), the others keep date32: the same rows are more "
                 "MB for starscan; compare rows/s too",
        "starscan": f"in-process StarscanServer, SparkSession {settings.spark_master}, spark.driver.memory="
                    f"{args.driver_memory}, starscan's Spark defaults, queue_max_bytes={settings.queue_max_bytes >> 20} "
                    f"MiB, scan_tasks_per_scanner={settings.scan_tasks_per_scanner}, scan_local_read_slots="
                    f"{_own_slots(settings)}, page_cache_max_bytes={settings.page_cache_bytes / 1e9:.2f} GB"
                    f"{' (the default: a fifth of the memory)' if args.page_cache_bytes is None else ''}: the BE "
                    "keeps the decoded column chunks its own readers read, so warm runs do not decode (the cold run "
                    "fills it; 0: off), per-user limits at their defaults; "
                    f"batch_size {args.batch_size}; start {start_s:.1f} s; thriftpy2 client with failovers=0 (a "
                    "scanner's tasks in parallel); read-arrow: starscan.client.connect defaults (ordered scanners, "
                    "one per tablet) with request_tablet_size=1; "
                    "official client: `thrift --gen py` from idl/StarrocksExternalService.thrift, TSocket + "
                    "TBufferedTransport + TBinaryProtocolAccelerated",
        "spark connect": f"spark-submit SparkConnectServer, local[2], spark.driver.memory={args.driver_memory}, "
                         "the same maxPartitionBytes / maxRecordsPerBatch / time zone as starscan's session, "
                         f"127.0.0.1; started in {notes.get('spark connect start', '–')}; a new session per reader",
        "starscan-cache": f"the same server with result_cache_max_bytes={args.cache_bytes} (and that per-entry cap) "
                          "for these runs only (0 for the others): the cold run fills the cache, the warm runs are "
                          "answered from it without Spark",
        "flight": "pyarrow.flight server (one process), each do_get scans the Parquet with pyarrow.dataset "
                  "(projection + filter pushed down) and streams the batches",
        "runs": f"every system first reads {WARM_TABLE} (lineitem at scale {WARM_SCALE}, another table) once: the "
                f"same warm-up for all, starscan's own start-up warm-up off (warmup_rows=0); cold = the first run of "
                f"the query after that (1 reader; for the official client, after the thriftpy2 client's runs); "
                f"warm = {args.repeats} run(s) per reader count, median; the BE's page cache is emptied before each "
                "starscan system, so that system's cold run decodes the files as a new server's does",
        "client": "readers are threads in a separate client process (one per run), each system's client library "
                  "imported before the clock starts; batches counted and dropped",
        "warm-up wall": "; ".join(f"{k} {v}" for k, v in notes.get("warm-up", {}).items()),
    }
    conditions["1-min load average when each system started"] = "; ".join(loads)
    title = f"compare: starscan vs Spark Connect vs Flight, lineitem scale {args.scale:g}"
    common.report(title, conditions, table_md + "\n" + targets, env, append=not args.no_append)
    return 0


def _stop(proc: subprocess.Popen) -> None:
    try:
        parent = psutil.Process(proc.pid)
        kids = parent.children(recursive=True)
    except psutil.Error:
        kids = []
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    for k in kids:
        try:
            k.kill()
        except psutil.Error:
            pass


HEADER = ["system", "scan", "phase", "readers", "runs", "rows per reader", "Arrow MB per reader",
          "MB/s median (best)", "M rows/s", "first batch p50 / p95 s", "server peak RSS", "server CPU s",
          "× Connect MB/s (rows/s)", "× Flight MB/s (rows/s)"]


def _ratio(a: dict | None, b: dict | None) -> str:
    if not a or not b or not b["mbs"] or not b["rps"]:
        return "–"
    return f"{a['mbs'] / b['mbs']:.2f} ({a['rps'] / b['rps']:.2f})"


def render(results: dict, systems: list[str], qs: dict, concurrency: list[int],
           cold_concurrency: list[int] = [1], page_cache_bytes: int | None = None) -> tuple[str, str]:  # noqa: B006
    rows = []
    summ = {k: summarize(v) for k, v in results.items()}
    for qname in qs:
        for phase, ns in (("cold", cold_concurrency), ("warm", concurrency)):
            for n in ns:
                for system in systems:
                    key = (system, qname, phase, n)
                    if key not in results:
                        continue
                    s = summ[key]
                    if s is None:
                        err = results[key][0].get("error", "?")
                        rows.append([LABELS[system], qname, phase, n, f"0 of {len(results[key])}: {err}"] + ["–"] * 9)
                        continue
                    con = summ.get(("spark-connect", qname, phase, n))
                    fl = summ.get(("flight", qname, phase, n))
                    rows.append([
                        LABELS[system], qname, phase, n,
                        f"{s['runs']}" + (f" ({s['failed']} failed)" if s["failed"] else ""),
                        " / ".join(f"{r:,}" for r in s["rows_each"]) + (" (differ!)" if len(s["rows_each"]) > 1 else ""),
                        common.fmt(s["mb_each"]), f"{common.fmt(s['mbs'])} ({common.fmt(s['mbs_best'])})",
                        common.fmt(s["rps"] / 1e6, 2),
                        f"{common.fmt(s['ttfb50'], 2)} / {common.fmt(s['ttfb95'], 2)}"
                        + (" (= total)" if system == "spark-connect" else ""),
                        common.gb(s["rss"]) if s["rss"] else "– (none)", common.fmt(s["cpu_s"]),
                        _ratio(s, con) if system != "spark-connect" else "1.00",
                        _ratio(s, fl) if system != "flight" else "1.00",
                    ])
    # Targets (issue 15), from this run: rows/s, because the wire types are larger.
    g = lambda *k: summ.get(k)  # noqa: E731
    lines = ["", "**Targets (issue 15), from this run (rows/s)**", ""]

    def verdict(ok: bool | None) -> str:
        return "–" if ok is None else ("**MET**" if ok else "**NOT MET**")

    def times(a, b) -> float | None:
        return a["rps"] / b["rps"] if a and b and b["rps"] else None

    def fx(x) -> str:
        return "–" if x is None else f"{x:.2f}×"

    w, fl = g("starscan", "full", "warm", 1), g("flight", "full", "warm", 1)
    r = times(w, fl)
    lines.append(f"- warm full scan, 1 reader, ≥ 0.6× Flight: {verdict(r >= 0.6 if r else None)}, {fx(r)} "
                 f"({common.fmt(w and w['rps'] / 1e6, 2)} vs {common.fmt(fl and fl['rps'] / 1e6, 2)} M rows/s)")
    ss, con = g("starscan", "full", "cold", 1), g("spark-connect", "full", "cold", 1)
    r = times(ss, con)
    lines.append(f"- cold full scan (after the same warm-up for every system) ≥ 3× Spark Connect: "
                 f"{verdict(r >= 3 if r else None)}, {fx(r)} ({common.fmt(ss and ss['rps'] / 1e6, 2)} vs "
                 f"{common.fmt(con and con['rps'] / 1e6, 2)} M rows/s)")
    if len(concurrency) > 1:
        hi = max(concurrency)
        w4 = g("starscan", "full", "warm", hi)
        r4 = times(w4, w)
        lines.append(f"- {hi} concurrent readers ≥ 1.5× one (aggregate, full scan): {verdict(r4 >= 1.5 if r4 else None)}, "
                     f"{fx(r4)}")
    d, pa_ = g("direct-1", "full", "warm", 1), g("pyarrow", "full", "warm", 1)
    r = times(d, pa_)
    lines.append(f"- (issue 20) direct reads, warm full scan, 1 reader, ≥ 0.9× pyarrow reading the files: "
                 f"{verdict(r >= 0.9 if r else None)}, {fx(r)} ({common.fmt(d and d['rps'] / 1e6, 2)} vs "
                 f"{common.fmt(pa_ and pa_['rps'] / 1e6, 2)} M rows/s; Flight {fx(times(d, fl))}; with native_types "
                 f"{fx(times(g('direct-native-1', 'full', 'warm', 1), pa_))})")
    if w and w.get("cpu_ms_per_m"):
        cpu = w["cpu_ms_per_m"]
        lines.append("- CPU per million rows, warm full scan, 1 reader (median run; the reader's process from the "
                     "start of the scan): " + ", ".join(f"{role} {cpu[role]:.0f} ms" for role in
                                                      ("python", "jvm", "workers", "reader") if role in cpu)
                     + f"; sum {sum(cpu.values()):.0f} ms")
        if fl and fl.get("cpu_ms_per_m"):  # the peer on the same rows: its server and its reader's process
            peer = fl["cpu_ms_per_m"]
            lines.append("- the same for Arrow Flight: " + ", ".join(f"{role} {ms:.0f} ms" for role, ms in sorted(peer.items()))
                         + f"; sum {sum(peer.values()):.0f} ms")
    f = g("starscan", "filter", "warm", 1)
    lines.append(f"- filtered scan, first batch p50 < 0.3 s: {verdict(f['ttfb50'] < 0.3 if f else None)}, "
                 f"p50 {common.fmt(f and f['ttfb50'], 2)} s, p95 {common.fmt(f and f['ttfb95'], 2)} s (warm, 1 reader)")
    roles: dict[str, int] = {}
    for k, v in summ.items():
        if v and k[0] == "starscan":
            for role, rss in v.get("rss_by_role", {}).items():
                roles[role] = max(roles.get(role, 0), rss)
    jvm, py = roles.get("jvm"), roles.get("python")
    ok = (jvm <= 1.5e9 and py <= 300e6) if jvm and py else None
    lines.append(f"- memory, JVM ≤ 1.5 GB and Python ≤ 300 MB: {verdict(ok)}, peak RSS JVM {common.gb(jvm)}, "
                 f"server Python {common.gb(py)}, Spark's Python workers together {common.gb(roles.get('workers'))}; "
                 "compare with a run at another --scale for the 10× table-growth target")
    lines += _targets_of_issues_57_and_58(g, fx, verdict)
    lines += _targets_of_issue_69(g, fx, verdict, summ, page_cache_bytes)
    reads = _reads_table(summ, systems, qs, concurrency, cold_concurrency)
    return common.markdown_table(HEADER, rows) + "\n" + reads, "\n".join(lines) + "\n"


def _reads_table(summ: dict, systems: list[str], qs: dict, concurrency: list[int],
                 cold_concurrency: list[int]) -> str:
    """Where starscan's rows were read, per run kind: the splits the BE read in its own
    process (the rest by Spark's tasks) and the page cache's share of the row groups it read."""
    rows = []
    for qname in qs:
        for phase, ns in (("cold", cold_concurrency), ("warm", concurrency)):
            for n in ns:
                for system in systems:
                    s = summ.get((system, qname, phase, n))
                    reads = s and s.get("reads")
                    if not reads:
                        continue
                    pct = lambda x: "–" if x is None else f"{100 * x:.0f} %"  # noqa: E731
                    rows.append([LABELS[system], qname, phase, n,
                                 f"{pct(reads['be_splits'])} ({reads['splits_be']:.0f} of "
                                 f"{reads['splits_be'] + reads['splits_spark']:.0f})",
                                 f"{pct(reads['page_cache_hit'])} ({reads['page_cache_hits']:,} of "
                                 f"{reads['page_cache_hits'] + reads['page_cache_misses']:,})"])
    if not rows:
        return ""
    return ("\n**Where starscan read the rows** (all runs of the kind together; the page cache serves the BE's own "
            "reads only)\n\n" + common.markdown_table(
                ["system", "scan", "phase", "readers", "splits read by the BE itself", "row groups from the page cache"],
                rows) + "\n")


def _targets_of_issues_57_and_58(g, fx, verdict) -> list[str]:
    """Issue 58 (the Thrift path against pyarrow's Flight server on every host kind) and
    issue 57 (Flight SQL against pyarrow reading the files and its Flight server)."""
    def ratio(a, b):
        return a["rps"] / b["rps"] if a and b and b["rps"] else None

    def cpu_sum(s):
        return sum(s["cpu_ms_per_m"].values()) if s and s.get("cpu_ms_per_m") else None

    def line(label: str, a, b, bound: float) -> str:
        r = ratio(a, b)
        return (f"- {label} ≥ {bound:.1f}×: {verdict(r >= bound if r else None)}, {fx(r)} "
                f"({common.fmt(a and a['rps'] / 1e6, 2)} vs {common.fmt(b and b['rps'] / 1e6, 2)} M rows/s)")

    def cpu_line(label: str, a, peer) -> str:
        mine, theirs = cpu_sum(a), cpu_sum(peer)
        ok = mine < theirs if mine is not None and theirs is not None else None
        return (f"- {label}, CPU per million rows (server + reader) below the Flight server's: {verdict(ok)}, "
                f"{common.fmt(mine, 0)} ms against {common.fmt(theirs, 0)} ms")

    lines = ["", "**Targets of issue 58 (the Thrift path, 1 reader, against the pyarrow Flight server)**", ""]
    for phase, query, bound in (("warm", "full", 1.0), ("cold", "full", 0.8), ("warm", "filter", 0.8)):
        lines.append(line(f"{phase} {query} scan", g("starscan", query, phase, 1), g("flight", query, phase, 1), bound))
    lines.append(cpu_line("warm full scan", g("starscan", "full", "warm", 1), g("flight", "full", "warm", 1)))
    lines += ["", "**Targets of issue 57 (Flight SQL over ADBC, 1 reader)**", ""]
    for system, how in (("flight-sql-be", "from the BE"), ("flight-sql", "through the FE's proxy")):
        if not any(g(system, "full", phase, 1) for phase in ("cold", "warm")):
            continue
        lines.append(line(f"{how}: warm full scan against pyarrow reading the files", g(system, "full", "warm", 1),
                          g("pyarrow", "full", "warm", 1), 0.8))
        for phase in ("cold", "warm"):
            lines.append(line(f"{how}: {phase} full scan against the Flight server", g(system, "full", phase, 1),
                              g("flight", "full", phase, 1), 1.0))
        lines.append(cpu_line(f"{how}: warm full scan", g(system, "full", "warm", 1), g("flight", "full", "warm", 1)))
    return lines


def _targets_of_issue_69(g, fx, verdict, summ: dict, page_cache_bytes: int | None) -> list[str]:
    """Issue 69: cold full scans, 1 reader (the Thrift path against the Flight server, Flight
    SQL from the BE against pyarrow reading the files), and the BE's memory against its page
    cache's bound whatever the table's size."""
    def ratio(a, b):
        return a["rps"] / b["rps"] if a and b and b["rps"] else None

    lines = ["", "**Targets of issue 69 (cold full scans, 1 reader; memory)**", ""]
    for label, a, b, bound in (("Thrift against the Flight server", g("starscan", "full", "cold", 1),
                                g("flight", "full", "cold", 1), 1.0),
                               ("Flight SQL from the BE against pyarrow reading the files",
                                g("flight-sql-be", "full", "cold", 1), g("pyarrow", "full", "cold", 1), 0.8)):
        r = ratio(a, b)
        lines.append(f"- cold full scan, {label} ≥ {bound:.1f}×: {verdict(r >= bound if r else None)}, {fx(r)} "
                     f"({common.fmt(a and a['rps'] / 1e6, 2)} vs {common.fmt(b and b['rps'] / 1e6, 2)} M rows/s)")
    python = max((v.get("rss_by_role", {}).get("python", 0) for k, v in summ.items()
                  if v and k[0] in STARSCAN_SYSTEMS), default=0)
    if python and page_cache_bytes:
        bound = page_cache_bytes + (1 << 30)
        lines.append(f"- the BE's Python peak RSS ≤ its page cache's bound + 1 GiB: {verdict(python <= bound)}, "
                     f"{common.gb(python)} against {common.gb(bound)} (page_cache_max_bytes {common.gb(page_cache_bytes)})")
    return lines


if __name__ == "__main__":
    sys.exit(main())

"""Shared fixtures: one real SparkSession (local[2]) per test session, one real starscan
server (uvicorn + thriftpy2 on 127.0.0.1, free ports) on it, and a warehouse with the demo
database plus the docs/protocol.md section 7 table `db1.t1`.

User configuration never leaks in: STARSCAN_* variables are removed and the tests run in a
temporary working directory (no stray starscan.conf)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from pathlib import Path

import pytest
from support.readers import engine_counts

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
for _key in [k for k in os.environ if k.startswith("STARSCAN_")]:
    del os.environ[_key]
# Servers the tests start as subprocesses (`starscan serve`) skip the start-up warm-up scan:
# it is worth its seconds to a reader, not to a test. tests/integration/test_warmup.py checks it.
os.environ["STARSCAN_WARMUP_ROWS"] = "0"
# Every JVM the suite starts (its SparkSessions, `starscan serve` children, a standalone
# cluster's master, workers and executors) compiles with C1 only. A test's JVM lives for
# minutes, and C2's compilations were about 45 % of the machine's CPU over a test file
# (tests/integration/test_predicates.py alone on 2 cores: 155 -> 85-96 s of CPU, 95 -> 78-88
# s wall); the tier changes how fast Spark's code runs, never what it computes. The java
# launcher reads this variable (it notes so on stderr). A test that times a server as users
# run it starts that server without it (support.servers.start_serve(user_jvm=True)).
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

DEMO_SCALE = 0.005  # 30k lineitem rows: enough batches, quick to write


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("starscan")
    os.chdir(path)
    return path


@pytest.fixture(scope="session")
def warehouse_dir(session_dir) -> Path:
    return session_dir / "warehouse"


@pytest.fixture(scope="session")
def base_settings(warehouse_dir):
    from starscan.settings.config import load_settings

    return load_settings(
        warehouse=warehouse_dir, spark_master="local[2]", http_port=0, be_port=0, query_port=0, flight_sql_port=0, be_flight_port=0,
        be_http_port=0,  # a BE-only node answers health on it: two xdist workers must not both take 8040
        bind_host="127.0.0.1",
        advertise_host="127.0.0.1", scan_context_gc_interval_s=1.0, listing_cache_ttl_s=0,
        # The shared server must not lock anyone out or rate-limit the suite: tests/integration/test_limits.py
        # and tests/integration/test_security.py check those limits on servers of their own.
        plan_rate_per_user=0, login_max_failures=1_000_000, warmup_rows=0,
        # Spark's catalog is an embedded Hive metastore (Derby under the warehouse's hidden
        # state folder), as with `hive_metastore = embedded`; the shared server serves none of
        # its databases, tests/integration/test_hive.py starts one that does.
        hive_metastore="embedded",
        # Every file a tablet of its own, as the protocol's vectors define db1.t1 (two files, two
        # tablets) and as the lifecycle tests count scanners; tests/integration/test_tablet_splits.py packs
        # and cuts through the run-time config.
        tablet_open_cost_bytes=1 << 30,
        # Scans run on Spark's tasks, the path most tests check (jobs, cancels, yields, task
        # failures); the BE's own reads of a scan's first splits (scan_local_reads, on by
        # default) are checked by servers that turn them on: test_local_reads.py,
        # test_be_start.py, test_resumable_scans.py, test_flink_latency.py; and so are its own
        # read slots (scan_local_read_slots, the machine's cores by default), by test_local_reads.py.
        scan_local_reads=False, scan_local_read_slots=0,
        # The Python data source's filter flag is the application's, set when it starts, as
        # docs/python-client.md advises: Spark reads it from the session active on the calling
        # thread when `df.rdd` plans a source's partitions, and a test that made a second
        # session of its own active there (createDataFrame does) would read it as off.
        spark_conf={"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4",
                    "spark.sql.python.filterPushdown.enabled": "true"},
    )


@pytest.fixture(scope="session")
def spark(base_settings):
    from starscan.spark.session import build_session

    session = build_session(base_settings)
    yield session
    session.stop()


def write_vector_table(spark, warehouse) -> None:
    """db1.t1(k1 INT NOT NULL, v1 VARCHAR(20), d DATE, dt DATETIME, m DECIMAL(10,2)): 3 rows, 2 files."""
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("k1", T.IntegerType(), False),
        T.StructField("v1", T.StringType(), True, {"__CHAR_VARCHAR_TYPE_STRING": "varchar(20)"}),
        T.StructField("d", T.DateType(), True),
        T.StructField("dt", T.TimestampType(), True),
        T.StructField("m", T.DecimalType(10, 2), True),
    ])
    utc = dt.timezone.utc
    rows = [
        (1, "a", dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc), Decimal("12.34")),
        (2, "b", dt.date(1969, 12, 31), dt.datetime(2024, 1, 2, 3, 4, 5, 123, tzinfo=utc), Decimal("-0.01")),
        (3, None, None, None, None),
    ]
    path = str(warehouse.table_path("db1", "t1"))
    # Two tablets: rows 1-2 in one file, row 3 in another.
    spark.createDataFrame(rows[:2], schema).coalesce(1).write.mode("overwrite").parquet(path)
    spark.createDataFrame(rows[2:], schema).coalesce(1).write.mode("append").parquet(path)
    warehouse.invalidate("db1", "t1")


def write_partitioned_table(spark, warehouse) -> None:
    """db1.sales partitioned by region (string) and day (date): pruning fixtures."""
    from pyspark.sql import functions as F

    df = spark.range(0, 400).select(
        F.col("id").cast("int").alias("id"),
        (F.col("id") * 1.5).cast("decimal(12,2)").alias("amount"),
        F.element_at(F.array(F.lit("eu"), F.lit("us"), F.lit("apac"), F.lit("latam")), (F.col("id") % 4 + 1).cast("int")).alias("region"),
        F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % 5).cast("int")).alias("day"),
    )
    df.write.mode("overwrite").partitionBy("region", "day").parquet(str(warehouse.table_path("db1", "sales")))
    warehouse.invalidate("db1", "sales")


def write_session_tables(spark, warehouse) -> None:
    """The session server's tables: the demo, db1.t1 and db1.sales, written by Spark."""
    from starscan.app.demo import create_demo

    create_demo(spark, warehouse, DEMO_SCALE, 256 << 10)  # small tablets: several per table
    write_vector_table(spark, warehouse)
    write_partitioned_table(spark, warehouse)


_SESSION_DATABASES = ("demo.db", "db1.db")


def session_tables(spark, warehouse, tmp_path_factory) -> None:
    """The session tables in ``warehouse``. Under pytest-xdist the run's first worker writes
    them (with Spark) into the run's shared temporary folder and every worker copies those
    files, the same bytes: one Spark write of them per run, not one per worker."""
    import fcntl
    import shutil

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        write_session_tables(spark, warehouse)
        return
    from starscan.tables.catalog import Warehouse

    shared = tmp_path_factory.getbasetemp().parent / "session-tables"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the writer holds it until the files are whole
        done = shared / "written"
        if not done.exists():
            shutil.rmtree(shared / "warehouse", ignore_errors=True)  # a writer that failed left part of it
            write_session_tables(spark, Warehouse(shared / "warehouse", 0))
            done.touch()
    for name in _SESSION_DATABASES:
        shutil.copytree(shared / "warehouse" / name, Path(warehouse.location) / name, dirs_exist_ok=True)
    for db in ("demo", "db1"):
        for table in warehouse.tables(db):
            warehouse.invalidate(db, table)


@pytest.fixture(scope="session")
def server(spark, base_settings, tmp_path_factory):
    from starscan.app.server import StarscanServer

    srv = StarscanServer(base_settings, spark)
    session_tables(spark, srv.warehouse, tmp_path_factory)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def fe_url(server) -> str:
    return f"http://127.0.0.1:{server.http_port}"


@pytest.fixture(scope="session")
def be_addr(server) -> tuple[str, int]:
    return "127.0.0.1", server.be_port


@pytest.fixture(scope="session")
def client(fe_url):
    from starscan.client import StarscanClient

    return StarscanClient(fe_url, "root", "")


@pytest.fixture
def no_yield(server):
    """Scan tasks keep their Spark slots while their reader waits (``scan_yield_after_s``):
    a test that stops or kills them finds them running, not given back by a yield."""
    saved = server.service.settings.scan_yield_after_s
    server.ops.update_config({"scan_yield_after_s": 600.0})
    yield
    server.ops.update_config({"scan_yield_after_s": saved})


@pytest.fixture(scope="module", params=["sql", "auto"])
def engine(request, server):
    """Run a module once per engine: ``sql`` (Spark SQL for every scan) and ``auto`` (the
    arrow engine for every plan it reads exactly, Spark SQL for the rest). The module's
    tests compare with Spark whichever engine ran; on ``auto`` the arrow engine must have
    run some of its scans."""
    saved = server.service.settings.scan_engine
    server.ops.update_config({"scan_engine": request.param})  # the run-time config path
    before = engine_counts(server).get("arrow", 0)
    yield request.param
    server.ops.update_config({"scan_engine": saved})
    arrow_scans = engine_counts(server).get("arrow", 0) - before
    if request.param == "auto":
        assert arrow_scans > 0, "no scan of this module ran on the arrow engine"
    else:
        assert arrow_scans == 0, "a scan ran on the arrow engine with scan_engine = sql"


# ---- test tiers ----------------------------------------------------------------------------
# The folders are the tiers:
#   tests/unit         no SparkSession, no server process: the whole folder runs in seconds;
#   tests/wire         the wire contract: REST, Thrift and plan vectors, the official Apache
#                      Thrift client, bad input and fuzz targets, against the real server;
#   tests/integration  scans on a real Spark through real servers, one behaviour per file.
# `quick` (pytest -m quick, under a minute) is every test, in any folder, that needs no
# SparkSession and starts no server process. It is decided from what a test uses, so a new
# test lands in the right tier without anyone remembering a marker; a test that starts
# `starscan serve` or Spark on its own marks itself `slow`. A test in tests/unit that is not
# quick fails the collection: the folder's promise is kept by the suite, not by habit.
_NEEDS_SPARK = {"spark", "server", "fe_url", "be_addr", "client", "engine"}
_TIERS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    misplaced = []
    for item in items:
        needs = set(getattr(item, "fixturenames", ())) & _NEEDS_SPARK
        quick = not needs and item.get_closest_marker("slow") is None
        if quick:
            item.add_marker(pytest.mark.quick)
        tier = Path(str(item.path)).resolve().relative_to(_TIERS).parts[0]
        if tier in ("unit", "wire", "integration", "hosts"):
            item.add_marker(getattr(pytest.mark, tier))
        if tier == "unit" and not quick:
            misplaced.append(f"{item.nodeid} (uses {', '.join(sorted(needs)) or 'a slow marker'})")
    if misplaced:
        raise pytest.UsageError("tests/unit holds only tests without Spark or a server process; move these to "
                                "tests/integration: " + "; ".join(misplaced))

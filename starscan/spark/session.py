"""The SparkSession starscan runs on, and the Java check that comes before it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from starscan.core.errors import JavaMissingError
from starscan.expr import Expr
from starscan.settings.config import Settings
from starscan.spark import pyspark_internals
from starscan.storage.hadoop_paths import literal
from starscan.storage.stores import open_storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

JAVA_HELP = (
    "starscan needs Java 17 or newer for Spark. Install it, e.g. "
    "`apt-get install openjdk-17-jre-headless` (Debian/Ubuntu), `brew install openjdk@17` (macOS), "
    "or set JAVA_HOME to a JDK 17+."
)

# Defaults (bench/RESULTS.md): small input splits (16 MiB) make short Spark tasks, so task
# slots change hands often among concurrent scanners; a split cannot be smaller than a
# Parquet row group, so tables starscan writes (demo, `starscan load`) get 16 MiB row groups.
# FAIR lets each scanner's pool get a slot before a pool that has some.
DEFAULT_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.files.maxPartitionBytes": str(16 << 20),
    "spark.hadoop.parquet.block.size": str(16 << 20),
    "spark.sql.execution.arrow.maxRecordsPerBatch": "4096",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.driver.memory": "2g",
}


def java_major_version() -> int | None:
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> int:
    major = java_major_version()
    if major is None:
        raise JavaMissingError(f"No Java runtime found. {JAVA_HELP}")
    if major < 17:
        raise JavaMissingError(f"Java {major} found, but Java 17 or newer is needed. {JAVA_HELP}")
    return major


#: FAIR pools scan jobs are spread over (a scanner's pool is chosen from its context id).
SCAN_POOLS = 64


def scan_pool(context_id: str) -> str:
    """The FAIR scheduler pool of a scanner's jobs. Each pool has a minimum share of one
    task slot, so a scanner with no task running gets the next free slot before scanners
    that have one: every reader keeps getting rows while others read."""
    return f"starscan-{int(context_id.replace('-', '')[:8], 16) % SCAN_POOLS}"


def fair_pools_file(state_dir: Path) -> Path:
    """Write the FAIR scheduler's pool definitions (``spark.scheduler.allocation.file``)."""
    pools = "".join(
        f'  <pool name="starscan-{i}"><schedulingMode>FIFO</schedulingMode><weight>1</weight>'
        f"<minShare>1</minShare></pool>\n" for i in range(SCAN_POOLS))
    path = state_dir / "fairscheduler.xml"
    state_dir.mkdir(parents=True, exist_ok=True)
    text = f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n'
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def spark_conf(settings: Settings) -> dict[str, str]:
    conf = dict(DEFAULT_SPARK_CONF)
    try:
        conf["spark.scheduler.allocation.file"] = str(fair_pools_file(settings.state_path))
    except OSError:  # a read-only warehouse: pools are created on demand (with a warning each)
        pass
    # Scan tasks run starscan's own code in Spark's Python workers (provider/push/task.py):
    # they must use this interpreter, whose environment has starscan and pyarrow.
    conf["spark.pyspark.python"] = sys.executable
    conf["spark.pyspark.driver.python"] = sys.executable
    # Workers start with `python -m`, which puts their working directory first on sys.path:
    # started from a source checkout, its `starscan/` folder would shadow the installed package.
    conf["spark.executorEnv.PYTHONSAFEPATH"] = "1"
    # Workers are forked from a daemon that has the scan tasks' imports done already.
    conf["spark.python.daemon.module"] = "starscan.provider.worker_daemon"
    conf["spark.sql.session.timeZone"] = settings.time_zone
    if settings.warehouse_is_local:
        conf["spark.sql.warehouse.dir"] = str(settings.warehouse_path.resolve())
    else:
        conf["spark.sql.warehouse.dir"] = open_storage(settings.warehouse_location).spark_path(settings.warehouse_location)
    if settings.hive_metastore:
        conf["spark.sql.catalogImplementation"] = "hive"
        if settings.hive_metastore == "embedded":
            derby = settings.state_path.resolve() / "metastore_db"
            conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = f"jdbc:derby:;databaseName={derby};create=true"
        else:
            conf["spark.hadoop.hive.metastore.uris"] = settings.hive_metastore
    if settings.spark_master.startswith("local"):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    else:
        # A cluster's executors reach this driver, and push scanned rows into this BE, at the
        # address readers reach it by.
        conf["spark.driver.host"] = settings.advertise_host
    conf.update(settings.spark_conf)
    return conf


def spark_problem(spark: SparkSession) -> str | None:
    """Why this process's Spark cannot run scans now, or None when it can (or is still
    starting). A node's Spark is a SparkHandle (starscan.spark.handle), which starts a new
    session when the JVM dies (killed, crashed, exited on an OutOfMemoryError): meanwhile this
    says so. A bare SparkSession (embedded uses, tests) cannot be restarted."""
    from starscan.spark.handle import SparkHandle, SparkState

    if isinstance(spark, SparkHandle):
        state, text = spark.status()
        if state is SparkState.STARTING:
            return None
        if state is not SparkState.UP:
            return text
        session = spark._session
        if session is None:  # given up a moment ago
            return spark.status()[1]
        # The JVM's process first: asking a dead JVM makes Py4J log a traceback.
        if pyspark_internals.jvm_exited(session):
            spark.seen_down("its process exited")  # not up from now on; the watcher restarts it
            return "Spark's JVM exited: a new SparkSession is starting"
        problem = _session_problem(session)
        if problem is None:
            return None
        spark.check()  # the watcher looks now, and restarts it
        return f"{problem}: a new SparkSession is starting"
    problem = _session_problem(spark)
    return None if problem is None else f"{problem}: restart starscan"


def spark_health(spark: SparkSession) -> tuple[str, str, int]:
    """A health check's status, message and HTTP code: OK (200), RECOVERING (200: a new
    SparkSession is starting after the JVM died, and the node serves what it can meanwhile;
    an orchestrator must not restart it) or FAILED (503: only a restart helps)."""
    from starscan.spark.handle import SparkHandle, SparkState

    if isinstance(spark, SparkHandle) and spark.state is SparkState.RECOVERING:
        return "RECOVERING", spark.status()[1], 200
    problem = spark_problem(spark)
    if problem is None:
        return "OK", "To Be Added", 200
    if isinstance(spark, SparkHandle) and spark.state is not SparkState.FAILED:
        return "RECOVERING", problem, 200
    return "FAILED", problem, 503


def _session_problem(session: SparkSession) -> str | None:
    try:
        if pyspark_internals.context_stopped(session):
            return "the SparkContext is stopped"
    except Exception as exc:  # noqa: BLE001 - py4j cannot reach the JVM
        return f"Spark's JVM does not answer ({type(exc).__name__})"
    return None


_LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)\])?")


def master_with_task_retries(master: str, conf: dict[str, str]) -> str:
    """``master``, with task retries when it is local Spark. A cluster's Spark runs a failed
    task again up to ``spark.task.maxFailures`` (4) times; local Spark reads that number from
    its master URL only (``local[N,F]``) and retries nothing with ``local`` or ``local[N]``:
    a Python worker that crashed, or was killed, failed the whole scan. So ``local[N]`` runs
    as ``local[N,F]`` with F = ``spark.task.maxFailures`` (4 unless set). The push sink reads
    a retried task's split on from where its rows stopped (provider/splits.py)."""
    match = _LOCAL_MASTER.fullmatch(master.strip())
    if match is None:
        return master
    failures = int(conf.get("spark.task.maxFailures", "4"))
    return f"local[{match.group(1) or 1},{failures}]"


def build_session(settings: Settings) -> SparkSession:
    """Start (or join) the process's SparkSession with starscan's settings."""
    check_java()
    if settings.spark_master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark takes its workers' interpreter from here (the spark.pyspark.python key is read
    # by spark-submit only); scan tasks need this one (see spark_conf).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    conf = spark_conf(settings)
    builder = SparkSession.builder.master(master_with_task_retries(settings.spark_master, conf)).appName("starscan")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session




def read_parquet_files(spark: SparkSession, schema: StructType, base: str, paths: list[str],
                       partition_folders: bool = True, file_format: str = "parquet") -> DataFrame:
    """A DataFrame over exactly these Parquet files of the table at ``base`` (names never
    read as glob patterns), partition columns from the folders between ``base`` and each
    file, typed by ``schema`` (``partition_folders=False``: the folders mean nothing, every
    column is in the files, as in Iceberg tables). ``file_format``: parquet or orc."""
    reader = spark.read.schema(schema).format(file_format)
    if not partition_folders:
        return reader.option("recursiveFileLookup", "true").load([literal(p) for p in paths])
    # basePath is compared with the files' parents as it is, never globbed.
    return reader.option("basePath", base).load([literal(p) for p in paths])


def read_metastore_files(spark: SparkSession, db: str, table: str, locations: list[str]) -> DataFrame:
    """The rows of exactly these files of a metastore table, read by Spark's own reader for
    the table (its Hive SerDe or data source, with the table's properties: delimiter, null
    format, escape, header), partition values from the metastore. Spark reads the table and
    keeps the rows of the planned files (``input_file_name``), so a file added since the plan
    is not read; partition filters still prune. ``locations``: the files as the store names
    them (a local path, s3://bucket/key)."""
    from urllib.parse import urlsplit

    from pyspark.sql import functions as F

    def quoted(name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    name = f"{quoted(db)}.{quoted(table)}"
    # Spark keeps a table's file listing: the plan's files may be newer. (First, too: through
    # a node's SparkHandle this waits for a session starting; pyspark's functions below do not.)
    spark.catalog.refreshTable(name)
    wanted = sorted({urlsplit(p).path if "://" in p else p for p in locations})
    # input_file_name is a URI (file:/tmp/x, s3a://bucket/key; %-encoded by some readers):
    # its path, as it is and decoded.
    path = F.regexp_replace(F.input_file_name(), "^[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?", "")
    return (spark.table(name)
            .where(path.isin(wanted) | F.expr("url_decode(regexp_replace(input_file_name(), "
                                               "'^[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?', ''))").isin(wanted)))


_SESSIONS: dict[tuple[int, bool, bool], SparkSession] = {}
_SESSIONS_LOCK = threading.Lock()


def scan_session(spark: SparkSession, ordered: bool = False, exact_floats: bool = False) -> SparkSession:
    """The session a sql-engine scan reads in: ``spark`` itself, or a session of the same
    SparkContext with these changes (one of each kind, made once):

    * ``ordered``: file splits that depend only on the files. Spark sizes its splits by the
      cluster's cores (``spark.sql.files.minPartitionNum`` defaults to the default
      parallelism), so two BEs, or one whose cluster gained an executor, would cut the same
      files differently and send an ordered scan's rows in another order.
    * ``exact_floats``: no filter pushdown into the Parquet and ORC readers, for predicates
      on FLOAT/DOUBLE columns. Spark's own semantics order NaN above every number, but the
      files' row-group statistics leave NaN out (pyarrow writes min/max without it), so a
      pushed-down ``x > 498`` skips a row group whose max is 99 and whose NaN row matches:
      Spark SQL gives that row only with pushdown off, which is the answer both engines give."""
    if not ordered and not exact_floats:
        return spark
    sc = spark.sparkContext
    key = (id(sc), ordered, exact_floats)
    with _SESSIONS_LOCK:
        for old in [k for k, s in _SESSIONS.items() if pyspark_internals.java_context(s.sparkContext) is None]:
            del _SESSIONS[old]  # of a SparkContext stopped (a JVM that died and was replaced)
        session = _SESSIONS.get(key)
        if session is None:
            session = spark.newSession()
            for name in ("spark.sql.session.timeZone", "spark.sql.files.maxPartitionBytes",
                         "spark.sql.files.openCostInBytes"):
                value = spark.conf.get(name, None)
                if value is not None:
                    session.conf.set(name, value)
            if ordered:
                session.conf.set("spark.sql.files.minPartitionNum", "1")
            if exact_floats:
                session.conf.set("spark.sql.parquet.filterPushdown", "false")
                session.conf.set("spark.sql.orc.filterPushdown", "false")
            _SESSIONS[key] = session
        return session


def filters_floats(predicate: Expr | None, schema: StructType) -> bool:
    """Whether ``predicate`` reads a FLOAT or DOUBLE column of ``schema`` (scan_session's
    ``exact_floats``)."""
    if predicate is None:
        return False
    from pyspark.sql import types as T

    by_lower = {f.name.lower(): f.dataType for f in schema.fields}
    return any(isinstance(by_lower.get(name.lower()), (T.FloatType, T.DoubleType)) for name in predicate.columns())

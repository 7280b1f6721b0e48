"""Everything starscan reaches below pyspark's public API, in one place:

* **a JVM restart**: pyspark has no public way to find out that Spark's JVM died or to start
  a new one in the same process (a SparkSession whose JVM is gone keeps its objects, and
  ``SparkSession.builder.getOrCreate`` hands them out again): ``jvm_exited``,
  ``context_stopped``, ``forget_session``, ``forget_gateway`` reset pyspark's process-wide
  state (``_PROCESS_STATE``);
* **Py4J handles of Spark's JVM**, for what pyspark does not offer: the JVM (``jvm``), the
  JavaSparkContext (``java_context``), its status store (``status_store``: finished jobs'
  times, kept with the UI off), the Hadoop configuration (``hadoop_configuration``), the
  session's catalog and SQL configuration (``SessionJvm``, for the Hive tables), the JVM's
  default time zone (``jvm_time_zone``);
* **jobs**: one Spark job over one partition, as ``SparkContext.runJob`` does without a new
  Python RDD per call (``run_job``), the Arrow batches of a DataFrame as an RDD
  (``arrow_batch_rdd``) and streamed to the driver (``arrow_batches``), a DataFrame's rows
  collected as Arrow (``collect_arrow``: private on 3.5), and Spark's own partition-value parser (``parse_partitions``).

Where the lines differ below the public API, the branch is here, by starscan.spark.compat's
flags. Tested on every Spark line starscan supports, 3.5 to 4.3 (``TESTED_ON``): the
Spark-version tier runs every function here on each. ``check()`` says which of the Python
names used here is missing: a node logs it as an error when it starts, and the unit tests
fail on it, instead of a restart that silently does nothing.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from starscan.spark.compat import SPARK_4, SPARK_4_2, arrow_schema

log = logging.getLogger("starscan.spark")

TESTED_ON = ">=3.5.5,<4.4"

#: (module, class, attribute) of the process-wide state pyspark keeps for its one JVM, and
#: the private Python names the jobs below use.
_PROCESS_STATE = (
    ("pyspark", "SparkContext", "_gateway"),  # pyspark.core.context from 4.0, pyspark.context before
    ("pyspark", "SparkContext", "_jvm"),
    ("pyspark", "SparkContext", "_active_spark_context"),
    ("pyspark", "SparkContext", "_lock"),
    ("pyspark.sql.session", "SparkSession", "_instantiatedSession"),
    ("pyspark.sql.session", "SparkSession", "_activeSession"),
    ("pyspark.sql.context", "SQLContext", "_instantiatedContext"),
    ("pyspark.rdd", "RDD", None),                       # an RDD over a Java RDD (arrow_batch_rdd)
    ("pyspark.serializers", "NoOpSerializer", None),
)


def check() -> list[str]:
    """The names this module needs that the installed pyspark lacks (empty when all are there)."""
    missing = [] if _LOAD_FROM_SOCKET is not None else ["_load_from_socket"]
    for module, cls, attribute in _PROCESS_STATE:
        try:
            owner = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{cls}")
            continue
        if attribute is not None and not hasattr(owner, attribute):
            missing.append(f"{module}.{cls}.{attribute}")
    return missing


def jvm_process(session: Any) -> Any:
    """The ``subprocess.Popen`` of the session's JVM (pyspark keeps it on its Py4J gateway
    as ``proc``), or None when pyspark did not start the JVM (a gateway given to it)."""
    gateway = getattr(session.sparkContext, "_gateway", None)
    return getattr(gateway, "proc", None)


def jvm_exited(session: Any) -> bool:
    """Whether the JVM process of ``session`` has ended (killed, crashed, exited on an
    OutOfMemoryError). Reads only the process's state: no call into the JVM."""
    proc = jvm_process(session)
    return proc is not None and proc.poll() is not None


def context_stopped(session: Any) -> bool:
    """Whether the session's SparkContext is stopped, asked of the JVM (raises a Py4J error
    when the JVM does not answer)."""
    jsc = session.sparkContext._jsc
    return jsc is None or bool(jsc.sc().isStopped())


def forget_session(session: Any) -> None:
    """Drop pyspark's process-wide hold on ``session`` (whose JVM died or whose context
    stopped), so that the next ``SparkSession.builder.getOrCreate`` starts a new SparkContext,
    and a new JVM when the old one is gone. Nothing here waits on the old JVM."""
    from pyspark import SparkContext
    from pyspark.sql.context import SQLContext
    from pyspark.sql.session import SparkSession

    sc = session.sparkContext
    exited = jvm_exited(session)
    if not exited:
        try:  # the JVM is there, its context stopped: stop it cleanly, keep the JVM
            session.stop()
        except Exception as exc:  # noqa: BLE001 - an unanswering JVM is dropped below
            log.info("the old SparkSession does not answer (%s): its JVM is dropped", exc)
            exited = True
    _drop_context(sc)
    with SparkContext._lock:
        if SparkContext._active_spark_context is sc:
            SparkContext._active_spark_context = None
    if exited:
        forget_gateway()
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def forget_gateway() -> None:
    """Drop pyspark's JVM gateway and everything started on it (after a start that failed
    half-way: a JVM that was launched, then died or never answered), so that the next start
    launches a new JVM instead of calling the dead one again. A JVM still running is killed."""
    from pyspark import SparkContext
    from pyspark.sql.context import SQLContext
    from pyspark.sql.session import SparkSession

    with SparkContext._lock:
        gateway = SparkContext._gateway
        SparkContext._gateway = None
        SparkContext._jvm = None
        active = SparkContext._active_spark_context
        SparkContext._active_spark_context = None
    if active is not None:
        _drop_context(active)
    if gateway is not None:
        try:
            gateway.close(keep_callback_server=False)
        except Exception:  # noqa: BLE001 - its sockets lead nowhere now
            pass
        proc = getattr(gateway, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def _drop_context(sc: Any) -> None:
    """Close a dead SparkContext's Python side: its accumulator server (a socket server
    thread) and its handle of the JVM's context."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        try:
            server.shutdown()
            server.server_close()
        except Exception:  # noqa: BLE001 - a Python socket server of the old context
            pass
        sc._accumulatorServer = None
    sc._jsc = None


# ---- Py4J handles of Spark's JVM ----
def jvm(spark: Any) -> Any:
    """The JVM's gateway view of a SparkSession or SparkContext (``jvm.java.util...``)."""
    return spark._jvm


def java_context(sc: Any) -> Any:
    """The JavaSparkContext of a SparkContext (None once pyspark dropped a dead one)."""
    return sc._jsc


def status_store(sc: Any) -> Any:
    """Spark's status store (jobs' submission and completion times), kept with the UI off."""
    return sc._jsc.sc().statusStore()


def hadoop_configuration(spark: Any) -> Any:
    """The session's Hadoop configuration (set at run time: in no UI page or event log)."""
    return spark._jsc.hadoopConfiguration()


def jvm_time_zone(spark: Any) -> str | None:
    """The JVM's default time zone (what Spark's readers rebase with), or None when the JVM
    does not answer (Spark Connect, a stopped JVM)."""
    try:
        return str(spark._jvm.java.util.TimeZone.getDefault().getID())
    except Exception:  # noqa: BLE001 - no JVM of ours to ask
        return None


class SessionJvm:
    """A session's JVM side as the Hive tables use it (starscan.tables.hive): its session
    catalog, its SQL configuration and the JVM for Spark's classes."""

    def __init__(self, spark: Any):
        self.spark = spark

    @property
    def jvm(self) -> Any:
        return self.spark._jvm

    def catalog(self) -> Any:
        return self.spark._jsparkSession.sessionState().catalog()

    def sql_conf(self) -> Any:
        return self.spark._jsparkSession.sessionState().conf()

    def as_java_map(self, scala_map: Any) -> Any:
        """A Scala map of the JVM as a Java one (which Py4J gives as a dict): Spark 4 is built
        on Scala 2.13, 3.5 on 2.12, whose converters differ."""
        if SPARK_4:
            return self.spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_map)
        return self.spark._jvm.scala.collection.JavaConverters.mapAsJavaMap(scala_map)


# ---- jobs ----
def collect_arrow(df: Any, time_zone: str) -> pa.Table:
    """The DataFrame's rows collected at the driver as one Arrow table (Spark's Arrow types,
    timestamps in ``time_zone``)."""
    if SPARK_4:
        return df.toArrow()
    schema = arrow_schema(df.schema, time_zone)  # 3.5: private, and every timestamp as UTC
    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches).cast(schema) if batches else schema.empty_table()


def arrow_batch_rdd(df: Any, sc: Any) -> Any:
    """The DataFrame's rows as an RDD of Arrow IPC batches, as Spark's JVM writes them (what
    ``DataFrame.toArrow`` collects), for tasks that push them on (the sql engine)."""
    from pyspark.rdd import RDD
    from pyspark.serializers import NoOpSerializer

    return RDD(df._jdf.toArrowBatchRdd().toJavaRDD(), sc, NoOpSerializer())




def arrow_batches(df: Any, time_zone: str, bind_host: str = "127.0.0.1",
                  advertise_host: str = "127.0.0.1") -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The DataFrame's rows streamed to the caller as Arrow batches (Spark's Arrow types,
    timestamps in ``time_zone``), a partition at a time, sent by the tasks themselves to a
    listener of this process on ``bind_host`` (which they reach as ``advertise_host``:
    starscan.spark.result_stream): neither the driver's JVM nor this process ever holds a
    whole partition. Nothing runs until the batches are read."""
    from starscan.spark.result_stream import ResultStream

    schema = arrow_schema(df.schema, time_zone)

    def batches() -> Iterator[pa.RecordBatch]:
        sc = df.sparkSession.sparkContext
        rdd = arrow_batch_rdd(df, sc)  # plans the query (and runs an adaptive plan's first stages)
        yield from ResultStream(bind_host, advertise_host).batches(sc, rdd, schema)

    return schema, batches()


def run_job(sc: Any, mapped: Any, split: int) -> None:
    """One Spark job over one partition of ``mapped`` (what ``SparkContext.runJob`` does,
    without building a new Python RDD per call); the partition function returns nothing."""
    sock_info = sc._jvm.PythonRDD.runJob(sc._jsc.sc(), mapped._jrdd, [split])
    load = _LOAD_FROM_SOCKET
    if load is None:
        raise RuntimeError(f"this pyspark has no _load_from_socket where its line keeps it ({TESTED_ON} was tested): "
                           "install a tested pyspark")
    if SPARK_4_2:
        with load(sock_info, mapped._jrdd_deserializer) as stream:
            for _ in stream:
                pass
    else:  # an iterator before 4.2
        for _ in load(sock_info, mapped._jrdd_deserializer):
            pass


def parse_partitions(spark: Any, paths: list[str], base: str, type_inference: bool, case_sensitive: bool,
                     validate: bool, time_zone: str) -> T.StructType:
    """Spark's ``PartitioningUtils.parsePartitions`` over the folders ``paths`` under ``base``
    (what ``spark.read.parquet`` runs on the folders it lists): the partition columns it
    infers, with the session's inference settings."""
    jvm: Any = spark._jvm
    folders = jvm.java.util.ArrayList()
    for path in paths:
        folders.add(jvm.org.apache.hadoop.fs.Path(path))
    bases = jvm.java.util.HashSet()
    bases.add(jvm.org.apache.hadoop.fs.Path(base))
    utils = getattr(jvm, "org.apache.spark.sql.execution.datasources.PartitioningUtils$").__getattr__("MODULE$")
    if SPARK_4:
        scala = jvm.scala.jdk.javaapi.CollectionConverters
        folder_seq, base_set = scala.asScala(folders).toList(), scala.asScala(bases).toSet()
        extra: tuple[Any, ...] = (False,)
    else:
        scala = jvm.scala.collection.JavaConverters
        folder_seq, base_set = scala.asScalaBuffer(folders).toList(), scala.asScalaSet(bases).toSet()
        extra = ()
    spec = utils.parsePartitions(folder_seq, type_inference, base_set, jvm.scala.Option.empty(), case_sensitive,
                                 validate, time_zone, *extra)
    schema: T.StructType = T.StructType.fromJson(json.loads(spec.partitionColumns().json()))
    return schema


#: pyspark's reader of a job's results: found once, not at every job (None: not where the line
#: keeps it; ``check`` names it).
_LOAD_FROM_SOCKET: Any = getattr(importlib.import_module("pyspark.util" if SPARK_4 else "pyspark.rdd"),
                                 "_load_from_socket", None)

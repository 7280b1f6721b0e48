"""The chaos soak's workload (bench/chaos.py runs it for minutes and records it;
tests/integration/test_chaos.py for one): an FE and two BEs behind one balancer address
(``Cluster``), mixed readers (the bundled client, Spark-connector-like and Flink-like Thrift
readers, the MySQL port) and a seeded driver that kills Spark's Python workers, a BE's JVM, a
whole BE and the FE (``Soak``); ``run`` does it all in a temporary folder. Every completed read
is checked against the table's known rows (bench/chaos.py says how each reader and fault
behaves)."""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pyarrow as pa

from support.balancer import TcpBalancer
from support.nodes import Node, write_id_table
from support.processes import log
from support.waits import free_port

MAX_MINUTES = 120.0
FILES, ROWS_PER_FILE = 8, 40_000
SECRET = "chaos-soak-plan-secret-0123456789abcdef"
QUERIES = {
    "full": ("select id, v from chaos.events", lambda i: True),
    "filtered": ("select id, v from chaos.events where id < 100000", lambda i: i < 100_000),
    # The MySQL reader's query: a slice, so that its rows are quick to compare.
    "small": ("select id, v from chaos.events where id >= 150000 and id < 155000", lambda i: 150_000 <= i < 155_000),
}
THRIFT_QUERIES = ["full", "filtered"]
KINDS = ["client", "connector", "flink", "mysql"]
KIND_WEIGHTS = [3, 3, 3, 1]
FAULTS = ["worker", "jvm", "be", "fe"]
FAULT_WEIGHTS = [3, 2, 2, 1]


def expected_rows(where) -> Counter:
    return Counter((i, str(i)) for i in range(FILES * ROWS_PER_FILE) if where(i))


def write_table(root: Path) -> None:
    write_id_table(root / "wh" / "chaos.db" / "events", FILES, ROWS_PER_FILE)


class Cluster:
    """An FE and two BEs on 127.0.0.1, the BEs behind one balancer address."""

    def __init__(self, root: Path, spark_master: str = "local[2]"):
        self.root = root
        self.be_ports = [free_port(), free_port()]
        self.be_http = [free_port(), free_port()]
        self.fe_http, self.fe_query = free_port(), free_port()
        self.balancer = TcpBalancer([("127.0.0.1", p) for p in self.be_ports])
        env = {"STARSCAN_PLAN_SECRET": SECRET, "STARSCAN_TABLET_TARGET_BYTES": str(256 << 10),
               "STARSCAN_RESUMABLE_SCANS": "true"}
        self.bes = [Node(root, f"be{i}", "--role", "be", "--be-port", str(self.be_ports[i]), "--be-http-port",
                         str(self.be_http[i]), "--spark-master", spark_master, env=env) for i in range(2)]
        self.fe = Node(root, "fe", "--role", "fe", "--http-port", str(self.fe_http), "--query-port", str(self.fe_query),
                       "--be-endpoints", f"127.0.0.1:{self.balancer.port}", env=env)

    @property
    def fe_url(self) -> str:
        return f"http://127.0.0.1:{self.fe_http}"

    def start(self) -> None:
        for node in (*self.bes, self.fe):
            node.start()
        for node, port in zip((*self.bes, self.fe), (*self.be_http, self.fe_http), strict=True):
            node.wait_healthy(port)
        # The FE listens before its Spark is up; the table's first plan waits for it (its schema).
        _plan(self.fe_url, QUERIES["full"][0], 300, 1)

    def stop(self) -> None:
        for node in (self.fe, *self.bes):
            node.kill()
        self.balancer.close()


# ---- readers ----------------------------------------------------------------------------------
@dataclass
class Read:
    kind: str
    query: str
    outcome: str = "ok"  # ok | failed | wrong
    retryable: bool = True
    error: str = ""
    attempts: int = 1
    seconds: float = 0.0
    detail: dict = field(default_factory=dict)


def _plan(fe_url: str, sql: str, timeout_s: float, tries: int) -> dict:
    failure: Exception | None = None
    for _ in range(tries):
        try:
            r = httpx.post(f"{fe_url}/api/chaos/events/_query_plan", json={"sql": sql}, auth=("root", ""),
                           timeout=timeout_s)
            if r.status_code == 200:
                return r.json()
            failure = RuntimeError(f"_query_plan HTTP {r.status_code}: {r.text[:200]}")
        except httpx.HTTPError as exc:
            failure = exc
    assert failure is not None
    raise failure


class _Transient(Exception):
    """A failure a reader may meet with a retry: a transport error or a retryable status."""


def _thrift_read(address: tuple[str, int], plan: dict, timeout_s: float, call_retries: int) -> Counter:
    """open_scanner, get_next until eos, close_scanner through ``address``; each call retried
    ``call_retries`` times on a new connection (the Spark connector's shape; 0: Flink's)."""
    from starscan.client import thrift_client
    from starscan.core.thrift_defs import wire

    conn: list = [None]

    def call(name: str, params):
        for attempt in range(call_retries + 1):
            if conn[0] is None:
                try:
                    conn[0] = thrift_client(*address, timeout_s=timeout_s)
                except Exception as exc:  # noqa: BLE001
                    if attempt == call_retries:
                        raise _Transient(f"connect: {type(exc).__name__}: {exc}") from None
                    continue
            try:
                return getattr(conn[0], name)(params)
            except Exception as exc:  # noqa: BLE001 - a transport failure: a new connection, the same call
                conn[0].close()
                conn[0] = None
                if attempt == call_retries:
                    raise _Transient(f"{name}: {type(exc).__name__}: {exc}") from None
        raise AssertionError("unreachable")

    tablets = [int(t) for t in plan["partitions"]]
    try:
        opened = call("open_scanner", wire.TScanOpenParams(
            cluster="default_cluster", database="chaos", table="events", tablet_ids=tablets, batch_size=1000,
            opaqued_query_plan=plan["opaqued_query_plan"], user="root", passwd=""))
        _check(opened.status, "open_scanner")
        seen: Counter = Counter()
        offset = 0
        while True:
            res = call("get_next", wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
            _check(res.status, "get_next")
            if res.eos:
                break
            with pa.ipc.open_stream(res.rows) as reader:
                for batch in reader:
                    offset += batch.num_rows
                    seen.update(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True))
        try:
            call("close_scanner", wire.TScanCloseParams(context_id=opened.context_id))
        except _Transient:
            pass
        return seen
    finally:
        if conn[0] is not None:
            conn[0].close()


def _check(status, call: str) -> None:
    from starscan.core.thrift_defs import wire

    code = status.status_code
    if code == wire.TStatusCode.OK:
        return
    name = wire.TStatusCode._VALUES_TO_NAMES.get(code, str(code))
    text = f"{call}: {name}: {'; '.join(status.error_msgs or [])[:300]}"
    if code in (wire.TStatusCode.SERVICE_UNAVAILABLE, wire.TStatusCode.NOT_FOUND, wire.TStatusCode.TIMEOUT,
                wire.TStatusCode.CANCELLED):
        raise _Transient(text)
    raise RuntimeError(text)


class Soak:
    def __init__(self, args, cluster: Cluster):
        self.args, self.cluster = args, cluster
        self.reads: list[Read] = []
        self.faults: list[tuple[float, str, str]] = []  # (seconds since start, fault, what was hit)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.restarts: list[threading.Timer] = []  # killed BEs' starts, due be_down_s after the kill
        self.expected = {name: expected_rows(where) for name, (_sql, where) in QUERIES.items()}
        self.started = time.monotonic()

    # ---- one read of each kind ----
    def read_once(self, kind: str, query: str) -> Read:
        sql = QUERIES[query][0]
        read = Read(kind, query)
        began = time.monotonic()
        try:
            if kind == "client":
                seen = self._client(sql)
            elif kind == "connector":
                seen = None
                for attempt in range(1, 5):  # spark.task.maxFailures
                    read.attempts = attempt
                    try:
                        seen = _thrift_read(self.cluster.balancer.address, _plan(self.cluster.fe_url, sql, 60, 3),
                                            60, call_retries=3)
                        break
                    except (_Transient, httpx.HTTPError):
                        if attempt == 4:
                            raise
                        time.sleep(1.0)  # Spark's task retry comes after a moment
            elif kind == "flink":
                seen = _thrift_read(self.cluster.balancer.address, _plan(self.cluster.fe_url, sql, 10, 1), 1.0,
                                    call_retries=0)
            else:
                seen = self._mysql(sql)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and classified
            read.outcome, read.error = "failed", f"{type(exc).__name__}: {str(exc)[:300]}"
            read.retryable = self._retryable(exc)
        else:
            expected = self.expected[query]
            if seen != expected:
                read.outcome = "wrong"
                read.detail = {"lost": sum((expected - seen).values()), "extra": sum((seen - expected).values())}
        read.seconds = time.monotonic() - began
        return read

    def _client(self, sql: str) -> Counter:
        from starscan.client import StarscanClient

        table = StarscanClient(self.cluster.fe_url, timeout_s=30).read("chaos", "events", sql)
        return Counter(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))

    def _mysql(self, sql: str) -> Counter:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.cluster.fe_query, user="root", password="",
                               connect_timeout=10, read_timeout=60)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return Counter((int(i), str(v)) for i, v in cur.fetchall())
        finally:
            conn.close()

    @staticmethod
    def _retryable(exc: BaseException) -> bool:
        from starscan.client import NetworkError

        # The client's NetworkError is its class for a lost BE or scanner, a busy or
        # restarting server and a time-out (SERVICE_UNAVAILABLE, NOT_FOUND at get_next,
        # TIMEOUT, CANCELLED from a BE that names no kind).
        if isinstance(exc, (_Transient, httpx.HTTPError, NetworkError, ConnectionError, TimeoutError)):
            return True
        try:
            import pymysql

            if isinstance(exc, pymysql.err.OperationalError):  # the FE's port away: connect again
                return True
        except ImportError:
            pass
        return False

    def reader(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
            read = self.read_once(kind, "small" if kind == "mysql" else rng.choice(THRIFT_QUERIES))
            with self.lock:
                self.reads.append(read)
            if read.outcome != "ok":
                log(f"{read.kind} {read.query}: {read.outcome} {read.error or read.detail}")
                self.stop.wait(1.0)  # a failed reader tries again after a moment, as a job would

    # ---- faults ----
    def _jvms(self, node: Node) -> list[psutil.Process]:
        if not node.alive():
            return []
        return [p for p in psutil.Process(node.proc.pid).children(recursive=True) if "java" in p.name()]

    def inject(self, rng: random.Random, fault: str) -> None:
        cluster = self.cluster
        hit = ""
        if fault == "worker":
            workers = [p for be in cluster.bes for jvm in self._jvms(be) for p in jvm.children(recursive=True)
                       if "python" in p.name()]
            # A worker forked for a task (children of Spark's daemon), not the daemon itself.
            forked = [p for p in workers if p.ppid() in {w.pid for w in workers}]
            victims = forked or workers
            if victims:
                victim = rng.choice(victims)
                hit = f"python pid {victim.pid}"
                victim.kill()
        elif fault == "jvm":
            live = [be for be in cluster.bes if self._jvms(be)]
            if live:
                be = rng.choice(live)
                for p in self._jvms(be):
                    p.kill()
                hit = be.name
        elif fault == "be":
            live = [be for be in cluster.bes if be.alive()]
            if len(live) == 2:
                be = rng.choice(live)
                be.kill()
                hit = be.name
                restart = threading.Timer(self.args.be_down_s, be.start)
                self.restarts.append(restart)
                restart.start()
        else:
            cluster.fe.kill()
            cluster.fe.start()
            hit = "fe"
        with self.lock:
            self.faults.append((time.monotonic() - self.started, fault, hit or "(nothing to hit)"))
        log(f"fault {fault}: {hit or 'nothing to hit'}")

    def faulter(self) -> None:
        """A fault every ``fault_every`` s on average: drawn by weight, or ``faults`` in turn."""
        rng = random.Random(self.args.seed)
        n = 0
        while not self.stop.wait(rng.uniform(0.5, 1.5) * self.args.fault_every):
            order = self.args.faults
            self.inject(rng, order[n % len(order)] if order else rng.choices(FAULTS, FAULT_WEIGHTS)[0])
            n += 1

    def run(self) -> dict:
        threads = [threading.Thread(target=self.reader, args=(self.args.seed * 1000 + i,), daemon=True)
                   for i in range(self.args.readers)]
        faulter = threading.Thread(target=self.faulter, daemon=True)
        for t in (*threads, faulter):
            t.start()
        self.stop.wait(self.args.minutes * 60)
        self.stop.set()
        faulter.join(30)
        for t in threads:
            t.join(300)
        # A BE killed near the end would otherwise start after the cluster stopped, and outlive it.
        for restart in self.restarts:
            restart.cancel()
            restart.join(120)
        hung = sum(t.is_alive() for t in threads)
        return {"hung": hung, "wall": time.monotonic() - self.started}

    def summary(self) -> dict:
        by_kind: dict[str, Counter] = {}
        for r in self.reads:
            by_kind.setdefault(r.kind, Counter())[r.outcome] += 1
        failed = [r for r in self.reads if r.outcome == "failed"]
        return {
            "reads": len(self.reads),
            "ok": sum(r.outcome == "ok" for r in self.reads),
            "failed": len(failed),
            "failed_unclassified": sum(not r.retryable for r in failed),
            "wrong": sum(r.outcome == "wrong" for r in self.reads),
            "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
            "faults": Counter(f for _t, f, hit in self.faults if not hit.startswith("(")),
            "errors": Counter(r.error.split(":")[0] + ": " + r.error.split(": ", 2)[-1][:80] for r in failed),
        }


def run(args) -> tuple[dict, dict, float]:
    """The soak on a cluster of its own in a temporary folder: (summary, run result, cluster
    start seconds)."""
    with tempfile.TemporaryDirectory(prefix="starscan-chaos-") as tmp:
        root = Path(args.root) if getattr(args, "root", None) else Path(tmp)
        write_table(root)
        cluster = Cluster(root)
        began = time.monotonic()
        try:
            cluster.start()
            start_s = time.monotonic() - began
            soak = Soak(args, cluster)
            result = soak.run()
        finally:
            cluster.stop()
        return soak.summary(), result, start_s

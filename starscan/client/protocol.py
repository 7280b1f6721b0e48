"""A small starscan/StarRocks reader: plan over HTTP, then open / get_next... / close.

Used by the tests, the benchmarks and `starscan scan`. It behaves like the StarRocks Spark
connector: tablets grouped per BE, one scanner per group, offsets advanced by the rows
received, eos ends a scanner, close always sent.
"""

from __future__ import annotations

import functools
import json
import logging
import ssl
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import pyarrow as pa

from starscan.client.errors import (
    FailoverMismatch,
    NetworkError,
    ReadError,
    ScanIntegrityError,
    ServerError,
    from_http,
    from_reply,
    is_lost,
)
from starscan.client.fe import FrontEnd, table_path
from starscan.core import thrift_defs
from starscan.core.protocol_extensions import (
    EOS_ROWS_PREFIX,
    EOS_ROWS_PROPERTY,
    ERROR_KIND_PROPERTY,
    ORDERED_ACK,
    ORDERED_PROPERTY,
)
from starscan.core.thrift_defs import protocol_errors, transport_errors

if TYPE_CHECKING:
    from thriftpy2.thrift import TClient


#: A scanner's failover to the next routing is told at WARNING (as fe.py tells the FE's
#: retries): the read pauses, and says why.
log = logging.getLogger(__name__)


class _BackendLost(Exception):
    """The BE a scanner was on is gone (its connection fails, or it no longer knows the
    scanner): the scanner may go on on the tablets' next routing. ``error`` is what the
    read raises when it cannot."""

    def __init__(self, error: ReadError):
        super().__init__(str(error))
        self.error = error


#: The first pause before a scanner is opened on the next routing; it doubles up to the max.
FAILOVER_PAUSE_S = 0.2
FAILOVER_PAUSE_MAX_S = 5.0


@dataclass(frozen=True)
class Followed:
    """One step of ``StarscanClient.follow``: the rows appended after ``since`` (None: the
    whole table) up to ``version``."""

    since: int | None
    version: int
    rows: pa.Table


def _unreachable(endpoint: str, tablets: list[int], call: str, exc: BaseException) -> NetworkError:
    """A BE connection's failure (past its retries) as the client's error."""
    named = f"{tablets[:3]}{'...' if len(tablets) > 3 else ''}"
    return NetworkError(f"the BE at {endpoint} (tablets {named}) cannot be reached: {type(exc).__name__}: {exc}",
                        call=call)


def _not_the_protocol(endpoint: str, call: str, exc: BaseException) -> ServerError:
    """A BE's answer that is not the protocol's (an exception message, bytes thriftpy2 cannot
    read, rows that are not Arrow IPC: another service at the address, or a broken one) as
    the client's error."""
    return ServerError(f"{call}: the BE at {endpoint} did not answer as the protocol says: {type(exc).__name__}: {exc}",
                       call=call)


@dataclass
class ScanStats:
    rows: int = 0
    batches: int = 0
    bytes: int = 0
    scanners: int = 0
    first_batch_s: float | None = None
    columns: list[tuple[str, int]] = field(default_factory=list)
    retries: int = 0        # calls repeated on a new connection after the connection failed
    failovers: int = 0      # scanners opened again on the next routing after their BE was lost
    verified: int = 0       # scanners whose end-of-scan row count the server reported and matched


def _answered(conn: _Connection, endpoint: str, tablets: list[int], call: str, request: Any) -> Any:
    """The BE's accepted answer to ``call``: _BackendLost when the BE is lost (unreachable, or
    a status that says so), the BE's refusal as its error, a reply that is not the protocol's
    as that."""
    try:
        res = conn.call(call, request)
    except transport_errors() as exc:
        raise _BackendLost(_unreachable(endpoint, tablets, call, exc)) from None
    except protocol_errors() as exc:
        raise _not_the_protocol(endpoint, call, exc) from None
    if res.status.status_code != thrift_defs.wire.TStatusCode.OK:
        error = from_reply(call, res.status)
        raise _BackendLost(error) if is_lost(call, res.status) else error
    return res


def _past(batches: Iterator[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """``batches`` without their first ``skip`` rows (handed out before a failover)."""
    seen = 0
    for batch in batches:
        seen += batch.num_rows
        if seen <= skip:
            continue
        yield batch if seen - batch.num_rows >= skip else batch.slice(skip - (seen - batch.num_rows))


def _verify_eos(st: Any, context_id: str, received: int, stats: ScanStats) -> None:
    """Check the opt-in row count in the eos reply (absent from StarRocks and older servers)."""
    for msg in st.error_msgs or []:
        if msg.startswith(EOS_ROWS_PREFIX):
            reported = int(msg[len(EOS_ROWS_PREFIX):])
            if reported != received:
                raise ScanIntegrityError(context_id, received, reported)
            stats.verified += 1
            return


class _Connection:
    """One BE connection that is re-opened when it fails; calls are repeated as they were."""

    def __init__(self, host: str, port: int, timeout_s: float, retries: int, stats: ScanStats,
                 ssl_context: ssl.SSLContext | None = None, connect_timeout_s: float | None = None):
        self.host, self.port, self.timeout_s, self.retries, self.stats = host, port, timeout_s, retries, stats
        self.ssl_context = ssl_context
        self.connect_timeout_s = connect_timeout_s
        self.client: TClient | None = None

    def call(self, method: str, params: Any, retries: int | None = None) -> Any:
        attempts = (self.retries if retries is None else retries) + 1
        for attempt in range(attempts):
            try:
                if self.client is None:
                    self.client = thrift_client(self.host, self.port, self.timeout_s, self.ssl_context,
                                                self.connect_timeout_s)
                return getattr(self.client, method)(params)
            except transport_errors():
                self.close()
                if attempt + 1 >= attempts:
                    raise
                self.stats.retries += 1
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self.client = None


_THRIFT_IMPORTS = threading.Lock()
_thrift: tuple[Any, Any, Any] | None = None


def _thrift_parts() -> tuple[Any, Any, Any]:
    """thriftpy2's client parts, imported on first use by one thread at a time: threads
    importing its modules at once (a reader's first calls come from several) could meet
    Python's import deadlock check on thriftpy2's circular imports (seen once in ~10 runs of
    four reader threads: ``_DeadlockError ... thriftpy2.transport.cybase``)."""
    global _thrift
    with _THRIFT_IMPORTS:
        if _thrift is None:
            # The IDL first: its loader imports thriftpy2 under its own lock, which a thread
            # building a call's arguments may hold; after it, no other import of thriftpy2 runs.
            thrift_defs.wire  # noqa: B018
            from thriftpy2.protocol.binary import TBinaryProtocolFactory  # not the package's name: the Cython one
            from thriftpy2.thrift import TClient
            from thriftpy2.transport import (
                TSocket,
                TSSLSocket,
                TTransportException,  # noqa: F401  (transport_errors)
            )

            from starscan.client.transport import ArrowReadTransportFactory

            def make_client(service: Any, host: str, port: int, timeout_ms: int, connect_timeout_ms: int,
                            ssl_context: ssl.SSLContext | None) -> Any:
                """thriftpy2's ``make_client``, with a time limit of its own for connecting
                (thriftpy2's parts are untyped)."""
                ssl_socket: Any = TSSLSocket
                plain_socket: Any = TSocket
                protocols: Any = TBinaryProtocolFactory
                if ssl_context is not None:
                    sock = ssl_socket(host, port, socket_timeout=timeout_ms, connect_timeout=connect_timeout_ms,
                                      ssl_context=ssl_context)
                else:
                    sock = plain_socket(host, port, socket_timeout=timeout_ms, connect_timeout=connect_timeout_ms)
                transport = ArrowReadTransportFactory().get_transport(sock)
                protocol = protocols().get_protocol(transport)
                transport.open()
                return TClient(service, protocol)

            _thrift = (make_client, TBinaryProtocolFactory, ArrowReadTransportFactory)
    return _thrift


def thrift_client(host: str, port: int, timeout_s: float = 60.0, ssl_context: ssl.SSLContext | None = None,
                  connect_timeout_s: float | None = None) -> TClient:
    """A thriftpy2 client of the BE; ``ssl_context`` for a BE with `be_tls` on. A ``get_next``
    reply's ``rows`` of 64 KiB or more are a ``pyarrow.Buffer`` (bytes-like: ``len``, ``==``,
    slices, ``bytes()``, ``pa.ipc.open_stream``; not ``hash`` or ``+``), smaller ones ``bytes``."""
    make_client, _, _ = _thrift_parts()
    # The pure-Python protocol over a transport that receives a reply's rows into Arrow's
    # pool (starscan/client/transport.py); thriftpy2's parts are untyped.
    return cast("TClient", make_client(
        thrift_defs.wire.TStarrocksExternalService, host, port, int(timeout_s * 1000),
        int((connect_timeout_s if connect_timeout_s is not None else timeout_s) * 1000), ssl_context))


@functools.cache
def _reads_row_deletes() -> bool:
    """Whether this process has what the reader needs to apply row-level deletes (Delta's
    roaring bitmaps, the cache of Iceberg's equality keys): ``pip install
    'starscan[lakehouse]'``. Without them a direct plan gives such tablets to the BE."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("pyroaring", "cachetools"))


class StarscanClient:
    """``retries``: how often a BE call is repeated on a new connection after a connection
    failure (the same offset, so no row is lost or doubled). ``failovers``: how often a
    scanner whose BE is lost is opened again on its tablets' next routing (as the Spark
    connector's ``starrocks.request.retries``; 0: never, and the scan's rows come in any
    order). ``be_host_mapping``: routing ``host:port`` -> the address to connect to (as
    Flink's ``scan.be-host-mapping-list``)."""

    def __init__(self, fe: str, user: str = "root", password: str = "", timeout_s: float = 60.0,
                 retries: int = 3, be_host_mapping: dict[str, str] | None = None,
                 ssl_context: ssl.SSLContext | None = None, token: str | None = None, failovers: int = 3,
                 connect_timeout_s: float | None = None):
        """``ssl_context``: TLS for both ports (an ``https://`` FE and a `be_tls` BE);
        ``token``: a bearer token for the FE instead of the password. ``timeout_s``: the
        longest wait for an answer; ``connect_timeout_s`` for a connection to the FE or a BE
        (default: ``timeout_s``)."""
        self._fe = FrontEnd(fe, user, password, timeout_s, retries, ssl_context, token, connect_timeout_s)
        self.fe = self._fe.url
        self.user = user
        self.password = password
        self.ssl_context = ssl_context
        self.token = token
        self.timeout_s = timeout_s
        self.connect_timeout_s = timeout_s if connect_timeout_s is None else connect_timeout_s
        self.retries = retries
        self.failovers = failovers
        self.be_host_mapping = dict(be_host_mapping or {})

    def plan(self, db: str, table: str, sql: str, since_version: int | None = None,
             consumer: str | None = None, cursor: bool = False, direct: bool = False) -> dict[str, Any]:
        """The plan; with ``since_version``, of the rows appended after that version only (the
        answer's ``version`` is the cursor for the next call); with ``consumer``, from that
        consumer's committed version (``commit`` moves it); ``cursor``: the answer carries the
        ``version`` also when the whole table is read; ``direct``: a direct plan, naming each
        tablet's files (starscan.arrow.direct; needs the DIRECT_READ grant)."""
        request: dict[str, Any] = {"sql": sql}
        if direct:
            request["direct"] = True
            if _reads_row_deletes():
                request["direct_row_deletes"] = True  # this client's reader leaves deleted rows out
        if since_version is not None or cursor:
            request["since_version"] = since_version
        if consumer is not None:
            request["consumer"] = consumer
        body: dict[str, Any] = self._fe.call(
            "POST", f"{table_path(db, table)}/_query_plan", "_query_plan", content=json.dumps(request),
            headers={"Content-Type": "application/json; charset=UTF-8"})
        if body.get("status") != 200:  # a StarRocks FE's refusal in a 200 answer
            status = body.get("status")  # a StarRocks FE's code for the refusal, where it gives one
            raise from_http(status if isinstance(status, int) and status >= 400 else 400, json.dumps(body), None,
                            "_query_plan")
        return body

    def schema(self, db: str, table: str) -> list[dict[str, Any]]:
        """The table's columns as `_schema` describes them (name, StarRocks type, precision
        and scale of decimals), in table order."""
        properties: list[dict[str, Any]] = self._fe.call("GET", f"{table_path(db, table)}/_schema",
                                                         "_schema").get("properties", [])
        return properties

    def commit(self, db: str, table: str, consumer: str, version: int) -> dict[str, Any]:
        """Record ``version`` (a plan's ``"version"``) as the consumer's position: call it once
        the rows of that plan are handled. Returns the server's answer (consumer, version)."""
        answer: dict[str, Any] = self._fe.call(
            "POST", f"{table_path(db, table)}/_consumers/{quote(consumer, safe='')}/commit", "commit",
            content=json.dumps({"version": version}), headers={"Content-Type": "application/json"})
        return answer

    def position(self, db: str, table: str, consumer: str) -> int | None:
        """The consumer's committed version (None: nothing committed yet)."""
        version = self._fe.call("GET", f"{table_path(db, table)}/_consumers/{quote(consumer, safe='')}",
                                "position").get("version")
        return None if version is None else int(version)

    def follow(self, db: str, table: str, sql: str, consumer: str | None = None, poll_s: float = 5.0,
               stop_when_idle: bool = False, checkpoint: int | None = None,
               max_poll_s: float = 60.0) -> Iterator[Followed]:
        """What was appended to ``db.table``, one ``Followed`` (the rows, and the version range
        they cover) per step, from ``consumer``'s committed version, or from ``checkpoint``.

        Two ways to be exactly once:
        - the server keeps the position: with ``consumer``, each step's version is committed
          when the caller asks for the next step, i.e. after its handler returned;
        - the caller keeps it (the Doris way): it stores ``Followed.version`` in the same
          transaction as its output and passes the last one stored back as ``checkpoint``
          when it starts again; a ``consumer`` is then optional (its position shows the lag).

        While nothing is new it polls, waiting ``poll_s`` seconds and twice as long each time
        up to ``max_poll_s``; ``stop_when_idle``: return at the first empty poll instead."""
        since = checkpoint
        delay = poll_s
        while True:
            plan = self.plan(db, table, sql, since_version=since, consumer=consumer, cursor=consumer is None)
            version = int(plan["version"])
            if plan["partitions"]:
                rows = self.read(db, table, sql, plan=plan)
                yield Followed(plan.get("since_version"), version, rows)
            if consumer is not None:
                self.commit(db, table, consumer, version)  # also when nothing was new: idempotent
            if checkpoint is not None or consumer is None:
                since = version  # the caller's own cursor moves on
            if plan["partitions"]:
                delay = poll_s
                continue
            if stop_when_idle:
                return
            time.sleep(delay)
            delay = min(delay * 2, max(max_poll_s, poll_s))

    def batches(self, db: str, table: str, sql: str, batch_size: int = 4096, stats: ScanStats | None = None,
                keep_alive_min: int | None = None, mem_limit: int | None = None, query_timeout: int | None = None,
                since_version: int | None = None, plan: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
        """The plan's rows. Tablets are read on their first routing, those sharing it by one
        scanner; when that BE is lost (its connection fails past ``retries``, or it no longer
        knows the scanner), the scanner is opened again with the same plan on the tablets'
        next routing and the rows already handed out are skipped, at most ``failovers``
        times per scanner with a growing pause. The scanners ask for rows in a fixed order
        (``ORDERED_PROPERTY``) so that the skip is exact: no row is lost or handed out twice."""
        started = time.perf_counter()
        stats = stats if stats is not None else ScanStats()
        plan = plan if plan is not None else self.plan(db, table, sql, since_version)
        groups: dict[tuple[str, ...], list[int]] = {}
        for tablet, info in plan["partitions"].items():
            groups.setdefault(tuple(info["routings"]), []).append(int(tablet))
        for routings, tablets in groups.items():
            for batch in self.scan_group(db, table, plan, list(routings), tablets, batch_size, stats, keep_alive_min,
                                         mem_limit, query_timeout):
                if stats.first_batch_s is None:
                    stats.first_batch_s = time.perf_counter() - started
                yield batch

    def scan_group(self, db: str, table: str, plan: dict[str, Any], routings: list[str], tablets: list[int],
                   batch_size: int, stats: ScanStats, keep_alive_min: int | None = None, mem_limit: int | None = None,
                   query_timeout: int | None = None, first: int = 0) -> Generator[pa.RecordBatch, None, None]:
        """The rows of ``tablets`` (which share ``routings``) from one scanner on
        ``routings[first]``, opened again on the next routing when that BE is lost (see
        ``batches``)."""
        handed = 0
        lost = 0
        while True:
            endpoint = routings[(first + lost) % len(routings)]
            ordered: list[bool] = []  # whether the BE said the rows come in a fixed order
            try:
                for batch in self._scan_on(endpoint, db, table, plan, tablets, batch_size, stats, keep_alive_min,
                                           mem_limit, query_timeout, skip=handed, ordered=ordered):
                    handed += batch.num_rows
                    stats.rows += batch.num_rows
                    stats.batches += 1
                    # The batch's buffers: a reply's batch owns exactly its own (the same
                    # figure as nbytes, which walks every array: ~40x the cost, 5-10 % of
                    # the client's CPU in a full scan of 4,096-row batches).
                    stats.bytes += batch.get_total_buffer_size()
                    yield batch
                return
            except _BackendLost as exc:
                lost += 1
                if lost > self.failovers:
                    raise exc.error from None
                if handed and not all(ordered):
                    # A server that does not keep the order (StarRocks ignores the property)
                    # cannot be resumed by skipping rows: they could be other rows.
                    raise exc.error from None
                stats.failovers += 1
                pause = min(FAILOVER_PAUSE_S * 2 ** (lost - 1), FAILOVER_PAUSE_MAX_S)
                log.warning("%s; the scanner is opened again on the next routing in %.1f s, its rows so far skipped "
                            "(failover %d of %d)", exc.error.message, pause, lost, self.failovers)
                time.sleep(pause)

    def _scan_on(self, endpoint: str, db: str, table: str, plan: dict[str, Any], tablets: list[int], batch_size: int,
                 stats: ScanStats, keep_alive_min: int | None, mem_limit: int | None, query_timeout: int | None,
                 skip: int, ordered: list[bool] | None = None) -> Iterator[pa.RecordBatch]:
        """One scanner on one BE, without its first ``skip`` rows; _BackendLost when the BE is.
        ``ordered`` gets whether the BE acknowledged ``ORDERED_PROPERTY``."""
        host, port = self.be_host_mapping.get(endpoint, endpoint).split(":")
        conn = _Connection(host, int(port), self.timeout_s, self.retries, stats, self.ssl_context, self.connect_timeout_s)
        try:
            opened = self._open(conn, endpoint, db, table, plan, tablets, batch_size, keep_alive_min, mem_limit,
                                query_timeout)
            stats.scanners += 1
            stats.columns = [(c.name, c.type) for c in opened.selected_columns]
            acknowledged = ORDERED_ACK in (opened.status.error_msgs or [])
            if ordered is not None:
                ordered.append(acknowledged)
            if skip and not acknowledged:
                raise ServerError(f"open_scanner: the BE at {endpoint} does not keep rows in a fixed order, so the "
                                  f"{skip} rows already read cannot be skipped exactly; read the table again",
                                  call="open_scanner")
            try:
                yield from _past(self._replies(conn, endpoint, tablets, opened.context_id, stats, skip), skip)
            finally:
                try:
                    conn.call("close_scanner", thrift_defs.wire.TScanCloseParams(context_id=opened.context_id), retries=0)
                except Exception:  # noqa: BLE001 - best-effort close after a failure
                    pass
        finally:
            conn.close()

    def _open(self, conn: _Connection, endpoint: str, db: str, table: str, plan: dict[str, Any], tablets: list[int],
              batch_size: int, keep_alive_min: int | None, mem_limit: int | None, query_timeout: int | None) -> Any:
        """``open_scanner``'s accepted answer; _BackendLost when the BE is lost, the BE's
        refusal otherwise."""
        properties = {EOS_ROWS_PROPERTY: "true", ERROR_KIND_PROPERTY: "true"}
        if self.failovers > 0:
            properties[ORDERED_PROPERTY] = "true"
        return _answered(conn, endpoint, tablets, "open_scanner", thrift_defs.wire.TScanOpenParams(
            cluster="default_cluster", database=db, table=table, tablet_ids=tablets,
            opaqued_query_plan=plan["opaqued_query_plan"], batch_size=batch_size,
            user=None if self.token else self.user, passwd=None if self.token else self.password,
            keep_alive_min=keep_alive_min, mem_limit=mem_limit, query_timeout=query_timeout,
            properties=properties,
        ))

    def _replies(self, conn: _Connection, endpoint: str, tablets: list[int], context_id: str, stats: ScanStats,
                 skip: int) -> Iterator[pa.RecordBatch]:
        """Every batch of the scanner's ``get_next`` replies, until eos (checked against the
        rows the BE says it sent, and against ``skip``: a BE that has fewer rows than were
        handed out before a failover is a mismatch)."""
        offset = 0
        while True:
            # A dropped connection is re-opened and the same offset asked again: the
            # server answers a repeated offset with the same batch (docs/architecture.md).
            res = _answered(conn, endpoint, tablets, "get_next",
                            thrift_defs.wire.TScanNextBatchParams(context_id=context_id, offset=offset))
            if res.eos:
                _verify_eos(res.status, context_id, offset, stats)
                if offset < skip:  # this BE's scan has fewer rows than were handed out before
                    raise FailoverMismatch(context_id, skip, offset)
                return
            try:
                batches = list(pa.ipc.open_stream(res.rows))  # a reply's batches, read in place
            except (pa.ArrowException, TypeError) as exc:
                raise _not_the_protocol(endpoint, "get_next", exc) from None
            for batch in batches:
                offset += batch.num_rows
                yield batch

    def read(self, db: str, table: str, sql: str, batch_size: int = 4096, **kwargs: Any) -> pa.Table:
        batches = list(self.batches(db, table, sql, batch_size, **kwargs))
        if not batches:
            return pa.table({})
        return pa.Table.from_batches(batches)

"""``connect()`` and the parallel reader: a table's tablets read by several scanners at once.

A read plans once on the FE, then splits the plan's tablets into work items (the tablets
sharing one routing list, at most ``request_tablet_size`` per scanner) and reads them on
``max_workers`` threads. Each item goes to the least loaded of its routings (the BE with
the fewest scanners of this read open), and when that BE is lost the scanner goes on on the
next routing without repeating a row (starscan.client.protocol, ``scan_group``). Batches
pass through a queue of ``2 x max_workers`` batches to the caller, so a read holds at most
that many batches besides the ones being received, whatever the table's size. With
``max_workers=1`` the items are read one after another in the caller's own thread.

With ``direct="auto"`` (or True) the read asks for a direct plan (starscan.arrow.direct; the user
needs the DIRECT_READ grant) and reads the tablets it may from their files itself
(starscan.client.direct), the others through the BE; the rows are the same either way.

With ``native_types=True`` the wire types StarRocks uses for dates and large integers become
Arrow's own: DATE text -> date32, DATETIME text -> timestamp[us] (the server's wall clock, no
time zone), LARGEINT text -> decimal128(38, 0). Values inside nested columns keep the wire
forms.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from starscan.client.errors import (
    DirectReadDenied,
    DirectReadError,
    OptionError,
    QueryError,
)
from starscan.client.options import ReadOptions
from starscan.client.protocol import ScanStats, StarscanClient
from starscan.core.interleave import Interleaved

if TYPE_CHECKING:  # the direct reader loads starscan.storage.stores: only when a read uses it
    from starscan.client.direct import DirectReader
    from starscan.storage.stores import StorageOptions

DATE, DATETIME, LARGEINT = 9, 10, 14
Direct = bool | str  # False, True or "auto"
#: A work item: (routings, tablets) read by one BE scanner, or one direct tablet's id with its
#: ``partitions`` entry as the third element.
Item = tuple[list[str], list[int], dict[str, Any] | None]

# `_schema` type names -> the wire's Arrow types (an empty result's columns)
_WIRE_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(), "BIGINT": pa.int64(),
    "LARGEINT": pa.utf8(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "DATE": pa.utf8(), "DATETIME": pa.utf8(),
    "CHAR": pa.utf8(), "VARCHAR": pa.utf8(), "STRING": pa.utf8(), "BINARY": pa.binary(), "VARBINARY": pa.binary(),
}
_CODES = {"DATE": DATE, "DATETIME": DATETIME, "LARGEINT": LARGEINT}


def connect(fe: str, user: str = "root", password: str = "", *, max_workers: int = 4, native_types: bool = False,
            be_host_mapping: dict[str, str] | None = None, ssl_context: Any = None, token: str | None = None,
            options: dict[str, Any] | None = None, direct: Direct = False,
            storage: StorageOptions | dict[str, Any] | None = None, **keyword_options: Any) -> Connection:
    """A connection to the FE at ``fe`` (``host:port`` or a URL). Read options go in
    ``options`` by their StarRocks names or as keywords (``batch_size=8192``); see
    starscan.client.options. ``direct``: the reads' default (see ``read_batches``);
    ``storage``: how this reader reaches an S3 store for direct reads (endpoint, region,
    keys: ``StorageOptions`` or a dict of its fields; unset, the AWS environment)."""
    if max_workers < 1:
        raise OptionError(f"max_workers must be at least 1, not {max_workers}")
    read_options = ReadOptions.of({**(options or {}), **keyword_options})
    conn = Connection(fe, user, password, read_options, max_workers, native_types, be_host_mapping, ssl_context, token)
    conn.direct = _direct_mode(direct)
    if storage is not None:
        from starscan.client.direct import storage_options

        conn.storage = storage_options(storage)
    return conn


def _direct_mode(value: Direct) -> Direct:
    if not (isinstance(value, bool) or value == "auto"):  # 0 and 1 are not modes
        raise OptionError(f'direct must be True, False or "auto", not {value!r}')
    return value


class Connection:
    def __init__(self, fe: str, user: str, password: str, options: ReadOptions, max_workers: int, native_types: bool,
                 be_host_mapping: dict[str, str] | None, ssl_context: Any, token: str | None):
        self.options = options
        self.max_workers = max_workers
        self.native_types = native_types
        self.client = StarscanClient(fe, user, password, timeout_s=options.request_read_timeout_ms / 1000,
                                     retries=options.request_retries, be_host_mapping=be_host_mapping,
                                     ssl_context=ssl_context, token=token, failovers=options.request_retries,
                                     connect_timeout_s=options.request_connect_timeout_ms / 1000)
        self._loads: dict[str, int] = {}
        self._lock = threading.Lock()
        self.failovers = 0  # scanners moved to another routing after their BE was lost
        self.direct: Direct = False
        self.storage: StorageOptions | None = None
        self.direct_tablets = 0    # tablets read from their files by this connection
        self.fallback_tablets = 0  # tablets of direct plans read through the BE instead
        self.fallbacks: deque[str] = deque(maxlen=100)  # why (the latest 100)
        self._no_direct: set[tuple[str, str]] = set()  # tables whose direct plans this user was refused

    # ---- reading ----
    def read_arrow(self, table: str, columns: list[str] | None = None, where: str | None = None,
                   since_version: int | None = None, native_types: bool | None = None,
                   direct: Direct | None = None) -> pa.Table:
        """The rows of ``table`` (``db.table``) as one Arrow table."""
        return self.read_batches(table, columns, where, since_version, native_types, direct).read_all()

    def read_batches(self, table: str, columns: list[str] | None = None, where: str | None = None,
                     since_version: int | None = None, native_types: bool | None = None,
                     direct: Direct | None = None) -> pa.RecordBatchReader:
        """The rows of ``table`` as a stream of record batches, read in parallel.

        ``direct`` (default: the connection's): False reads through the BEs. "auto" asks for
        a direct plan and reads each tablet the plan names files for from those files, the
        rest (and any whose file changed or cannot be reached) through the BEs; without the
        DIRECT_READ grant it reads through the BEs. True reads every tablet from its files,
        or fails (DirectReadError; DirectReadDenied without the grant)."""
        db, name = _split(table)
        sql = select_sql(db, name, columns, where)
        mode = self.direct if direct is None else _direct_mode(direct)
        plan = self._plan_for(db, name, sql, since_version, mode)
        return self.read_planned(db, name, plan, native_types, mode, columns)

    def read_planned(self, db: str, table: str, plan: dict[str, Any], native_types: bool | None = None,
                     direct: Direct | None = None, columns: list[str] | None = None) -> pa.RecordBatchReader:
        """The rows of a plan made earlier (``plan``: the `_query_plan` answer), as
        ``read_batches`` reads them; ``direct`` decides whether tablets the plan names files
        for are read from those files."""
        native = self.native_types if native_types is None else native_types
        mode = self.direct if direct is None else _direct_mode(direct)
        partitions = plan.get("partitions") or {}
        reader, why = self._direct_reader(plan, native) if mode else (None, None)
        refused = sorted({f"tablet {t} is not direct: {e.get('reason')}" for t, e in partitions.items()
                          if mode and e.get("direct") is False})
        if mode is True and partitions and (reader is None or refused):
            raise DirectReadError(f"{db}.{table} cannot be read directly: "
                                  f"{refused[0] if refused else why or 'the plan names no files (not a direct plan)'}")
        with self._lock:
            self.fallbacks.extend(refused + ([why] if why else []))
            self.fallback_tablets += sum(1 for e in partitions.values() if mode and e.get("direct") is False)
        items = work_items(plan, self.options.request_tablet_size, direct=reader is not None)
        stream = _Stream(self, db, table, plan, items, native, reader, mode)
        stream.start()
        try:
            first = stream.next()
            schema = first.schema if first is not None else self._empty_schema(db, table, columns, native)
        except BaseException:
            stream.stop()
            raise
        batches = stream.batches(first)
        # A reader dropped before it is read to the end stops the read (its scanners close).
        weakref.finalize(batches, stream.stop)
        return pa.RecordBatchReader.from_batches(schema, batches)

    def _direct_reader(self, plan: dict[str, Any], native: bool) -> tuple[DirectReader | None, str | None]:
        """The reader of a direct plan's files, or why there is none (no "direct" section,
        or one this client cannot read: the plan then reads through the BE)."""
        if not plan.get("direct"):
            return None, None
        from starscan.client.direct import DirectReader
        from starscan.core.errors import StarscanError

        try:
            direct_tablets = sum(1 for info in (plan.get("partitions") or {}).values() if info.get("direct"))
            return DirectReader(plan["direct"], self.storage, native, self.options.batch_size,
                                min(self.max_workers, max(1, direct_tablets))), None
        except StarscanError as exc:
            return None, f"the plan's direct section cannot be used: {exc.message}"

    def plan(self, db: str, table: str, sql: str, since_version: int | None = None, direct: bool = False) -> dict[str, Any]:
        return self.client.plan(db, table, sql, since_version, direct=direct)

    def _plan_for(self, db: str, table: str, sql: str, since_version: int | None, mode: Direct) -> dict[str, Any]:
        """The plan for a read in ``mode``: "auto" falls back to a plan without storage when
        this user may not read the table directly (once per table and connection)."""
        if mode is False or (mode == "auto" and (db, table) in self._no_direct):
            return self.plan(db, table, sql, since_version)
        try:
            return self.plan(db, table, sql, since_version, direct=True)
        except DirectReadDenied:
            if mode is True:
                raise
            with self._lock:
                self._no_direct.add((db, table))
            return self.plan(db, table, sql, since_version)

    def columns(self, db: str, table: str, names: list[str] | None = None) -> list[dict[str, Any]]:
        """`_schema`'s description of the named columns (all, in table order, when None)."""
        properties = self.client.schema(db, table)
        by_lower = {p["name"].lower(): p for p in properties}
        missing = [n for n in names or () if n.lower() not in by_lower]
        if missing:
            raise QueryError(f"unknown column {missing[0]!r} in {db}.{table}")
        return [by_lower[n.lower()] for n in names] if names else properties

    def scan(self, db: str, table: str, plan: dict[str, Any], routings: list[str], tablets: list[int],
             native: bool, first: int = 0) -> Iterator[pa.RecordBatch]:
        """The rows of ``tablets`` by one scanner on ``routings[first]``, moved to the next
        routing when that BE is lost; failures as this package's errors."""
        options = self.options
        stats = ScanStats()
        scan = self.client.scan_group(db, table, plan, routings, tablets, options.batch_size, stats,
                                      options.request_keep_alive_min, options.exec_mem_limit,
                                      options.request_query_timeout_s, first=first)
        types: dict[str, int] | None = None
        try:
            for batch in scan:
                if native:
                    types = types if types is not None else dict(stats.columns)  # known once the scanner opened
                    batch = to_native(batch, types)
                yield batch
        finally:
            scan.close()  # closes its scanner when the read stops early
            with self._lock:
                self.failovers += stats.failovers

    def _empty_schema(self, db: str, table: str, columns: list[str] | None, native: bool) -> pa.Schema:
        """An empty result's columns, from `_schema` (the wire types; nested columns as null)."""
        out = []
        for p in self.columns(db, table, columns):
            kind = str(p.get("type", "")).upper()
            if kind.startswith("DECIMAL"):
                arrow: pa.DataType = pa.decimal128(int(p.get("precision") or 38), int(p.get("scale") or 0))
            else:
                arrow = _WIRE_TYPES.get(kind, pa.null())
            if native and kind in _CODES:
                arrow = _native_type(_CODES[kind])
            out.append(pa.field(p["name"], arrow))
        return pa.schema(out)

    # ---- BE choice ----
    def _take(self, routings: list[str]) -> int:
        """The index of the least loaded routing (ties: the plan's order), now one busier."""
        with self._lock:
            best = min(range(len(routings)), key=lambda i: (self._loads.get(routings[i], 0), i))
            self._loads[routings[best]] = self._loads.get(routings[best], 0) + 1
            return best

    def _give_back(self, endpoint: str) -> None:
        with self._lock:
            self._loads[endpoint] = max(0, self._loads.get(endpoint, 0) - 1)


def _split(table: str) -> tuple[str, str]:
    db, dot, name = table.partition(".")
    if not dot or not db or not name:
        raise OptionError(f"table must be db.table, not {table!r}")
    return db, name


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def select_sql(db: str, table: str, columns: list[str] | None, where: str | None) -> str:
    cols = ", ".join(_quote(c) for c in columns) if columns else "*"
    return f"select {cols} from {_quote(db)}.{_quote(table)}" + (f" where {where}" if where else "")


def work_items(plan: dict[str, Any], tablet_size: int, direct: bool = False) -> list[Item]:
    """The plan's tablets as work items: (routings, tablets, None) for tablets sharing a
    routing list, at most ``tablet_size`` per item; with ``direct``, each tablet the plan
    names files for is an item of its own (routings, [tablet], its entry)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    out: list[Item] = []
    for tablet, info in plan["partitions"].items():
        if direct and info.get("direct"):
            out.append((list(info["routings"]), [int(tablet)], info))
        else:
            groups.setdefault(tuple(info["routings"]), []).append(int(tablet))
    return out + [(list(routings), tablets[i:i + tablet_size], None)
                  for routings, tablets in groups.items() for i in range(0, len(tablets), tablet_size)]


class _Stream:
    """The work items' batches: read on up to ``max_workers`` threads at once, handed out
    through one bounded queue (starscan.core.interleave: the first error of any item is
    raised before any further batch), or, with one worker, in the caller's thread.
    ``stop()`` ends every item (their scanners are closed) when the caller is done, fails,
    or drops the reader unread."""

    def __init__(self, conn: Connection, db: str, table: str, plan: dict[str, Any],
                 items: list[Item], native: bool, direct: DirectReader | None = None, mode: Direct = False):
        self.conn, self.db, self.table, self.plan, self.native = conn, db, table, plan, native
        self.items = items
        self.direct, self.mode = direct, mode
        self._stopped = threading.Event()
        self._pool: Interleaved[Item, pa.RecordBatch] | None = None  # max_workers > 1
        self._serial: Generator[pa.RecordBatch, None, None] | None = None  # max_workers == 1

    def start(self) -> None:
        if not self.items:
            return
        if self.conn.max_workers == 1:
            # One item at a time: read in the caller's thread, without a hand-off per batch
            # (a worker thread and a queue cost direct reads about a fifth of their rate).
            self._serial = self._serial_batches()
            return
        self._pool = Interleaved(iter(self.items), lambda item: self.item_batches(*item),
                                 min(self.conn.max_workers, len(self.items)), ahead=2, name="starscan-read")
        self._pool.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._pool is not None:
            self._pool.stop()

    def item_batches(self, routings: list[str], tablets: list[int],
                     direct: dict[str, Any] | None) -> Generator[pa.RecordBatch, None, None]:
        """One work item's batches: a direct tablet from its files (or, when it cannot be
        read there, through the BE), or a group of tablets by one BE scanner."""
        if direct is not None and self.direct is not None:
            from starscan.client.direct import Unreadable

            reason = None
            try:
                yield from self.direct.tablet(tablets[0], direct)
            except Unreadable as why:  # before the tablet's first row
                reason = str(why)
            if reason is None:
                with self.conn._lock:
                    self.conn.direct_tablets += 1
                return
            if self.mode is True:
                raise DirectReadError(f"tablet {tablets[0]} of {self.db}.{self.table} cannot be read directly: {reason}")
            with self.conn._lock:
                self.conn.fallbacks.append(reason)
                self.conn.fallback_tablets += 1
        conn = self.conn
        first = conn._take(routings)
        try:
            yield from conn.scan(self.db, self.table, self.plan, routings, tablets, self.native, first)
        finally:
            conn._give_back(routings[first])

    def _serial_batches(self) -> Generator[pa.RecordBatch, None, None]:
        for item in self.items:
            if self._stopped.is_set():
                return
            yield from self.item_batches(*item)

    def next(self) -> pa.RecordBatch | None:
        """The next batch, None at the end; the first error of any item is raised."""
        if self._serial is not None:
            return None if self._stopped.is_set() else next(self._serial, None)
        return self._pool.next() if self._pool is not None else None

    def batches(self, first: pa.RecordBatch | None) -> Iterator[pa.RecordBatch]:
        try:
            if first is None:
                return
            schema = first.schema
            yield first
            while (batch := self.next()) is not None:
                if batch.schema != schema:  # nullability can differ between scanners
                    batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
                yield batch
        finally:
            self.stop()
            if self._serial is not None:
                self._serial.close()


def _native_type(code: int) -> pa.DataType:
    return {DATE: pa.date32(), DATETIME: pa.timestamp("us"), LARGEINT: pa.decimal128(38, 0)}[code]


def to_native(batch: pa.RecordBatch, types: dict[str, int]) -> pa.RecordBatch:
    """DATE, DATETIME and LARGEINT columns (by their wire type code) as Arrow's own types."""
    arrays, fields = [], []
    for f, column in zip(batch.schema, batch.columns, strict=True):
        code = types.get(f.name)
        if code in (DATE, DATETIME, LARGEINT) and pa.types.is_string(f.type):
            if code == LARGEINT:
                digits = pc.utf8_length(pc.utf8_ltrim(column, characters="-"))
                if pc.any(pc.greater(digits, 38)).as_py():
                    raise QueryError(f"column {f.name}: a LARGEINT value has more than 38 digits and does not fit "
                                    "decimal128(38, 0); read it with native_types=False")
            column = pc.cast(column, _native_type(code))
            f = pa.field(f.name, column.type, f.nullable)
        arrays.append(column)
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))

"""`_query_plan` and `_schema`: checks in StarRocks' order, then the signed plan (the request's
body is read by planner/plan_requests.py)."""

from __future__ import annotations

import json
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from operator import attrgetter
from typing import Any

from cachetools import LRUCache
from pyspark.sql import types as T

from starscan import expr as E
from starscan.arrow.rebase import CalendarRules
from starscan.core.errors import BadRequest, SqlInvalid
from starscan.core.thrift_defs import plan as plan_idl
from starscan.planner import sql as sqlmod
from starscan.planner.be_membership import BeMembership
from starscan.planner.consumer_lag import ConsumerLag, consumer_lags
from starscan.planner.direct_plans import direct_plan
from starscan.planner.pruning import prune
from starscan.plans import codec as plan_codec
from starscan.plans.tablet_lists import TabletLists, digest_of, plan_tablets
from starscan.settings.config import Settings
from starscan.settings.runtime import LiveSettings
from starscan.spark.schemas import SchemaResolver
from starscan.spark.types import starrocks_type
from starscan.tables.catalog import TableSnapshot, Warehouse
from starscan.tables.consumers import ConsumerPositions
from starscan.tables.tablets import Tablet


@dataclass
class TabletParts:
    """What a plan says about its tablets: the packed list inline (``tablets``), or the
    table's whole list by ``digest`` with the planned ``tablet_ids``."""

    tablets: bytes
    digest: bytes | None
    tablet_ids: list[int] | None
    partitions_json: bytes


@dataclass(frozen=True)
class ResolvedColumns:
    by_lower: dict[str, T.StructField]
    table: str  # db.table, for messages
    unread: dict[str, str] = dataclass_field(default_factory=dict)  # lower-case name -> why it is not served

    def field(self, name: str) -> T.StructField:
        found = self.by_lower.get(name.lower())
        if found is None:
            why = self.unread.get(name.lower())
            raise SqlInvalid(why if why is not None else f"unknown column '{name}' in {self.table}")
        return found


AUDIT_SQL_CHARS = 2000
QUICK_INLINE_MAX_BYTES = 64 << 10  # a plan's inline tablet list signed on the FE's event loop, at most
QUICK_BODIES_MAX_BYTES = 32 << 20  # what the plan bodies answered on the event loop hold, at most
PRUNED_MAX = 64                    # pruning answers kept per table snapshot (one per predicate)
_EMPTY_ANSWER = b'{"status":200,"opaqued_query_plan":"","partitions":{}'


def _answer(encoded: str, partitions_json: bytes, tail: bytes) -> bytes:
    return b'{"status":200,"opaqued_query_plan":"' + encoded.encode("ascii") + b'","partitions":' + partitions_json + \
        tail + b"}"


@dataclass(frozen=True)
class ScanPlan:
    """A plain plan as the SQL fronts take it: the plan and its signed encoding (None and
    "" when no tablet is planned), each planned tablet's BEs, and the plan's columns."""

    plan: Any
    encoded: str
    routings: dict[int, list[str]]
    columns: list


@dataclass(frozen=True)
class _Made:
    snap: TableSnapshot
    body: _PlanBody
    tablets: list[Tablet]
    plan: Any
    encoded: str
    tail: bytes


@dataclass(frozen=True)
class _PlanBody:
    """What every plain plan of one statement over one table version says alike, as planned
    under these settings and live BEs; each plan adds its query id, user and times, and is
    signed (``QueryPlanner._signed``). It names its snapshot without keeping it alive: a body
    answers only while its snapshot is the table's listing now, and a snapshot the listing
    cache moved on from (a million files' is hundreds of MB) is let go."""

    snap: weakref.ref[TableSnapshot]
    settings: Settings
    live: tuple[str, ...] | None
    sql: str
    columns: list
    predicate: Any                   # flattened, or None
    tablets: int
    parts: TabletParts | None        # None: no tablet planned
    schema_json: str
    shash: int
    predicate_expr: Any = None       # as parsed (direct plans name the files it keeps)
    size: int = dataclass_field(init=False)  # bytes it holds, about (its answer's tablets)

    def __post_init__(self) -> None:
        held = len(self.parts.partitions_json) + len(self.parts.tablets) if self.parts is not None else 0
        object.__setattr__(self, "size", 1024 + held)

    @property
    def partitions_json(self) -> bytes:
        return self.parts.partitions_json if self.parts is not None else b"{}"


class QueryPlanner:
    def __init__(self, settings: Settings | LiveSettings, warehouse: Warehouse, schemas: SchemaResolver, signer: plan_codec.Signer,
                 tablet_lists: TabletLists | None = None, consumers: ConsumerPositions | None = None,
                 membership: BeMembership | None = None):
        self.live = LiveSettings.of(settings)
        self.consumers = consumers
        self.membership = membership  # the live BEs, when be_endpoints names several (planner.be_membership)
        settings = self.live.current
        self.tablet_lists = tablet_lists if tablet_lists is not None else TabletLists(settings.tablet_lists_max_bytes)
        self.warehouse = warehouse
        self.schemas = schemas
        self.signer = signer
        self._parts_lock = threading.Lock()
        self._parts_cache: LRUCache = LRUCache(maxsize=64)
        self._digests: LRUCache = LRUCache(maxsize=64)  # (location, version, tablet ids) -> the list's digest
        self._parsed: LRUCache = LRUCache(maxsize=1024)  # (sql, db, table) -> ParsedQuery (immutable)
        # (db, table, sql) -> the latest _PlanBody of it, bounded by the bytes the bodies hold
        # (their snapshots are not kept alive by them).
        self._bodies: LRUCache = LRUCache(maxsize=QUICK_BODIES_MAX_BYTES, getsizeof=attrgetter("size"))
        # Called as each plan that is not answered at once begins (the BE's warm-up in the same
        # process stops: the plan needs the cores, and its reader's scan warms the JVM).
        self.plan_listeners: list[Callable[[], None]] = []
        # Each BE's Thrift address -> the FE's relay port for it, when the FE relays the BEs'
        # scans (thrift_relay_port, planner/thrift_relay): the routings name those instead.
        self.relay_routes: dict[str, str] | None = None

    @property
    def settings(self) -> Settings:
        """The settings as they are now (run-time changes replace them)."""
        return self.live.current

    # ---- _query_plan ----

    def query_plan_json(self, db: str, table: str, sql: str, user: str, audit: dict | None = None,
                        since_version: int | None = None, consumer: str | None = None, cursor: bool = False,
                        direct: bool = False, direct_row_deletes: bool = False) -> bytes:
        """The answer's bytes. ``audit``, when given, is filled with what the audit line needs.
        ``since_version``: plan only the files appended after that version (409 when the table
        was rewritten since, 404 when the version is unknown); the answer then also carries
        ``since_version`` and ``version``, the reader's next cursor (``cursor``: ``version``
        also for a whole read, the start of a reader that keeps its own cursor). ``direct``: name
        each tablet's files too (planner.direct_plans; the caller checked the grant)."""
        audit = {} if audit is None else audit
        made = self._make(db, table, sql, user, audit, since_version, consumer, cursor, direct)
        tail = made.tail
        if made.plan is None:
            return _EMPTY_ANSWER + tail + b"}"
        partitions_json = made.body.partitions_json
        if direct:
            partitions_json, section = self._direct(made.snap, made.plan, made.body.predicate_expr, made.tablets,
                                                    partitions_json, audit, direct_row_deletes)
            tail += b',"direct":' + section
        return _answer(made.encoded, partitions_json, tail)

    def scan_plan(self, db: str, table: str, sql: str, user: str, audit: dict | None = None) -> ScanPlan:
        """A plain plan of ``sql`` as an object (what the SQL fronts read: the signed plan
        and each tablet's BEs), made as ``query_plan_json`` makes it."""
        made = self._make(db, table, sql, user, {} if audit is None else audit)
        if made.plan is None:
            return ScanPlan(made.plan, "", {}, made.body.columns)
        return ScanPlan(made.plan, made.encoded, self._routings(made.tablets, made.body.live), made.body.columns)

    def _make(self, db: str, table: str, sql: str, user: str, audit: dict, since_version: int | None = None,
              consumer: str | None = None, cursor: bool = False, direct: bool = False) -> _Made:
        for listener in self.plan_listeners:
            listener()
        snap = self.warehouse.snapshot(db, table)           # 404s (step 6)
        if consumer is not None and since_version is None and self.consumers is not None:
            since_version = self.consumers.committed(snap.location, consumer)  # None: from the start
        candidates = snap.tablets
        if since_version is not None:
            candidates = tuple(self.warehouse.tablets_added_since(snap, since_version))
            audit["since_version"] = since_version
        parsed = self.parse(sql, db, table)                 # 400/500 (steps 8-13)
        schema = self.schemas.schema(snap)
        cols = ResolvedColumns({f.name.lower(): f for f in schema.fields}, f"{db}.{table}",
                               {name.lower(): why for name, why in snap.unread_columns})
        columns = self._output_columns(parsed, schema, cols)
        predicate = parsed.predicate
        if predicate is not None:
            for name in predicate.columns():
                cols.field(name)
        part_types = {c: cols.field(c).dataType for c in snap.partition_columns if c.lower() in cols.by_lower}
        settings = self.settings
        tablets = self._pruned(snap, candidates, predicate, part_types, settings.time_zone)
        if len(tablets) > settings.max_tablets_per_plan:
            audit.update(columns=[c.name for c in columns], tablets=len(tablets), version=snap.version)
            raise BadRequest(
                f"the scan covers {len(tablets)} tablets, more than max_tablets_per_plan={settings.max_tablets_per_plan}: "
                "add a WHERE clause on partition columns, or raise the limit")
        tail = b""
        if since_version is not None or consumer is not None or cursor:
            tail = (b"" if since_version is None else b',"since_version":%d' % since_version) + \
                b',"version":%d' % snap.version + (b"" if consumer is None else b',"consumer":"%s"' % consumer.encode())
        parts = None
        schema_json, shash = self.schemas.schema_text(snap, schema)
        live = self._live()  # once: the routings and the body that keeps them name the same BEs
        if tablets:
            parts = self._tablet_parts(snap, tablets, shash, live, inline=since_version is not None)
        body = _PlanBody(weakref.ref(snap), settings, live, sql, columns,
                         E.flatten(predicate) if predicate is not None else None, len(tablets), parts, schema_json, shash,
                         predicate)
        if not tail and not direct and (parts is None or len(parts.tablets) <= QUICK_INLINE_MAX_BYTES) and \
                body.size <= QUICK_BODIES_MAX_BYTES // 16:
            with self._parts_lock:
                self._bodies[(db, table, sql)] = body
        plan, encoded = self._signed(body, snap, user, audit)
        return _Made(snap, body, tablets, plan, encoded, tail)

    @staticmethod
    def _pruned(snap: TableSnapshot, candidates: Sequence[Tablet], predicate: E.Expr | None,
                part_types: dict[str, T.DataType], time_zone: str | None) -> list[Tablet]:
        """``prune``, its answer for a snapshot's own tablets kept with the snapshot: pruning
        a thousand partitions' tablets was three quarters of a warm plan's CPU (9.4 ms)."""
        if predicate is None or not part_types or candidates is not snap.tablets:
            return prune(predicate, candidates, part_types, time_zone=time_zone)
        key = ("pruned", predicate, tuple(sorted((name, dt.json()) for name, dt in part_types.items())), time_zone)
        kept = snap.memo.get(key)
        if kept is None:
            kept = tuple(prune(predicate, candidates, part_types, time_zone=time_zone))
            if len(snap.memo) >= PRUNED_MAX:
                snap.memo.clear()
            snap.memo[key] = kept
        return list(kept)

    def quick_plan_json(self, db: str, table: str, sql: str, user: str, audit: dict | None = None) -> bytes | None:
        """``query_plan_json`` of a plain plan (no since_version, consumer, cursor or direct)
        when everything it needs is at hand: a fresh listing of a local folder table
        (``Warehouse.fresh_snapshot``) and a plan of the same statement over the same table
        version with the same settings. None otherwise (``query_plan_json`` answers). Nothing
        here lists, reads or waits, so the FE answers it on its event loop, without the
        hand-off to a thread and back (0.49 -> 0.27 ms of CPU per plan under 50 callers,
        with the same runs' listing changes; bench/RESULTS.md, plan_latency)."""
        snap = self.warehouse.fresh_snapshot(db, table)
        if snap is None:
            return None
        with self._parts_lock:
            body = self._bodies.get((db, table, sql))
        if body is None or body.snap() is not snap or body.settings is not self.settings or body.live != self._live():
            return None
        plan, encoded = self._signed(body, snap, user, {} if audit is None else audit)
        return _EMPTY_ANSWER + b"}" if plan is None else _answer(encoded, body.partitions_json, b"")

    def _live(self) -> tuple[str, ...] | None:
        return self.membership.live() if self.membership is not None else None

    def _signed(self, body: _PlanBody, snap: TableSnapshot, user: str, audit: dict) -> tuple[Any, str]:
        """One plan of ``body`` (of ``snap``) for ``user`` (its own query id and times) and its
        signed encoding; (None, "") when no tablet is planned."""
        parts = body.parts
        audit.update(columns=[c.name for c in body.columns], tablets=body.tablets, version=snap.version)
        if parts is None:
            return None, ""
        if parts.digest is not None:
            # The list each plan names (the store may have dropped it since the last plan).
            self.tablet_lists.hold(parts.digest, snap.by_id)
        now_ms = int(time.time() * 1000)
        plan = plan_idl.TScanPlan(
            query_id=str(uuid.uuid4()),
            database=snap.db,
            table=snap.name,
            table_location=str(snap.location),
            version=snap.version,
            columns=body.columns,
            predicate=body.predicate,
            tablets=parts.tablets,
            tablets_digest=parts.digest,
            tablet_ids=parts.tablet_ids,
            user=user,
            issued_at_ms=now_ms,
            expires_at_ms=now_ms + body.settings.plan_ttl_s * 1000,
            table_schema=body.schema_json,
            schema_hash=body.shash,
            sql=body.sql[:AUDIT_SQL_CHARS],
            partition_columns=snap.plan_partition_columns,
            file_format=None if snap.file_format == "parquet" else snap.file_format,
            file_columns=json.dumps(dict(snap.file_columns)) if snap.file_columns else None,
        )
        audit["query_id"] = plan.query_id
        return plan, plan_codec.encode(plan, self.signer)

    def _direct(self, snap, plan, predicate, tablets, partitions_json: bytes, audit: dict,
                row_deletes: bool = False) -> tuple[bytes, bytes]:
        """A direct plan's ``partitions`` (each tablet's storage beside its routings) and its
        top-level ``direct`` section; the files it names go to the audit line."""
        found = direct_plan(snap, plan.table_schema, plan.columns, predicate, list(tablets), self.settings.time_zone,
                            CalendarRules.of_settings(self.settings.spark_conf), row_deletes=row_deletes)
        partitions = json.loads(partitions_json)
        for tablet_id, extra in found.tablets.items():
            partitions[str(tablet_id)].update(extra)
        audit["direct_files"] = found.disclosed
        return (json.dumps(partitions, separators=(",", ":")).encode("utf-8"),
                json.dumps(found.read, separators=(",", ":")).encode("utf-8"))

    # ---- consumers ----
    def consumer_position(self, db: str, table: str, name: str) -> dict:
        snap = self.warehouse.snapshot(db, table)
        committed = self.consumers.committed(snap.location, name) if self.consumers is not None else None
        return {"consumer": name, "version": committed, "table_version": snap.version}

    def consumer_lags(self) -> list[ConsumerLag]:
        """Every consumer's lag behind its table (the admin page, /metrics)."""
        return consumer_lags(self.warehouse, self.consumers) if self.consumers is not None else []

    def commit_consumer(self, db: str, table: str, name: str, version: int, user: str) -> dict:
        snap = self.warehouse.snapshot(db, table)  # observes the current version
        if self.consumers is None:
            raise BadRequest("this server keeps no consumer positions")
        self.consumers.commit(snap.qualified_name, snap.location, name, version, user, self.warehouse.changes(snap))
        return {"consumer": name, "version": version}

    def parse(self, sql: str, db: str, table: str) -> sqlmod.ParsedQuery:
        """sqlglot's parse, kept for repeated statements (readers send the same SQL for every
        plan of a job; parsing is a third of a plan's time). Errors are not kept."""
        key = (sql, db, table)
        with self._parts_lock:
            hit = self._parsed.get(key)
        if hit is None:
            hit = sqlmod.parse(sql, db, table)
            with self._parts_lock:
                self._parsed[key] = hit
        return hit

    def _tablet_parts(self, snap, tablets, shash: int, live: tuple[str, ...] | None, inline: bool = False) -> TabletParts:
        """The plan's tablets and the rendered `partitions` JSON, cached per table version and
        tablet set: large tables make these the bulk of every answer. ``live``: the BEs the
        routings name (``_live``). ``inline``: carry the tablets in the plan whatever their
        size (an incremental plan's tablets are not the snapshot's, whose list a digest names)."""
        inline_max = 1 << 62 if inline else self.settings.plan_inline_tablets_max_bytes
        if self.membership is not None and not live:
            raise self.membership.none_alive()
        key = (str(snap.location), snap.version, shash, inline_max, tuple(t.tablet_id for t in tablets), live)
        with self._parts_lock:
            hit = self._parts_cache.get(key)
        if hit is not None:
            return hit
        # Each file packs to more bytes than its path: a list whose paths alone pass the bound
        # is named by its digest without being packed first (a million files took 5 s each time).
        too_large = _paths_pass(tablets, inline_max)
        packed = b"" if too_large else plan_codec.pack_tablets(plan_tablets(tablets))
        if not too_large and len(packed) <= inline_max:
            value = TabletParts(packed, None, None, b"")
        else:
            value = TabletParts(b"", self._list_digest(snap), [t.tablet_id for t in tablets], b"")
        partitions = {str(tablet_id): {"routings": routings, "version": snap.version, "schemaHash": shash}
                      for tablet_id, routings in self._routings(tablets, live).items()}
        value.partitions_json = json.dumps(partitions, separators=(",", ":")).encode("ascii")
        with self._parts_lock:
            self._parts_cache[key] = value
        return value

    def _routings(self, tablets: Sequence[Tablet], live: tuple[str, ...] | None) -> dict[int, list[str]]:
        """Each tablet's BEs, in the order a reader tries them (their relay ports at the FE when
        it relays)."""
        if self.membership is not None and live:
            routed = {t.tablet_id: self.membership.routings_of(t.tablet_id, live) for t in tablets}
        else:
            routings = self.settings.routings
            routed = {t.tablet_id: list(routings) for t in tablets}
        relay = self.relay_routes
        if relay is not None:
            routed = {tablet: [relay.get(be, be) for be in bes] for tablet, bes in routed.items()}
        return routed

    def _list_digest(self, snap) -> bytes:
        """The digest of the snapshot's whole tablet list (starscan.plans.tablet_lists): once
        per table version, whatever tablets each query prunes to."""
        # Tablet ids are hashes of the files (and row groups) they hold: the same ids, the
        # same list. The key holds no snapshot, so none is kept alive for it.
        key = (str(snap.location), snap.version, tuple(t.tablet_id for t in snap.tablets))
        with self._parts_lock:
            hit = self._digests.get(key)
        if hit is None:
            hit = digest_of(snap.tablets)
            with self._parts_lock:
                self._digests[key] = hit
        return hit

    def _output_columns(self, parsed: sqlmod.ParsedQuery, schema: T.StructType, cols: ResolvedColumns) -> list:
        out: list = []
        for item in parsed.items:
            if item.is_star:
                out.extend(_plan_column(f.name, f) for f in schema.fields)
                continue
            assert item.expr is not None
            if item.expr.kind == "column":
                field = cols.field(item.expr.name or "")
                name = item.name if item.name != item.expr.name else field.name
                out.append(_plan_column(name, field))
            else:
                for name in item.expr.columns():
                    cols.field(name)
                out.append(
                    plan_idl.TPlanColumn(
                        name=item.name, source="", spark_type=json.dumps("null"), primitive_type=0,
                        nullable=True, is_slot_ref=False,
                    )
                )
        if not out:
            raise SqlInvalid("empty select list")
        return out

    # ---- _schema ----
    def table_schema(self, db: str, table: str) -> dict:
        snap = self.warehouse.snapshot(db, table)
        schema = self.schemas.schema(snap)
        properties = []
        for field in schema.fields:
            srt = starrocks_type(field)
            prop = {"name": field.name, "type": srt.name, "comment": str((field.metadata or {}).get("comment", ""))}
            if srt.is_decimal:
                prop["precision"] = str(srt.precision)
                prop["scale"] = str(srt.scale)
            properties.append(prop)
        return {"status": 200, "properties": properties}


_path = attrgetter("path")


def _paths_pass(tablets, limit: int) -> bool:
    """Whether the tablets' paths alone hold more than ``limit`` characters, counted a
    tablet at a time up to the first that passes it (a million paths took a second)."""
    total = 0
    for tablet in tablets:
        total += sum(map(len, map(_path, tablet.files)))
        if total > limit:
            return True
    return False


def _plan_column(name: str, field: T.StructField):
    return plan_idl.TPlanColumn(
        name=name,
        source=field.name,
        spark_type=field.dataType.json(),
        primitive_type=starrocks_type(field).primitive,
        nullable=field.nullable,
        is_slot_ref=True,
    )

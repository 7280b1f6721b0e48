"""The FE's Flight SQL server: pyarrow's Flight server with Flight SQL's commands.

``GetFlightInfo`` / ``GetSchema`` take a statement (``CommandStatementQuery``, or a prepared
one) or a metadata command and answer its schema and endpoints (planner/flight_sql/
statements.py); ``DoGet`` answers the tickets the FE keeps for itself (queries on Spark SQL,
SHOW/DESC, metadata) and, in proxy mode, relays a BE's stream of a scan's tablets, trying
the tablets' next BE when one cannot be reached. ``DoAction`` creates and closes prepared
statements. Every failure is a gRPC status (starscan.flight.errors)."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
from collections.abc import Callable

import pyarrow as pa
import pyarrow.flight as flight
from cachetools import TTLCache
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from starscan.core.errors import BadRequest, InvalidArgument, NotFound, PrivilegeMissing, StarscanError
from starscan.flight import flight_sql_pb2 as sql_pb2
from starscan.flight import tickets
from starscan.flight.errors import to_flight
from starscan.planner import sql_queries
from starscan.planner.auth import Authenticator
from starscan.planner.flight_sql import catalog, relay, statements
from starscan.planner.flight_sql.auth import CallerMiddlewareFactory, HandshakeAccepted, SessionTokens, caller
from starscan.planner.mysql.catalog_view import CatalogView
from starscan.planner.query_plan import QueryPlanner
from starscan.plans import codec as plan_codec
from starscan.security.tls import FlightTls
from starscan.security.users import UserStore
from starscan.settings.runtime import LiveSettings
from starscan.spark import pyspark_internals

log = logging.getLogger("starscan.flight")

PREPARED_MAX = 10_000
PREPARED_TTL_S = 3600
_CREATE_PREPARED = "CreatePreparedStatement"
_CLOSE_PREPARED = "ClosePreparedStatement"


class FlightSqlServer(flight.FlightServerBase):
    def __init__(self, location: str, advertised: str, planner: QueryPlanner, auth: Authenticator, users: UserStore,
                 spark, signer: plan_codec.Signer, live: LiveSettings, tls: FlightTls | None = None):
        super().__init__(location, auth_handler=HandshakeAccepted(),
                         middleware={"caller": CallerMiddlewareFactory(auth, SessionTokens())},
                         **(tls.server_options() if tls is not None else {}))
        self.relay_options = tls.client_options() if tls is not None else {}  # the FE's client of the BEs
        self.advertised = advertised   # this FE's own Flight URI (endpoints it answers, proxy mode)
        self.planner = planner
        self.users = users
        self.spark = spark
        self.signer = signer
        self.live = live
        self._prepared: TTLCache = TTLCache(maxsize=PREPARED_MAX, ttl=PREPARED_TTL_S)
        self._lock = threading.Lock()
        # A node that is this FE's BE too (--role all): its routing and its Flight front's
        # stream of a ticket, so that proxy mode reads that BE's tablets in this process
        # instead of relaying them over a connection to itself (set by the node's wiring).
        self.local_be: Callable[[], str | None] = lambda: None
        self.local_stream: Callable[[tickets.ScanTicket, str], flight.FlightDataStream] | None = None

    # ---- what a user sees ----
    def _view(self, user: str) -> CatalogView:
        return CatalogView(self.planner.warehouse, self.planner.schemas, self.users, user)

    # ---- GetFlightInfo / GetSchema ----
    def get_flight_info(self, context, descriptor):
        try:
            user = caller(context)
            command = _command(descriptor)
            schema = catalog.schema_of(command)
            if schema is not None:  # metadata: answered by this FE
                ticket = tickets.encode(tickets.meta_ticket(user, command.SerializeToString()), self.signer)
                return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(ticket, [])], -1, -1)
            planned = self._statement(user, command)
            endpoints = [flight.FlightEndpoint(e.ticket, [flight.Location(u) for u in e.locations])
                         for e in planned.endpoints]
            return flight.FlightInfo(planned.schema, descriptor, endpoints, planned.rows, -1)
        except Exception as exc:  # noqa: BLE001 - every failure is a gRPC status
            raise self._failure(exc, "GetFlightInfo") from None

    def get_schema(self, context, descriptor):
        info = self.get_flight_info(context, descriptor)
        return flight.SchemaResult(info.schema)

    def _statement(self, user: str, command: any_pb2.Any) -> statements.Planned:
        query = sql_pb2.CommandStatementQuery()
        prepared = sql_pb2.CommandPreparedStatementQuery()
        if command.Unpack(query):
            sql = query.query
        elif command.Unpack(prepared):
            sql = self._prepared_sql(user, prepared.prepared_statement_handle)
        elif command.type_url.endswith(("CommandStatementUpdate", "CommandPreparedStatementUpdate")):
            raise BadRequest("starscan is read-only: updates are refused")
        else:
            raise BadRequest(f"the command {command.type_url.rsplit('/', 1)[-1]} is not supported by starscan")
        settings = self.live.current
        return statements.plan(sql, None, self._view(user), self.planner, self.spark, settings, self.signer,
                               {be: f"{_scheme(settings)}://{uri}" for be, uri in settings.flight_routes.items()},
                               self.advertised)

    # ---- DoGet ----
    def do_get(self, context, ticket):
        try:
            user = caller(context)
            found = tickets.decode(ticket.ticket, self.signer)
            if isinstance(found, tickets.ScanTicket):
                return self._relay(user, found, context.peer())
            if found.user != user:
                raise PrivilegeMissing("this ticket was issued to another user")
            view = self._view(user)
            settings = self.live.current
            if isinstance(found, tickets.MetaTicket):
                command = any_pb2.Any()
                command.ParseFromString(found.command)
                return flight.RecordBatchStream(catalog.answer(command, view, settings.time_zone))
            if catalog.is_show(found.sql):
                return flight.RecordBatchStream(catalog.show(found.sql, found.database, view))
            return flight.RecordBatchStream(self._query(found, view))
        except Exception as exc:  # noqa: BLE001 - every failure is a gRPC status
            raise self._failure(exc, "DoGet") from None

    def _query(self, ticket: tickets.QueryTicket, view: CatalogView) -> pa.Table:
        """A query answered on Spark SQL, at most ``sql_query_max_rows`` rows."""
        settings = self.live.current
        prepared = sql_queries.prepare(statements.parse(ticket.sql), ticket.database, view, statements.CLIENT)
        df = sql_queries.dataframe(self.spark, prepared, view)
        schema = statements.query_schema(df, settings.time_zone)
        cap = settings.sql_query_max_rows
        df.sparkSession.sparkContext.setJobDescription(f"flight sql: {prepared.description} ({view.user})")
        table = pyspark_internals.collect_arrow(df.limit(cap + 1), settings.time_zone)
        if table.num_rows > cap:
            raise BadRequest(f"the query's result has more than sql_query_max_rows={cap} rows: aggregate or filter "
                             "it further, or read the table with a plain SELECT (its tablets stream from the BEs)")
        return table.cast(schema) if table.schema != schema else table

    def _relay(self, user: str, ticket: tickets.ScanTicket, peer: str):
        """A scan's tablets read from the first of their BEs that answers, streamed on (this
        node's own BE read in this process, as its Flight front reads them)."""
        plan = plan_codec.decode(ticket.plan, self.signer)
        if plan.user != user:
            raise PrivilegeMissing("this ticket was issued to another user")
        settings = self.live.current
        routes = settings.flight_routes
        live = self.planner.membership.live() if self.planner.membership is not None else tuple(routes)
        # The plan's BEs for these tablets first, then the other live BEs, the rest last.
        preferred = [be for be in ticket.routings if be in routes and be in live]
        order = preferred + [be for be in routes if be in live and be not in preferred] + \
            [be for be in routes if be not in live]
        own = self.local_be()
        if own is not None and order and own == order[0] and self.local_stream is not None:
            return self.local_stream(ticket, peer)
        # Rows in a fixed order, so that a BE lost on the way is replaced by the next (relay.py).
        ordered = flight.Ticket(tickets.encode(dataclasses.replace(ticket, ordered=True), self.signer))
        return relay.relay([(be, f"{_scheme(settings)}://{routes[be]}") for be in order], ordered, self.relay_options)

    # ---- DoAction: prepared statements ----
    def list_actions(self, context):
        return [(_CREATE_PREPARED, "prepare a statement"), (_CLOSE_PREPARED, "close a prepared statement")]

    def do_action(self, context, action):
        try:
            user = caller(context)
            body = any_pb2.Any()
            try:
                body.ParseFromString(action.body.to_pybytes())
            except DecodeError:
                raise InvalidArgument("the action's body is not a packed Flight SQL message") from None
            if action.type == _CREATE_PREPARED:
                request = sql_pb2.ActionCreatePreparedStatementRequest()
                if not body.Unpack(request):
                    raise InvalidArgument("CreatePreparedStatement needs an ActionCreatePreparedStatementRequest")
                command = any_pb2.Any()
                command.Pack(sql_pb2.CommandStatementQuery(query=request.query))
                planned = self._statement(user, command)
                handle = secrets.token_bytes(16)
                with self._lock:
                    self._prepared[handle] = (user, request.query)
                result = any_pb2.Any()
                result.Pack(sql_pb2.ActionCreatePreparedStatementResult(
                    prepared_statement_handle=handle, dataset_schema=planned.schema.serialize().to_pybytes()))
                return [flight.Result(result.SerializeToString())]
            if action.type == _CLOSE_PREPARED:
                request = sql_pb2.ActionClosePreparedStatementRequest()
                if body.Unpack(request):
                    with self._lock:
                        self._prepared.pop(request.prepared_statement_handle, None)
                return []
            raise BadRequest(f"the action {action.type!r} is not supported by starscan")
        except Exception as exc:  # noqa: BLE001 - every failure is a gRPC status
            raise self._failure(exc, "DoAction") from None

    def _prepared_sql(self, user: str, handle: bytes) -> str:
        with self._lock:
            entry = self._prepared.get(handle)
        if entry is None or entry[0] != user:
            raise NotFound("no such prepared statement: it was closed or expired; prepare it again")
        return entry[1]

    def _failure(self, exc: Exception, rpc: str) -> BaseException:
        """The gRPC status of ``exc``; a failure that is not one of ours is logged with its traceback."""
        if not isinstance(exc, (StarscanError, flight.FlightError, pa.ArrowException)):
            log.exception("Flight SQL %s failed", rpc)
        return to_flight(exc)


def _command(descriptor: flight.FlightDescriptor) -> any_pb2.Any:
    if descriptor.descriptor_type != flight.DescriptorType.CMD:
        raise InvalidArgument("a Flight SQL command is expected (a CMD descriptor), not a path")
    command = any_pb2.Any()
    try:
        command.ParseFromString(descriptor.command)
    except DecodeError:
        raise InvalidArgument("the descriptor's command is not a packed Flight SQL message") from None
    return command


def _scheme(settings) -> str:
    return "grpc+tls" if settings.flight_tls else "grpc"

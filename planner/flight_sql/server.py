"""The FE's Flight SQL server: pyarrow's Flight server with Flight SQL's commands.

``GetFlightInfo`` / ``GetSchema`` take a statement (``CommandStatementQuery``, or a prepared
one), which the statement service answers (planner/statements: the same answer as on the
MySQL port), rendered as its schema and endpoints (planner/flight_sql/statements.py), or a
metadata command (planner/flight_sql/catalog.py). ``DoGet`` streams the tickets the FE keeps
for itself (a statement's rows, metadata) and, in proxy mode, relays a BE's stream of a
scan's tablets, trying the tablets' next BE when one cannot be reached. ``DoAction`` creates
and closes prepared statements. Every failure is a gRPC status (starscan.flight.errors)."""

from __future__ import annotations

import logging
import secrets
import threading

import pyarrow.flight as flight
from cachetools import TTLCache
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from starscan.core.errors import BadRequest, InvalidArgument, NotFound, PrivilegeMissing
from starscan.flight import flight_sql_pb2 as sql_pb2
from starscan.flight import tickets
from starscan.flight.errors import as_flight, to_flight
from starscan.planner.auth import Authenticator
from starscan.planner.flight_sql import catalog, statements
from starscan.planner.flight_sql.auth import CallerMiddlewareFactory, HandshakeAccepted, SessionTokens, caller
from starscan.planner.statements import Answer, ScanAnswer, Statement, StatementService
from starscan.plans import codec as plan_codec
from starscan.security.tls import FlightTls
from starscan.settings.runtime import LiveSettings

log = logging.getLogger("starscan.flight")

DOOR = "flight-sql"
PREPARED_MAX = 10_000
PREPARED_TTL_S = 3600
# An answer this FE streams itself (a query's DataFrame, built for GetFlightInfo's schema; a
# scan with a LIMIT, planned once) kept for the DoGet that follows, so that it is made once; a
# DoGet after this, or on another FE, makes it again.
ANSWERS_MAX = 256
ANSWERS_TTL_S = 120
_CREATE_PREPARED = "CreatePreparedStatement"
_CLOSE_PREPARED = "ClosePreparedStatement"


class FlightSqlServer(flight.FlightServerBase):
    def __init__(self, location: str, advertised: str, service: StatementService, auth: Authenticator,
                 signer: plan_codec.Signer, live: LiveSettings, tls: FlightTls | None = None):
        super().__init__(location, auth_handler=HandshakeAccepted(),
                         middleware={"caller": CallerMiddlewareFactory(auth, SessionTokens())},
                         **(tls.server_options() if tls is not None else {}))
        self.advertised = advertised   # this FE's own Flight URI (endpoints it answers, proxy mode)
        self.service = service
        self.signer = signer
        self.live = live
        self._prepared: TTLCache = TTLCache(maxsize=PREPARED_MAX, ttl=PREPARED_TTL_S)
        self._answers: TTLCache = TTLCache(maxsize=ANSWERS_MAX, ttl=ANSWERS_TTL_S)
        self._lock = threading.Lock()

    # ---- GetFlightInfo / GetSchema ----
    def get_flight_info(self, context, descriptor):
        try:
            user = caller(context)
            command = _command(descriptor)
            schema = catalog.schema_of(command)
            if schema is not None:  # metadata: answered by this FE
                ticket = tickets.encode(tickets.meta_ticket(user, command.SerializeToString()), self.signer)
                return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(ticket, [])], -1, -1)
            planned = self._statement(user, command, _peer(context))
            endpoints = [flight.FlightEndpoint(e.ticket, [flight.Location(u) for u in e.locations])
                         for e in planned.endpoints]
            return flight.FlightInfo(planned.schema, descriptor, endpoints, planned.rows, -1)
        except Exception as exc:  # noqa: BLE001 - every failure is a gRPC status
            raise self._failure(exc, "GetFlightInfo") from None

    def get_schema(self, context, descriptor):
        info = self.get_flight_info(context, descriptor)
        return flight.SchemaResult(info.schema)

    def _statement(self, user: str, command: any_pb2.Any, peer: str) -> statements.Planned:
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
        answer = self.service.execute(Statement(user, peer, DOOR, sql))
        if not isinstance(answer, ScanAnswer) or answer.limit is not None:  # streamed by this FE's DoGet
            with self._lock:
                self._answers[(user, None, sql)] = answer
        return statements.planned(answer, self.service, self.live.current, self.signer, self.advertised, user, sql, None)

    # ---- DoGet ----
    def do_get(self, context, ticket):
        try:
            user = caller(context)
            found = tickets.decode(ticket.ticket, self.signer)
            if isinstance(found, tickets.ScanTicket):
                return self._relay(user, found, _peer(context))
            if found.user != user:
                raise PrivilegeMissing("this ticket was issued to another user")
            if isinstance(found, tickets.MetaTicket):
                command = any_pb2.Any()
                command.ParseFromString(found.command)
                return flight.RecordBatchStream(catalog.answer(command, self.service.view(user),
                                                               self.live.current.time_zone))
            with self._lock:
                kept: Answer | None = self._answers.pop((user, found.database, found.sql), None)
            answer = kept if kept is not None else \
                self.service.execute(Statement(user, _peer(context), DOOR, found.sql, found.database))
            schema, batches = self.service.rows(answer, _peer(context))
            return flight.GeneratorStream(schema, as_flight(batches))
        except Exception as exc:  # noqa: BLE001 - every failure is a gRPC status
            raise self._failure(exc, "DoGet") from None

    def _relay(self, user: str, ticket: tickets.ScanTicket, peer: str):
        """A scan's tablets read from the first of their BEs that answers, streamed on (this
        node's own BE read in this process, as its Flight front reads them)."""
        plan = plan_codec.decode(ticket.plan, self.signer)
        if plan.user != user:
            raise PrivilegeMissing("this ticket was issued to another user")
        schema, batches = self.service.reads.read(ticket, peer)
        return flight.GeneratorStream(schema, as_flight(batches))

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
                planned = self._statement(user, command, _peer(context))
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
        """The gRPC status of ``exc`` (a failure that is not one of ours is logged with its
        traceback, by to_flight)."""
        return to_flight(exc, f"Flight SQL {rpc}")


def _peer(context) -> str:
    """The caller's address (gRPC names it ``ipv4:host:port`` or ``ipv6:[host]:port``)."""
    peer = context.peer() or "unknown"
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6") and rest:
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer


def _command(descriptor: flight.FlightDescriptor) -> any_pb2.Any:
    if descriptor.descriptor_type != flight.DescriptorType.CMD:
        raise InvalidArgument("a Flight SQL command is expected (a CMD descriptor), not a path")
    command = any_pb2.Any()
    try:
        command.ParseFromString(descriptor.command)
    except DecodeError:
        raise InvalidArgument("the descriptor's command is not a packed Flight SQL message") from None
    return command


"""The tickets of starscan's Flight SQL endpoints (docs/flight-sql.md).

A Flight SQL client gets a statement's endpoints from the FE's ``GetFlightInfo`` and redeems
each endpoint's ticket with ``DoGet`` at one of its locations. The ticket is Flight SQL's
``TicketStatementQuery`` packed in ``google.protobuf.Any``; its handle is starscan's own:

    "SSF1" | key id length (1 byte) | key id | signature length (2 bytes) | signature | body

The body is JSON, signed with the plan secret (the same signer as the FE's plans), so a
ticket cannot be changed or made for another user. Two kinds:

* ``ScanTicket``: tablets of a plan, read by a BE (or relayed by the FE): the plan is the
  FE's signed ``opaqued_query_plan``, bound to its user, the tablets are checked against it
  as open_scanner checks them;
* ``QueryTicket``: a statement the FE answers itself (aggregates, joins, SHOW): its SQL, the
  user and the database it was issued for;
* ``MetaTicket``: a metadata command (GetTables, GetSqlInfo, ...) the FE answers, as the
  client sent it (the ``Any``'s bytes), and the user.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import time
from dataclasses import dataclass

from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from starscan.core.errors import InvalidArgument, PlanExpired
from starscan.flight import flight_sql_pb2 as sql_pb2
from starscan.plans.codec import Signer

MAGIC = b"SSF1"
QUERY_TICKET_TTL_S = 3600  # a statement's ticket is redeemed at once by every client seen


@dataclass(frozen=True)
class ScanTicket:
    plan: str                    # the FE's signed opaqued_query_plan
    tablet_ids: tuple[int, ...]  # the tablets of this endpoint
    batch_rows: int              # rows per record batch
    # Rows in a fixed order (protocol_extensions.ORDERED_PROPERTY): the FE's proxy asks for
    # it when it relays another BE's stream, so that it can go on from the next BE, skipping
    # the rows it has already sent, when that BE is lost in the middle.
    ordered: bool = False
    # The BEs the plan routed these tablets to (Thrift addresses, in the plan's order): the
    # FE's proxy reads them from the first of these that is live, so that the endpoints of a
    # statement spread over the BEs as the plan spread the tablets.
    routings: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueryTicket:
    user: str
    sql: str
    database: str | None
    expires_ms: int


@dataclass(frozen=True)
class MetaTicket:
    user: str
    command: bytes               # the client's command: a packed google.protobuf.Any
    expires_ms: int


Ticket = ScanTicket | QueryTicket | MetaTicket


def encode(ticket: Ticket, signer: Signer) -> bytes:
    if isinstance(ticket, ScanTicket):
        doc = {"k": "scan", "plan": ticket.plan, "tablets": list(ticket.tablet_ids), "batch": ticket.batch_rows}
        if ticket.ordered:
            doc["ord"] = True
        if ticket.routings:
            doc["r"] = list(ticket.routings)
    elif isinstance(ticket, MetaTicket):
        doc = {"k": "meta", "user": ticket.user, "cmd": base64.b64encode(ticket.command).decode("ascii"),
               "exp": ticket.expires_ms}
    else:
        doc = {"k": "query", "user": ticket.user, "sql": ticket.sql, "db": ticket.database, "exp": ticket.expires_ms}
    body = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    signature, kid = signer.sign(body)
    key = kid.encode("ascii")
    handle = MAGIC + struct.pack(">B", len(key)) + key + struct.pack(">H", len(signature)) + signature + body
    packed = any_pb2.Any()
    packed.Pack(sql_pb2.TicketStatementQuery(statement_handle=handle))
    raw: bytes = packed.SerializeToString()
    return raw


def _expiry() -> int:
    return int((time.time() + QUERY_TICKET_TTL_S) * 1000)


def query_ticket(user: str, sql: str, database: str | None) -> QueryTicket:
    return QueryTicket(user, sql, database, _expiry())


def meta_ticket(user: str, command: bytes) -> MetaTicket:
    return MetaTicket(user, command, _expiry())


def decode(raw: bytes, signer: Signer, now_ms: int | None = None) -> Ticket:
    """A ticket this server's FE issued, verified; InvalidArgument for anything else."""
    handle = _handle(raw)
    try:
        klen = handle[4]
        kid = handle[5:5 + klen].decode("ascii")
        (slen,) = struct.unpack_from(">H", handle, 5 + klen)
        start = 7 + klen
        signature, body = handle[start:start + slen], handle[start + slen:]
    except (IndexError, struct.error, UnicodeDecodeError):
        raise InvalidArgument("the ticket is damaged: redeem the tickets GetFlightInfo returned, unchanged") from None
    signer.verify(body, signature, kid)
    try:
        doc = json.loads(body)
        if doc["k"] == "scan":
            return ScanTicket(str(doc["plan"]), tuple(int(t) for t in doc["tablets"]), int(doc["batch"]),
                              doc.get("ord") is True, tuple(str(r) for r in doc.get("r", ())))
        ticket: QueryTicket | MetaTicket
        if doc["k"] == "meta":
            ticket = MetaTicket(str(doc["user"]), base64.b64decode(doc["cmd"]), int(doc["exp"]))
        else:
            ticket = QueryTicket(str(doc["user"]), str(doc["sql"]), doc.get("db"), int(doc["exp"]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise InvalidArgument("the ticket is not one of starscan's") from None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if now_ms > ticket.expires_ms:
        raise PlanExpired("the statement's ticket expired: run the statement again (GetFlightInfo)")
    return ticket


def _handle(raw: bytes) -> bytes:
    packed = any_pb2.Any()
    try:
        packed.ParseFromString(raw)
    except DecodeError:
        packed = None
    message = sql_pb2.TicketStatementQuery()
    if packed is None or not packed.Unpack(message) or not message.statement_handle.startswith(MAGIC):
        raise InvalidArgument("not a ticket of this server: redeem the tickets its GetFlightInfo returned")
    return message.statement_handle

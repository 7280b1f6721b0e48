"""The Flight SQL messages and tickets (starscan/flight): the generated module is what
idl/flight_sql.proto gives, type URLs are Flight SQL's, and tickets cannot be changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import any_pb2

from starscan.core.errors import InvalidArgument, PlanExpired, PlanInvalid
from starscan.flight import flight_sql_pb2 as sql_pb2
from starscan.flight import tickets
from starscan.plans.codec import PlanSigner

REPO = Path(__file__).resolve().parents[2]


def test_generated_module_is_what_the_proto_gives(tmp_path):
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO / 'idl'}", f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", str(REPO / "idl" / "flight_sql.proto")], check=True)
    for name in ("flight_sql_pb2.py", "flight_sql_pb2.pyi"):
        assert (tmp_path / name).read_text() == (REPO / "starscan" / "flight" / name).read_text(), (
            f"starscan/flight/{name} is stale: regenerate it (the command is in idl/flight_sql.proto)")


def test_type_urls_are_flight_sqls():
    packed = any_pb2.Any()
    packed.Pack(sql_pb2.CommandStatementQuery(query="select 1"))
    assert packed.type_url == "type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    # Field numbers are the wire contract: query is field 1 (a length-delimited string).
    assert sql_pb2.CommandStatementQuery(query="x").SerializeToString() == b"\x0a\x01x"
    assert sql_pb2.TicketStatementQuery(statement_handle=b"h").SerializeToString() == b"\x0a\x01h"
    assert sql_pb2.CommandGetTables(include_schema=True).SerializeToString() == b"\x28\x01"


def test_tickets_round_trip_and_refuse_changes():
    signer = PlanSigner(b"k" * 32)
    scan = tickets.ScanTicket("plan-text", (3, 1, 2), 4096)
    assert tickets.decode(tickets.encode(scan, signer), signer) == scan
    relayed = tickets.ScanTicket("plan-text", (3,), 4096, ordered=True, routings=("10.0.0.5:9060", "10.0.0.6:9060"))
    assert tickets.decode(tickets.encode(relayed, signer), signer) == relayed
    query = tickets.query_ticket("alice", "select count(*) from db.t", "db")
    assert tickets.decode(tickets.encode(query, signer), signer) == query
    meta = tickets.meta_ticket("alice", b"\x00\x01")
    assert tickets.decode(tickets.encode(meta, signer), signer) == meta
    raw = bytearray(tickets.encode(query, signer))
    raw[-3] ^= 1  # a changed body
    with pytest.raises((PlanInvalid, InvalidArgument)):
        tickets.decode(bytes(raw), signer)
    with pytest.raises(PlanInvalid):
        tickets.decode(tickets.encode(query, PlanSigner(b"o" * 32)), signer)
    with pytest.raises(InvalidArgument):
        tickets.decode(b"not a ticket", signer)
    with pytest.raises(PlanExpired):
        tickets.decode(tickets.encode(query, signer), signer, now_ms=query.expires_ms + 1)

"""The one error table (starscan.core.errors.WIRES): every error kind answers on each wire
(HTTP, Thrift, gRPC, MySQL) from its row, a kind without a row fails here, and a failure no
kind models reaches no wire with its text, a path or a traceback."""

from __future__ import annotations

import inspect
import logging
import re

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from starscan.core import errors as E
from starscan.core.thrift_defs import wire
from starscan.flight.errors import _BY_GRPC, to_flight
from starscan.planner.errors import error_response
from starscan.planner.mysql.errors import to_mysql
from starscan.thrift.status import SDK_CODES, from_error

KINDS = [cls for _, cls in inspect.getmembers(E, inspect.isclass)
         if issubclass(cls, E.StarscanError) and cls.__module__ == E.__name__]
SECRET = "/opt/secret/install/path.py"


def _instance(kind: type[E.StarscanError]) -> E.StarscanError:
    if kind is E.DatabaseNotFound:
        return kind("db")
    if kind is E.TableNotFound:
        return kind("db.t")
    if kind is E.UnknownUser:
        return kind("u")
    return kind("a message")


@pytest.mark.parametrize("kind", KINDS, ids=lambda cls: cls.__name__)
def test_every_kind_has_its_row_and_answers_by_it_on_every_wire(kind):
    assert kind in E.WIRES, f"{kind.__name__} has no row in starscan.core.errors.WIRES"
    row = E.WIRES[kind]
    exc = _instance(kind)
    # HTTP
    assert 400 <= row.http < 600
    assert error_response(exc).status_code == row.http
    # Thrift: a code the StarRocks SDK knows
    code = getattr(wire.TStatusCode, row.thrift)
    assert code in SDK_CODES
    assert from_error(exc).status_code == code
    # gRPC
    assert row.grpc in _BY_GRPC
    assert type(to_flight(exc)) is _BY_GRPC[row.grpc]
    # MySQL: the number, and a SQLSTATE of five characters
    assert 1000 <= row.mysql < 5000 and re.fullmatch(r"[0-9A-Z]{5}", row.sqlstate)
    assert to_mysql(exc).code == row.mysql


def test_a_failure_no_kind_models_is_an_id_on_every_wire_and_its_text_only_in_the_log(caplog):
    def boom() -> RuntimeError:
        return RuntimeError(f"cannot open {SECRET}")

    caplog.set_level(logging.ERROR)
    answers = [
        error_response(E.internal_error(boom(), logging.getLogger("test"), "a test")).body.decode(),
        " ".join(from_error(boom()).error_msgs),
        str(to_flight(boom())),
        to_mysql(boom()).msg,
    ]
    for text in answers:
        assert re.search(r"internal error \(id [0-9a-f]{12}\)", text), text
        assert SECRET not in text and "RuntimeError" not in text
    ids = {re.search(r"id ([0-9a-f]{12})", text).group(1) for text in answers}
    assert len(ids) == 4
    logged = caplog.text
    assert all(i in logged for i in ids) and SECRET in logged


def test_a_flight_refusal_reaches_the_client_without_the_servers_traceback():
    """pyarrow's server sends a handler's traceback with ArrowInvalid / ArrowKeyError:
    starscan's refusals go without it (and a plain one still has it: the mark is what
    removes it)."""

    class Server(flight.FlightServerBase):
        def get_flight_info(self, context, descriptor):
            if descriptor.command == b"ours":
                raise to_flight(E.TableNotFound("demo.nosuch"))
            raise pa.ArrowKeyError("theirs")

    server = Server("grpc://127.0.0.1:0")
    try:
        client = flight.connect(f"grpc://127.0.0.1:{server.port}")
        with pytest.raises(pa.ArrowKeyError) as ours:
            client.get_flight_info(flight.FlightDescriptor.for_command(b"ours"))
        with pytest.raises(pa.ArrowKeyError) as theirs:
            client.get_flight_info(flight.FlightDescriptor.for_command(b"theirs"))
        client.close()
    finally:
        server.shutdown()
    assert "Table [demo.nosuch] does not exists [TableNotFound]" in str(ours.value)
    assert "Traceback" not in str(ours.value) and ".py" not in str(ours.value)
    assert "Traceback" in str(theirs.value)

"""Fuzz the BE's request path: bytes (mutated valid requests and noise) go through the same
transport, protocol, processor and handler the server uses, in process. Whatever the bytes,
the outcome is a well-formed reply or a refused connection (a transport/protocol error):
never another exception, never a hang, and the real server still scans afterwards."""

from __future__ import annotations

import socket
import struct
import threading

import pytest
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TCyBufferedTransport

from starscan.core.thrift_defs import wire
from starscan.provider.handler import ExternalServiceHandler
from starscan.thrift.request_protocol import request_protocol_factory
from starscan.thrift.server import _LimitedSocket


def _s(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def _call(name: bytes, args: bytes) -> bytes:
    return b"\x80\x01\x00\x01" + _s(name) + struct.pack(">i", 1) + args


def seeds(plan_text: str, tablets: list[int]) -> list[bytes]:
    tl = b"\x0f\x00\x04\x0a" + struct.pack(">i", len(tablets)) + b"".join(struct.pack(">q", t) for t in tablets)
    open_args = (b"\x0c\x00\x01" + b"\x0b\x00\x01" + _s(b"default_cluster") + b"\x0b\x00\x02" + _s(b"db1")
                 + b"\x0b\x00\x03" + _s(b"t1") + tl + b"\x0b\x00\x05" + _s(plan_text.encode())
                 + b"\x08\x00\x06" + struct.pack(">i", 2) + b"\x00\x00")
    next_args = b"\x0c\x00\x01" + b"\x0b\x00\x01" + _s(b"0badc0de-0000-4000-8000-00000000feed") + b"\x0a\x00\x02" + struct.pack(">q", 0) + b"\x00\x00"
    close_args = b"\x0c\x00\x01" + b"\x0b\x00\x01" + _s(b"x") + b"\x00\x00"
    return [_call(b"open_scanner", open_args), _call(b"get_next", next_args), _call(b"close_scanner", close_args)]


@st.composite
def mutated(draw, base: list[bytes]):
    data = bytearray(draw(st.sampled_from(base)))
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "dup"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            data[at:at] = data[at:at + draw(st.integers(1, 16))]
    return bytes(data)


def run_bytes(handler: ExternalServiceHandler, data: bytes) -> tuple[bytes, BaseException | None]:
    """Feed ``data`` to the server's stack over a real socket pair; the reply bytes and the
    exception that ended processing (None when the peer's bytes simply ran out)."""
    ours, theirs = socket.socketpair()
    ours.settimeout(10)
    theirs.settimeout(10)
    processor = TProcessor(wire.TStarrocksExternalService, handler)
    trans = TCyBufferedTransport(_LimitedSocket(ours, 1 << 20))
    iprot = request_protocol_factory().get_protocol(trans)
    oprot = TCyBinaryProtocolFactory(strict_read=False, strict_write=True).get_protocol(trans)
    outcome: list[BaseException | None] = [None]

    def serve():
        try:
            while True:
                processor.process(iprot, oprot)
        except BaseException as exc:  # noqa: BLE001 - classified by the test
            outcome[0] = exc
        finally:
            ours.shutdown(socket.SHUT_RDWR)  # as the server does: the peer sees the end at once

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    theirs.sendall(data)
    theirs.shutdown(socket.SHUT_WR)
    reply = b""
    try:
        while chunk := theirs.recv(65536):
            reply += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    t.join(30)
    assert not t.is_alive(), "the request path hung on these bytes"
    ours.close()
    theirs.close()
    return reply, outcome[0]


# What ends a connection on bad bytes (the server's handler catches them all and drops only
# that connection). SystemError: thriftpy2's Cython reader on a negative name length.
ALLOWED = ("TTransportException", "TProtocolException", "ProtocolError", "TDecodeException", "TApplicationException",
           "UnicodeDecodeError", "ReadLimitExceeded", "SystemError")


@pytest.fixture(scope="module")
def handler(server):
    return ExternalServiceHandler(server.service)


@pytest.fixture(scope="module")
def base(client):
    body = client.plan("db1", "t1", "select k1 from db1.t1")
    return seeds(body["opaqued_query_plan"], [int(t) for t in body["partitions"]])


def test_fuzz_thrift_requests(handler, base, client, server):
    @fuzz_settings
    @given(st.one_of(mutated(base), st.binary(max_size=256)))
    def check(data):
        reply, exc = run_bytes(handler, data)
        if exc is not None:
            assert type(exc).__name__ in ALLOWED, f"{type(exc).__name__}: {exc} for {data!r}"
        if reply:
            assert reply[:3] == b"\x80\x01\x00", reply[:32]
        assert b"INTERNAL_ERROR" not in reply and b"Error: " not in reply, f"an internal error for {data!r}: {reply!r}"

    check()
    for ctx in server.contexts.snapshot():  # what the fuzzed opens left behind
        if ctx.client == "":
            server.contexts.remove(ctx.context_id)
    assert sorted(client.read("db1", "t1", "select k1 from db1.t1").column("k1").to_pylist()) == [1, 2, 3]

"""Golden TBinaryProtocol bytes, written out by hand, on a raw socket to the BE.

Requests are the exact bytes a Java `TBinaryProtocol` client (the Factory default: strict
write) puts on the socket; replies are compared byte for byte with what the StarRocks BE
sends. Nothing here uses thriftpy2 or the Apache Thrift library to encode or decode.

Layout reminder (big-endian):
  message  = i32 (0x80010000 | type) + i32 len + name + i32 seqid      (strict)
           | i32 len + name + i8 type + i32 seqid                      (old style)
  field    = i8 ttype + i16 id + value;  struct ends with i8 0 (STOP)
  ttypes   = BOOL 0x02, I32 0x08, I64 0x0a, STRING 0x0b, STRUCT 0x0c, LIST 0x0f
  messages = CALL 1, REPLY 2, EXCEPTION 3
"""

from __future__ import annotations

import socket
import struct
import time

import httpx
import pyarrow as pa
import pytest

UNKNOWN_CTX = "0badc0de-0000-4000-8000-00000000feed"
VECTOR_SQL = "select `k1`,`v1` from `db1`.`t1` where (`k1` > 0)"


# ---- tiny hand encoders (fixed-width big-endian integers and length-prefixed strings) ------
def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return i32(len(raw)) + raw


def strict_header(name: str, mtype: int, seqid: int) -> bytes:
    return bytes([0x80, 0x01, 0x00, mtype]) + s(name) + i32(seqid)


def get_next_call(ctx: str, offset: int, seqid: int) -> bytes:
    return (
        strict_header("get_next", 1, seqid)
        + b"\x0c\x00\x01"                                  # args field 1 `params`: struct
        + b"\x0b\x00\x01" + s(ctx)                         #   1: context_id string
        + b"\x0a\x00\x02" + i64(offset)                    #   2: offset i64
        + b"\x00"                                          #   STOP TScanNextBatchParams
        + b"\x00"                                          # STOP get_next_args
    )


def close_call(ctx: str, seqid: int) -> bytes:
    return strict_header("close_scanner", 1, seqid) + b"\x0c\x00\x01" + b"\x0b\x00\x01" + s(ctx) + b"\x00" + b"\x00"


def status_struct(code: int, msg: str | None = None) -> bytes:
    out = b"\x08\x00\x01" + i32(code)                       # 1: status_code i32 (enum)
    if msg is not None:
        out += b"\x0f\x00\x02" + b"\x0b" + i32(1) + s(msg)  # 2: error_msgs list<string>, 1 element
    return out + b"\x00"


def get_next_error_reply(seqid: int, code: int, msg: str) -> bytes:
    return (
        strict_header("get_next", 2, seqid)
        + b"\x0c\x00\x00"                                  # result field 0 `success`: TScanBatchResult
        + b"\x0c\x00\x01" + status_struct(code, msg)       #   1: status
        + b"\x00"                                          #   STOP (no eos, no rows)
        + b"\x00"                                          # STOP get_next_result
    )


def close_ok_reply(seqid: int) -> bytes:
    return strict_header("close_scanner", 2, seqid) + b"\x0c\x00\x00" + b"\x0c\x00\x01" + status_struct(0) + b"\x00" + b"\x00"


# ---- raw socket helpers ----------------------------------------------------------------------
def connect(be_addr, timeout: float = 60.0) -> socket.socket:
    sock = socket.create_connection(be_addr, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes: {buf!r}")
        buf += chunk
    return buf


def assert_nothing_more(sock: socket.socket, wait: float = 0.3) -> None:
    sock.settimeout(wait)
    try:
        extra = sock.recv(65536)
    except TimeoutError:
        extra = None
    finally:
        sock.settimeout(60)
    assert extra is None, f"unexpected bytes after the reply: {extra!r}"


def roundtrip(sock: socket.socket, request: bytes, expected: bytes) -> None:
    sock.sendall(request)
    got = recv_exact(sock, len(expected))
    assert got.hex(" ") == expected.hex(" ")
    assert_nothing_more(sock)


def wait_closed_by_server(sock: socket.socket, within: float = 15.0) -> None:
    """The server drops a connection it cannot parse (any bytes it sends first are ignored)."""
    deadline = time.monotonic() + within
    sock.settimeout(within)
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return
        except TimeoutError:
            raise AssertionError("the server kept a connection open after unparsable bytes") from None
        if not chunk:
            return
        assert time.monotonic() < deadline


class Reader:
    """Walks a reply byte by byte, asserting each expected piece."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def take(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def expect(self, raw: bytes, what: str) -> None:
        got = self.take(len(raw))
        assert got.hex(" ") == raw.hex(" "), what

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def string(self) -> bytes:
        n = self.i32()
        assert 0 <= n < 64 << 20
        return self.take(n)


@pytest.fixture(scope="module")
def vector_plan(fe_url) -> tuple[str, list[int]]:
    r = httpx.post(f"{fe_url}/api/db1/t1/_query_plan", content='{"sql": "' + VECTOR_SQL + '"}',
                   headers={"Authorization": "Basic cm9vdDo=", "Content-Type": "application/json; charset=UTF-8"},
                   timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    return body["opaqued_query_plan"], [int(k) for k in body["partitions"]]


# ---- golden replies --------------------------------------------------------------------------
def test_request_bytes_are_what_java_writes():
    # The hand encoder itself, pinned to literal bytes (TBinaryProtocol, strict write).
    assert get_next_call("ab", 5, 7) == bytes.fromhex(
        "80010001" "00000008" "6765745f6e657874" "00000007"
        "0c0001" "0b0001" "00000002" "6162" "0a0002" "0000000000000005" "00" "00"
    )
    assert close_call("ab", 9) == bytes.fromhex(
        "80010001" "0000000d" "636c6f73655f7363616e6e6572" "00000009" "0c0001" "0b0001" "00000002" "6162" "00" "00"
    )


def test_get_next_unknown_context_golden(be_addr):
    msg = f"context_id: {UNKNOWN_CTX} not found"
    expected = bytes.fromhex(
        "80010002" "00000008" "6765745f6e657874" "0000002a"     # REPLY 'get_next' seqid 42
        "0c0000"                                                # success: struct
        "0c0001"                                                #   status: struct
        "080001" "0000001f"                                     #     status_code = 31 NOT_FOUND
        "0f0002" "0b" "00000001"                                #     error_msgs: list<string>[1]
    ) + s(msg) + bytes.fromhex(
        "00"                                                    #   STOP TStatus
        "00"                                                    # STOP TScanBatchResult (no eos, no rows)
        "00"                                                    # STOP result
    )
    assert expected == get_next_error_reply(42, 31, msg)
    with connect(be_addr) as sock:
        roundtrip(sock, get_next_call(UNKNOWN_CTX, 0, 42), expected)
        # same connection, next call (seqid is echoed, not checked)
        roundtrip(sock, get_next_call(UNKNOWN_CTX, 0, -5), get_next_error_reply(-5, 31, msg))


def test_get_next_without_context_id_golden(be_addr):
    # An empty TScanNextBatchParams: the BE reads an unset string as "" (C++ default).
    msg = "context_id:  not found"
    with connect(be_addr) as sock:
        roundtrip(sock, strict_header("get_next", 1, 17) + b"\x0c\x00\x01" + b"\x00" + b"\x00",
                  get_next_error_reply(17, 31, msg))


def test_close_scanner_golden(be_addr):
    expected = bytes.fromhex(
        "80010002" "0000000d" "636c6f73655f7363616e6e6572" "00000003"  # REPLY 'close_scanner' seqid 3
        "0c0000" "0c0001" "080001" "00000000" "00" "00" "00"            # success{status{OK}} no error_msgs
    )
    assert expected == close_ok_reply(3)
    with connect(be_addr) as sock:
        roundtrip(sock, close_call(UNKNOWN_CTX, 3), expected)
        roundtrip(sock, close_call(UNKNOWN_CTX, 4), close_ok_reply(4))   # idempotent
        # context_id unset (an empty TScanCloseParams): still OK
        roundtrip(sock, strict_header("close_scanner", 1, 5) + b"\x0c\x00\x01\x00\x00", close_ok_reply(5))


def test_old_style_header_is_accepted(be_addr):
    """Java's TBinaryProtocol reads leniently; the BE must too (no version word)."""
    msg = f"context_id: {UNKNOWN_CTX} not found"
    old_get_next = (
        s("get_next") + b"\x01" + i32(11)                    # name, CALL, seqid 11 (no 0x8001 version)
        + b"\x0c\x00\x01" + b"\x0b\x00\x01" + s(UNKNOWN_CTX) + b"\x0a\x00\x02" + i64(0) + b"\x00" + b"\x00"
    )
    old_close = s("close_scanner") + b"\x01" + i32(12) + b"\x0c\x00\x01" + b"\x0b\x00\x01" + s(UNKNOWN_CTX) + b"\x00\x00"
    with connect(be_addr) as sock:
        roundtrip(sock, old_get_next, get_next_error_reply(11, 31, msg))
        roundtrip(sock, old_close, close_ok_reply(12))
        # and a strict one on the same connection afterwards
        roundtrip(sock, get_next_call(UNKNOWN_CTX, 0, 13), get_next_error_reply(13, 31, msg))


def test_full_scan_in_hand_written_bytes(be_addr, vector_plan):
    plan, tablets = vector_plan
    open_call = (
        strict_header("open_scanner", 1, 1)
        + b"\x0c\x00\x01"                                          # params
        + b"\x0b\x00\x01" + s("default_cluster")                   # 1 cluster
        + b"\x0b\x00\x02" + s("db1")                               # 2 database
        + b"\x0b\x00\x03" + s("t1")                                # 3 table
        + b"\x0f\x00\x04" + b"\x0a" + i32(len(tablets)) + b"".join(i64(t) for t in tablets)  # 4 tablet_ids
        + b"\x0b\x00\x05" + s(plan)                                # 5 opaqued_query_plan
        + b"\x08\x00\x06" + i32(65536)                             # 6 batch_size
        + b"\x0b\x00\x09" + s("root")                              # 9 user
        + b"\x0b\x00\x0a" + s("")                                  # 10 passwd
        + b"\x08\x00\x0c" + i32(3600)                              # 12 query_timeout
        + b"\x0a\x00\x0d" + i64(2147483648)                        # 13 mem_limit
        + b"\x00" + b"\x00"
    )
    with connect(be_addr) as sock:
        sock.sendall(open_call)
        r = Reader(sock)
        r.expect(strict_header("open_scanner", 2, 1), "message header")
        r.expect(b"\x0c\x00\x00" + b"\x0c\x00\x01" + status_struct(0), "success.status = OK, no error_msgs")
        r.expect(b"\x0b\x00\x02" + i32(36), "context_id: string of 36 bytes")
        ctx = r.take(36).decode("ascii")
        assert ctx == ctx.lower() and [len(p) for p in ctx.split("-")] == [8, 4, 4, 4, 12]
        r.expect(
            b"\x0f\x00\x03" + b"\x0c" + i32(2)                      # selected_columns: list<struct>[2]
            + b"\x0b\x00\x01" + s("k1") + b"\x08\x00\x02" + i32(5) + b"\x00"     # {k1, INT}
            + b"\x0b\x00\x01" + s("v1") + b"\x08\x00\x02" + i32(15) + b"\x00"    # {v1, VARCHAR}
            + b"\x00" + b"\x00",
            "selected_columns, then STOP STOP",
        )
        assert_nothing_more(sock)

        # offset mismatch, golden
        roundtrip(sock, get_next_call(ctx, 1, 2),
                  get_next_error_reply(2, 31, f"context_id={ctx}, send_offset=1, context_offset=0"))

        # data: status OK, eos=false (bool 0x00), rows binary; one or more replies (1..batch_size rows each)
        offset, k1s, seqid = 0, [], 100
        while offset < 3:
            seqid += 1
            sock.sendall(get_next_call(ctx, offset, seqid))
            r.expect(strict_header("get_next", 2, seqid), "header")
            r.expect(b"\x0c\x00\x00" + b"\x0c\x00\x01" + status_struct(0) + b"\x02\x00\x02\x00" + b"\x0b\x00\x03",
                     "success{status OK, eos=false, rows: ...")
            rows = r.string()
            r.expect(b"\x00\x00", "STOP STOP")
            assert_nothing_more(sock)
            assert rows.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")  # IPC stream end-of-stream marker
            table = pa.ipc.open_stream(rows).read_all()
            assert table.num_rows > 0
            assert table.schema.names == ["k1", "v1"]
            k1s += table.column("k1").to_pylist()
            offset += table.num_rows
        assert offset == 3 and sorted(k1s) == [1, 2, 3]

        # end: eos=true (bool 0x01), rows unset, twice
        eos = strict_header("get_next", 2, 4) + b"\x0c\x00\x00" + b"\x0c\x00\x01" + status_struct(0) + b"\x02\x00\x02\x01" + b"\x00\x00"
        roundtrip(sock, get_next_call(ctx, 3, 4), eos)
        roundtrip(sock, get_next_call(ctx, 3, 4), eos)

        roundtrip(sock, close_call(ctx, 5), close_ok_reply(5))
        roundtrip(sock, get_next_call(ctx, 3, 6), get_next_error_reply(6, 31, f"context_id: {ctx} not found"))


def test_refused_open_golden(be_addr):
    """open_scanner without batch_size (plan "@@@"): INVALID_ARGUMENT, context_id, selected_columns []."""
    call = (
        strict_header("open_scanner", 1, 8)
        + b"\x0c\x00\x01" + b"\x0b\x00\x01" + s("default_cluster") + b"\x0b\x00\x02" + s("db1")
        + b"\x0b\x00\x03" + s("t1") + b"\x0f\x00\x04" + b"\x0a" + i32(1) + i64(1)
        + b"\x0b\x00\x05" + s("@@@") + b"\x00\x00"
    )
    with connect(be_addr) as sock:
        sock.sendall(call)
        r = Reader(sock)
        r.expect(strict_header("open_scanner", 2, 8), "header")
        r.expect(b"\x0c\x00\x00" + b"\x0c\x00\x01" + status_struct(33, "batch_size is not set"), "status")
        r.expect(b"\x0b\x00\x02" + i32(36), "context_id")
        ctx = r.take(36).decode("ascii")
        r.expect(b"\x0f\x00\x03" + b"\x0c" + i32(0) + b"\x00\x00", "selected_columns = [] then STOP STOP")
        assert_nothing_more(sock)
        roundtrip(sock, close_call(ctx, 9), close_ok_reply(9))


# ---- robustness ------------------------------------------------------------------------------
def test_unknown_method_gets_an_exception_and_the_connection_lives_on(be_addr):
    with connect(be_addr) as sock:
        sock.sendall(strict_header("drop_table", 1, 21) + b"\x0c\x00\x01\x0b\x00\x01" + s("x") + b"\x00\x00")
        r = Reader(sock)
        r.expect(strict_header("drop_table", 3, 21), "EXCEPTION header")
        # TApplicationException: its type (field 2, i32), a message (field 1, string) if any
        # (thriftpy2 sends none), then stop.
        fields: dict[int, object] = {}
        while (kind := r.take(1)) != b"\x00":
            field = struct.unpack(">h", r.take(2))[0]
            assert (field, kind) in ((1, b"\x0b"), (2, b"\x08")), f"unexpected field {field} of type {kind!r}"
            fields[field] = r.string() if kind == b"\x0b" else r.i32()
        assert fields.get(2) == 1, f"TApplicationException type UNKNOWN_METHOD(1) expected: {fields}"
        roundtrip(sock, close_call(UNKNOWN_CTX, 22), close_ok_reply(22))


@pytest.mark.parametrize("junk", [
    pytest.param(b"\xde\xad\xbe\xef" * 8, id="bad-version"),
    pytest.param(b"\x80\x02\x00\x01" + s("get_next") + i32(1) + b"\x00", id="unknown-protocol-version"),
    pytest.param(strict_header("get_next", 1, 1) + b"\x0c\x00\x01" + b"\x0b\x00\x01" + i32(-7) + b"\x00\x00", id="negative-string-length"),
])
def test_unparsable_bytes_drop_the_connection_only(be_addr, client, junk):
    with connect(be_addr) as sock:
        sock.sendall(junk)
        wait_closed_by_server(sock)
    _assert_server_still_scans(client)


@pytest.mark.parametrize("junk", [
    pytest.param(get_next_call(UNKNOWN_CTX, 0, 1)[:25], id="truncated-get_next"),
    pytest.param(b"\x80\x01", id="truncated-header"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: be\r\n\r\n", id="http-request"),
    pytest.param(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00", id="zeros"),
    pytest.param(b"\x7f\xff\xff\xff" + b"x" * 64, id="old-style-header-huge-name"),
    pytest.param(strict_header("get_next", 1, 1) + b"\x0c\x00\x01" + b"\x0b\x00\x01" + i32(0x7FFFFFF0) + b"ab", id="huge-string"),
])
def test_truncated_or_foreign_bytes_do_not_hurt(be_addr, client, junk):
    with connect(be_addr) as sock:
        sock.sendall(junk)
        time.sleep(0.3)
        sock.shutdown(socket.SHUT_WR)  # hang up mid-message
        sock.settimeout(15)
        try:
            while sock.recv(65536):
                pass
        except (TimeoutError, ConnectionResetError):
            pass
    _assert_server_still_scans(client)


def test_mid_message_hangup_then_normal_calls_on_a_new_connection(be_addr):
    with connect(be_addr) as sock:
        sock.sendall(close_call(UNKNOWN_CTX, 1)[:-3])
    with connect(be_addr) as sock:
        roundtrip(sock, close_call(UNKNOWN_CTX, 2), close_ok_reply(2))
        roundtrip(sock, get_next_call(UNKNOWN_CTX, 0, 3),
                  get_next_error_reply(3, 31, f"context_id: {UNKNOWN_CTX} not found"))


def _assert_server_still_scans(client) -> None:
    table = client.read("db1", "t1", VECTOR_SQL, batch_size=2)
    assert sorted(table.column("k1").to_pylist()) == [1, 2, 3]

"""The client's transport (starscan/client/transport.py) over real sockets: replies written
by thriftpy2's own Cython writer, sent in pieces of every size, read back equal, the rows
as an Arrow buffer; a connection closed mid-reply is thriftpy2's END_OF_FILE."""

from __future__ import annotations

import random
import socket
import threading

import pyarrow as pa
import pytest
from support.sockets import sent_bytes
from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.protocol.binary import TBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TCyBufferedTransport, TMemoryBuffer, TSocket, TTransportException

from starscan.client.transport import DIRECT_READ_BYTES, ArrowReadTransport
from starscan.core.thrift_defs import wire

SERVICE = wire.TStarrocksExternalService


def _reply_bytes(seqid: int, rows: bytes | None, eos: bool = False, msgs=None) -> bytes:
    """One get_next reply message, as thriftpy2's Cython writer puts it on the wire."""
    result = SERVICE.get_next_result(success=wire.TScanBatchResult(
        status=wire.TStatus(status_code=wire.TStatusCode.OK, error_msgs=msgs), eos=eos, rows=rows))

    def write(sock):
        proto = TCyBinaryProtocolFactory().get_protocol(TCyBufferedTransport(TSocket(sock=sock)))
        proto.write_message_begin("get_next", TMessageType.REPLY, seqid)
        proto.write_struct(result)
        proto.write_message_end()
        proto.trans.flush()

    return sent_bytes(write)


def _ipc(rows: int) -> bytes:
    batch = pa.record_batch({"k": pa.array(range(rows), pa.int64()), "s": pa.array([f"v{i}" * 9 for i in range(rows)])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _serve_in_pieces(data: bytes, seed: int, close_after: int | None = None):
    """A socket whose peer sends ``data`` in pieces of random sizes (1 byte to 200 KB)."""
    ours, theirs = socket.socketpair()
    rng = random.Random(seed)
    end = len(data) if close_after is None else close_after

    def send():
        at = 0
        while at < end:
            n = min(end - at, rng.choice([1, 3, 7, 100, 4096, 65535, 200_000]))
            theirs.sendall(data[at:at + n])
            at += n
        theirs.close()

    threading.Thread(target=send, daemon=True).start()
    return ours


def _read_replies(sock: socket.socket, count: int):
    proto = TBinaryProtocol(ArrowReadTransport(TSocket(sock=sock)))
    out = []
    for _ in range(count):
        name, mtype, seqid = proto.read_message_begin()
        assert (name, mtype) == ("get_next", TMessageType.REPLY)
        result = SERVICE.get_next_result()
        proto.read_struct(result)
        out.append((seqid, result.success))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_replies_in_pieces_of_any_size_read_back_equal(seed):
    small, large = _ipc(3), _ipc(20_000)
    assert len(small) < DIRECT_READ_BYTES < len(large)
    messages = [(1, large, False, None), (2, small, False, None), (3, None, True, ["eos rows: 5"]), (4, large, False, None)]
    data = b"".join(_reply_bytes(*m) for m in messages)
    got = _read_replies(_serve_in_pieces(data, seed), len(messages))
    for (seqid, rows, eos, msgs), (got_seqid, result) in zip(messages, got):
        assert got_seqid == seqid and result.eos == eos and result.status.status_code == wire.TStatusCode.OK
        assert result.status.error_msgs == msgs
        if rows is None:
            assert result.rows is None
            continue
        assert bytes(result.rows) == rows
        # A reply's rows of 64 KB or more are one Arrow buffer, read as a batch without a copy.
        assert isinstance(result.rows, pa.Buffer if len(rows) >= DIRECT_READ_BYTES else bytes)
        assert pa.ipc.open_stream(result.rows).read_all().num_rows == (20_000 if rows is large else 3)


@pytest.mark.parametrize("cut", ["in the header", "in the rows"])
def test_a_connection_closed_mid_reply_is_end_of_file(cut):
    data = _reply_bytes(1, _ipc(20_000))
    sock = _serve_in_pieces(data, 1, close_after=10 if cut == "in the header" else len(data) - 1000)
    with pytest.raises(TTransportException) as info:
        _read_replies(sock, 1)
    assert info.value.type == TTransportException.END_OF_FILE


def test_requests_are_written_whole_at_flush():
    ours, theirs = socket.socketpair()
    trans = ArrowReadTransport(TSocket(sock=ours))
    proto = TBinaryProtocol(trans)
    params = wire.TScanNextBatchParams(context_id="ctx-1", offset=4096)
    proto.write_message_begin("get_next", TMessageType.CALL, 7)
    proto.write_struct(SERVICE.get_next_args(params=params))
    proto.write_message_end()
    theirs.settimeout(0.2)
    with pytest.raises(socket.timeout):
        theirs.recv(1)  # nothing before the flush
    trans.flush()
    expected = TMemoryBuffer()
    check = TBinaryProtocol(expected)
    check.write_message_begin("get_next", TMessageType.CALL, 7)
    check.write_struct(SERVICE.get_next_args(params=params))
    theirs.settimeout(5)
    got = b""
    while len(got) < len(expected.getvalue()):
        got += theirs.recv(1 << 16)
    assert got == expected.getvalue()
    ours.close()
    theirs.close()


def test_a_long_status_message_is_text_not_a_buffer():
    """Only Arrow IPC stays an Arrow buffer: a status message of 64 KB or more (a real BE may
    quote a long statement) is decoded as text like any other."""
    long_message = "The Sql is invalid: " + "x" * 100_000
    data = _reply_bytes(1, None, eos=False, msgs=[long_message]) + _reply_bytes(2, _ipc(20_000))
    (_, first), (_, second) = _read_replies(_serve_in_pieces(data, 3), 2)
    assert first.status.error_msgs == [long_message]
    assert isinstance(second.rows, pa.Buffer)


@pytest.fixture
def unanswered_port():
    """A port whose connections are never accepted: its listen queue is full, so a further
    connect waits for the peer, as with a host that does not answer (Linux drops the SYN)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fillers = []
    for _ in range(8):  # fill the queue (its length is backlog + 1 and a little slack)
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(server.getsockname())
        fillers.append(s)
    yield server.getsockname()[1]
    for s in fillers:
        s.close()
    server.close()


def test_request_connect_timeout_is_the_limit_for_connecting_to_a_be_and_the_fe(unanswered_port):
    """``starrocks.request.connect.timeout.ms``: connecting gives up after it, however long
    the read timeout (here 600 s, which the test's own time limit would end first)."""
    from starscan.client import NetworkError
    from starscan.client.protocol import StarscanClient, thrift_client

    with pytest.raises(TTransportException):
        thrift_client("127.0.0.1", unanswered_port, timeout_s=600, connect_timeout_s=0.2)
    client = StarscanClient(f"http://127.0.0.1:{unanswered_port}", timeout_s=600, connect_timeout_s=0.2)
    with pytest.raises(NetworkError, match="ConnectTimeout"):  # the client's own error, not httpx's
        client.schema("db", "t")

"""The BE writes ``get_next`` replies with scatter-gather sends (starscan/thrift/server._Processor):
byte for byte what thriftpy2's own writer sends, over real sockets."""

from __future__ import annotations

import socket
import time

import pyarrow as pa
import pytest
from support.sockets import sent_bytes
from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.thrift import TMessageType, TProcessor
from thriftpy2.transport import TCyBufferedTransport, TCyMemoryBuffer, TSocket

from starscan.arrow.wire import BatchConverter
from starscan.core.sql_types import parse_schema
from starscan.core.thrift_defs import wire
from starscan.thrift.reply_keepalive import KEEPALIVE_FIELD, ReplyKeepAlive
from starscan.thrift.server import _Processor, send_parts

FACTORY = TCyBinaryProtocolFactory(strict_read=False, strict_write=True)
SERVICE = wire.TStarrocksExternalService


def _sent(write) -> bytes:
    """What ``write(oprot)`` puts on a socket, read by a thread at the other end."""
    return sent_bytes(lambda sock: write(FACTORY.get_protocol(TCyBufferedTransport(TSocket(sock=sock)))))


def _reply(rows, eos=False, msgs=None):
    return SERVICE.get_next_result(success=wire.TScanBatchResult(
        status=wire.TStatus(status_code=wire.TStatusCode.OK, error_msgs=msgs), eos=eos, rows=rows))


def _batch(rows: int) -> tuple[BatchConverter, pa.RecordBatch]:
    fields = parse_schema('{"type":"struct","fields":[{"name":"k","type":"long","nullable":true,"metadata":{}},'
                          '{"name":"s","type":"string","nullable":true,"metadata":{}}]}')
    converter = BatchConverter([(f.name, f.type, True) for f in fields])
    batch = pa.record_batch({"k": pa.array(range(rows), pa.int64()), "s": pa.array([f"v{i}" * 20 for i in range(rows)])},
                            schema=converter.schema)
    return converter, batch


@pytest.mark.parametrize("rows", [1, 4096, 20000])
def test_a_reply_with_rows_is_what_thriftpy2_writes(rows):
    converter, batch = _batch(rows)
    stream = converter.ipc_stream(batch, batch.serialize())
    processor = _Processor(SERVICE, object(), FACTORY)
    ours = _sent(lambda oprot: processor.send_result(oprot, "get_next", _reply(stream, msgs=["x"]), 42))
    theirs = _sent(lambda oprot: TProcessor.send_result(processor, oprot, "get_next", _reply(bytes(stream), msgs=["x"]), 42))
    assert ours == theirs
    assert len(ours) > len(bytes(stream))
    # the rows read back as the batch sent
    assert pa.ipc.open_stream(bytes(stream)).read_all().to_batches()[0].equals(batch)


def test_bytes_rows_eos_and_other_calls_are_written_as_before():
    processor = _Processor(SERVICE, object(), FACTORY)
    results = {
        "rows": lambda: ("get_next", _reply(b"\x01\x02\x03")),
        "eos": lambda: ("get_next", _reply(None, eos=True)),
        "close": lambda: ("close_scanner", SERVICE.close_scanner_result(
            success=wire.TScanCloseResult(status=wire.TStatus(status_code=wire.TStatusCode.OK)))),
    }
    for name, make in results.items():
        ours = _sent(lambda oprot, make=make: processor.send_result(oprot, *make(), 7))
        theirs = _sent(lambda oprot, make=make: TProcessor.send_result(processor, oprot, *make(), 7))
        assert ours == theirs, name


def test_partial_sends_resume_where_they_stopped():
    """A socket with a timeout may take part of a scatter-gather send: the rest follows, in order."""
    parts = [b"head", memoryview(bytes(range(256)) * 8000), b"", b"tail"]
    got = sent_bytes(lambda sock: send_parts(sock, parts), recv_size=1000, send_timeout_s=10)
    assert got == b"".join(bytes(p) for p in parts)


class _Handler:
    """Answers get_next with ``reply`` after ``wait_s`` (a scan whose rows are not ready)."""

    def __init__(self, wait_s: float, reply):
        self.wait_s, self.reply = wait_s, reply

    def get_next(self, params):
        time.sleep(self.wait_s)
        return self.reply


def _served(wait_s: float, keepalive_s: float, reply) -> bytes:
    """The bytes one get_next call gets back from a processor whose handler takes ``wait_s``."""
    ours, theirs = socket.socketpair()
    request = TCyBufferedTransport(TSocket(sock=theirs))
    proto = FACTORY.get_protocol(request)
    proto.write_message_begin("get_next", TMessageType.CALL, 7)
    SERVICE.get_next_args(params=wire.TScanNextBatchParams(context_id="c", offset=0)).write(proto)
    proto.write_message_end()
    request.flush()
    trans = TCyBufferedTransport(TSocket(sock=ours))
    processor = _Processor(SERVICE, _Handler(wait_s, reply), FACTORY, ReplyKeepAlive(keepalive_s))
    processor.process(FACTORY.get_protocol(trans), FACTORY.get_protocol(trans))
    ours.close()
    got = bytearray()
    while chunk := theirs.recv(1 << 16):
        got.extend(chunk)
    theirs.close()
    return bytes(got)


def _header() -> bytes:
    buffer = TCyMemoryBuffer()
    FACTORY.get_protocol(buffer).write_message_begin("get_next", TMessageType.REPLY, 7)
    return buffer.getvalue()


@pytest.mark.parametrize("rows", [None, b"\x01\x02\x03"])
def test_a_slow_reply_is_begun_with_fields_a_reader_skips(rows):
    """A reply not ready within the interval: its header, then skippable fields every
    interval, then the rest of the reply exactly as it would have been; a reader's
    generated code reads the same result from it."""
    reply = wire.TScanBatchResult(status=wire.TStatus(status_code=wire.TStatusCode.OK), eos=rows is None, rows=rows)
    normal = _served(0.0, 0.0, reply)
    slow = _served(0.3, 0.02, reply)
    header = _header()
    assert normal.startswith(header)
    assert slow.startswith(header + KEEPALIVE_FIELD)
    rest = slow[len(header):]
    fields = 0
    while rest.startswith(KEEPALIVE_FIELD):
        rest, fields = rest[len(KEEPALIVE_FIELD):], fields + 1
    assert fields >= 3, fields
    assert rest == normal[len(header):]
    for sent in (normal, slow):
        proto = FACTORY.get_protocol(TCyMemoryBuffer(sent))
        assert proto.read_message_begin() == ("get_next", TMessageType.REPLY, 7)
        result = SERVICE.get_next_result()
        result.read(proto)
        assert result.success == reply


def test_a_reply_ready_in_time_is_not_changed():
    reply = wire.TScanBatchResult(status=wire.TStatus(status_code=wire.TStatusCode.OK), eos=False, rows=b"abc")
    assert _served(0.0, 5.0, reply) == _served(0.0, 0.0, reply)

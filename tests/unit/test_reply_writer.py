"""The BE writes ``get_next`` replies with scatter-gather sends (provider/server._Processor):
byte for byte what thriftpy2's own writer sends, over real sockets."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.sockets import sent_bytes
from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TCyBufferedTransport, TSocket

from starscan.arrow.wire import BatchConverter
from starscan.core.sql_types import parse_schema
from starscan.core.thrift_defs import wire
from starscan.provider.server import _Processor, send_parts

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

"""The FE's Thrift relay's decisions (planner/thrift_relay), with BEs that are objects
answering the three calls as a starscan BE does: which BE a scanner opens on, the read-ahead
(a retried offset gets the same reply, another offset the BE's answer), and a lost BE's
scanner resumed on the next BE at the reader's offset. The relay over real sockets, with real
BEs and readers, is tests/integration/test_scale_out.py and tests/hosts."""

from __future__ import annotations

import pyarrow as pa
import pytest

from starscan.core.thrift_defs import wire
from starscan.planner.thrift_relay.scanners import ScanRelay

ROWS = 10
BATCH = 3


def _ipc(start: int, n: int) -> bytes:
    batch = pa.record_batch({"id": pa.array(range(start, start + n), pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


class FakeBe:
    """A BE's scanners: ids 0..ROWS-1 in batches of BATCH; any BE resumes any scanner it is
    asked for at the offset (the shared records), unless ``resumes`` is off."""

    def __init__(self, name: str, resumes: bool = True):
        self.name, self.resumes = name, resumes
        self.up = True
        self.held: dict[str, int] = {}   # context -> rows handed out
        self.calls: list[tuple[str, int | None]] = []

    def connect(self) -> FakeConnection:
        if not self.up:
            raise ConnectionRefusedError(f"{self.name} is down")
        return FakeConnection(self)


class FakeConnection:
    def __init__(self, be: FakeBe):
        self.be = be
        self.closed = False

    def _alive(self) -> None:
        if not self.be.up or self.closed:
            raise ConnectionResetError(f"{self.be.name} is gone")

    def open_scanner(self, params):
        self._alive()
        context_id = f"ctx-{len(self.be.held)}-{self.be.name}"
        self.be.held[context_id] = 0
        self.be.calls.append(("open", None))
        return wire.TScanOpenResult(status=wire.TStatus(status_code=wire.TStatusCode.OK), context_id=context_id,
                                    selected_columns=[])

    def get_next(self, params):
        self._alive()
        self.be.calls.append(("get_next", params.offset))
        if params.context_id not in self.be.held:
            if not self.be.resumes:
                return wire.TScanBatchResult(status=wire.TStatus(status_code=wire.TStatusCode.NOT_FOUND,
                                                                 error_msgs=["context_id not found"]))
            self.be.held[params.context_id] = params.offset  # resumed from its record at the offset
        given = self.be.held[params.context_id]
        if params.offset != given:
            return wire.TScanBatchResult(status=wire.TStatus(status_code=wire.TStatusCode.NOT_FOUND,
                                                             error_msgs=[f"send_offset={params.offset}"]))
        n = min(BATCH, ROWS - given)
        if n == 0:
            return wire.TScanBatchResult(status=wire.TStatus(status_code=wire.TStatusCode.OK), eos=True)
        self.be.held[params.context_id] = given + n
        return wire.TScanBatchResult(status=wire.TStatus(status_code=wire.TStatusCode.OK), eos=False,
                                     rows=_ipc(given, n))

    def close_scanner(self, params):
        self._alive()
        self.be.held.pop(params.context_id, None)
        return wire.TScanCloseResult(status=wire.TStatus(status_code=wire.TStatusCode.OK))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bes():
    return {"be1:9060": FakeBe("be1"), "be2:9060": FakeBe("be2")}


def _relay(bes: dict[str, FakeBe]) -> ScanRelay:
    return ScanRelay(list(bes), lambda: [b for b, be in bes.items() if be.up], lambda b: bes[b].connect())


def _ids(res) -> list[int]:
    return pa.ipc.open_stream(res.rows).read_all().column("id").to_pylist()


def _read(relay: ScanRelay, port: int, context_id: str, lose=None) -> list[int]:
    got: list[int] = []
    while True:
        res = relay.next(port, wire.TScanNextBatchParams(context_id=context_id, offset=len(got)))
        assert res.status.status_code == wire.TStatusCode.OK, res.status
        if res.eos:
            return got
        got += _ids(res)
        if lose is not None:
            lose(len(got))


def _open(relay: ScanRelay, port: int) -> str:
    res = relay.open(port, wire.TScanOpenParams(tablet_ids=[1], batch_size=BATCH))
    assert res.status.status_code == wire.TStatusCode.OK
    return res.context_id


@pytest.mark.parametrize("port, be", [(0, "be1"), (1, "be2")])
def test_a_scanner_opens_on_its_ports_be_and_is_read_through(bes, port, be):
    relay = _relay(bes)
    context_id = _open(relay, port)
    assert context_id.endswith(be)
    assert _read(relay, port, context_id) == list(range(ROWS))
    relay.close(wire.TScanCloseParams(context_id=context_id))
    assert not bes["be1:9060"].held and not bes["be2:9060"].held


def test_a_scanner_whose_ports_be_is_down_opens_on_the_next(bes):
    bes["be1:9060"].up = False
    relay = _relay(bes)
    assert _open(relay, 0).endswith("be2")


def test_with_no_be_up_an_open_is_a_clear_unavailable(bes):
    for be in bes.values():
        be.up = False
    res = _relay(bes).open(0, wire.TScanOpenParams(tablet_ids=[1], batch_size=BATCH))
    assert res.status.status_code == wire.TStatusCode.SERVICE_UNAVAILABLE
    assert "reached no BE" in res.status.error_msgs[0] and "be1:9060" in res.status.error_msgs[0]


def test_the_next_batch_is_asked_for_ahead_and_a_retried_offset_gets_the_same_rows(bes):
    relay = _relay(bes)
    context_id = _open(relay, 0)
    first = relay.next(0, wire.TScanNextBatchParams(context_id=context_id, offset=0))
    again = relay.next(0, wire.TScanNextBatchParams(context_id=context_id, offset=0))  # the reader lost the reply
    assert _ids(first) == _ids(again) == [0, 1, 2]
    relay._scanners[context_id].ahead.drain()
    assert bes["be1:9060"].calls[-1] == ("get_next", BATCH)  # asked for before the reader asks
    assert _ids(relay.next(0, wire.TScanNextBatchParams(context_id=context_id, offset=BATCH))) == [3, 4, 5]


def test_a_lost_be_s_scanner_goes_on_on_the_next_be_at_the_readers_offset(bes):
    relay = _relay(bes)
    context_id = _open(relay, 0)

    def lose(rows: int) -> None:
        if rows == 6:
            bes["be1:9060"].up = False

    assert _read(relay, 0, context_id, lose) == list(range(ROWS))  # every row once
    assert relay._scanners[context_id].be == "be2:9060" and relay._scanners[context_id].moves == 1


def test_a_lost_be_whose_scanner_no_other_be_can_resume_is_a_clear_error(bes):
    bes["be2:9060"].resumes = False
    relay = _relay(bes)
    context_id = _open(relay, 0)
    relay.next(0, wire.TScanNextBatchParams(context_id=context_id, offset=0))
    bes["be1:9060"].up = False
    res = relay.next(0, wire.TScanNextBatchParams(context_id=context_id, offset=BATCH))
    assert res.status.status_code == wire.TStatusCode.SERVICE_UNAVAILABLE
    assert "no other BE resumed it" in res.status.error_msgs[0] and "resumable_scans" in res.status.error_msgs[0]


def test_a_scanner_the_relay_does_not_hold_is_found_on_the_be_that_holds_it(bes):
    """The FE restarted (or another FE opened the scanner): its get_next finds its BE."""
    first = _relay(bes)
    context_id = _open(first, 1)
    bes["be1:9060"].resumes = False  # be1 neither holds nor resumes it: be2 must answer
    restarted = _relay(bes)
    assert _read(restarted, 0, context_id) == list(range(ROWS))

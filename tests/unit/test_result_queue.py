"""provider/result_queue.py on its own: real pyarrow batches, real threads.

Blocking is checked with threads that are joined with a bounded timeout: a call that must
block is seen still running after a short join, a call that must return is joined until it
does (bounded, so a broken queue fails the test instead of hanging it).
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starscan.core.errors import MemLimitExceeded, ScanCancelled, ScanTimeout
from starscan.provider.result_queue import EOS, ResultQueue
from starscan.provider.scheduler import YieldRule

JOIN_S = 10.0     # upper bound for a call that must return
BLOCKED_S = 0.3   # how long a call that must block is watched


def batch(start: int, rows: int) -> pa.RecordBatch:
    ids = list(range(start, start + rows))
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "s": pa.array([f"row-{i}" for i in ids])})


class Call:
    """Run ``fn`` in a daemon thread; keep its result or exception."""

    def __init__(self, fn, *args, **kwargs):
        self.result = None
        self.error: BaseException | None = None
        self.started = threading.Event()

        def run():
            self.started.set()
            try:
                self.result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.started.wait(JOIN_S)

    def blocked(self) -> bool:
        self.thread.join(BLOCKED_S)
        return self.thread.is_alive()

    def wait(self):
        self.thread.join(JOIN_S)
        assert not self.thread.is_alive(), "the call did not return"
        return self


def ids_of(b: pa.RecordBatch) -> list[int]:
    return b.column(0).to_pylist()


# ---- put / take -----------------------------------------------------------------------
def test_put_blocks_when_full_and_resumes_when_the_batch_is_taken():
    q = ResultQueue(100)
    assert Call(q.put, batch(0, 4), 60).wait().result is True
    assert q.bytes == 60 and q.depth == 1

    put = Call(q.put, batch(4, 4), 60)           # 60 + 60 > 100: must wait
    assert put.blocked()
    assert q.depth == 1 and q.bytes == 60

    # Part of the first batch taken: its bytes are still held, so the put still waits.
    part = q.take(3)
    assert ids_of(part) == [0, 1, 2]
    assert put.blocked()
    assert q.bytes == 60

    # The last row of the first batch taken: its bytes are released, the put goes in.
    assert ids_of(q.take(3)) == [3]
    assert put.wait().result is True
    assert put.error is None
    assert q.bytes == 60 and q.depth == 1
    assert ids_of(q.take(10)) == [4, 5, 6, 7]
    assert q.bytes == 0 and q.depth == 0
    assert q.peak_bytes == 60
    assert q.rows_in == 8


def test_put_fits_exactly_at_the_limit():
    q = ResultQueue(100)
    assert q.put(batch(0, 1), 40)
    assert Call(q.put, batch(1, 1), 60).wait().result is True  # 40 + 60 == 100: fits
    assert q.bytes == 100
    assert Call(q.put, batch(2, 1), 1).blocked()               # 101 > 100
    q.close()


def test_one_batch_is_always_admitted_even_over_the_limit():
    q = ResultQueue(10)
    big = Call(q.put, batch(0, 5), 1000).wait()
    assert big.result is True
    assert q.bytes == 1000 and q.peak_bytes == 1000

    second = Call(q.put, batch(5, 1), 1)
    assert second.blocked()                      # the queue holds more than its limit
    assert ids_of(q.take(100)) == [0, 1, 2, 3, 4]
    assert second.wait().result is True
    assert ids_of(q.take(100)) == [5]


def test_take_joins_batches_to_max_rows_in_order_then_eos_after_finish():
    q = ResultQueue(1 << 20)
    q.put(batch(0, 10), 100)
    q.put(batch(10, 2), 100)
    q.finish()
    got = []
    sizes = []
    while True:
        out = q.take(3)
        if out is EOS:
            break
        assert isinstance(out, pa.RecordBatch)
        assert out.schema == batch(0, 1).schema
        sizes.append(out.num_rows)
        got.extend(ids_of(out))
        assert out.column(1).to_pylist() == [f"row-{i}" for i in ids_of(out)]
    # Replies join rows of several batches: max_rows each, fewer only at the end.
    assert sizes == [3, 3, 3, 3]
    assert got == list(range(12))
    assert q.bytes == 0
    assert q.take(3) is EOS                      # EOS again, not an error
    assert q.take(1) is EOS


def test_take_waits_for_data_and_a_finish():
    q = ResultQueue(1 << 20)
    assert q.take(5, timeout=0.05) is None       # nothing yet, not finished
    waiting = Call(q.take, 5)
    assert waiting.blocked()
    q.put(batch(0, 7), 10)
    assert ids_of(waiting.wait().result) == [0, 1, 2, 3, 4]
    assert ids_of(q.take(5)) == [5, 6]       # fill_wait_s=0: what is there, at once
    eos = Call(q.take, 5)
    assert eos.blocked()
    q.finish()
    assert eos.wait().result is EOS


def test_producer_and_consumer_threads_move_every_row_once_within_the_limit():
    q = ResultQueue(1000)
    sizes = [(i * 7) % 13 + 1 for i in range(300)]    # 1..13 rows a batch
    total = sum(sizes)

    def produce():
        start = 0
        for n in sizes:
            assert q.put(batch(start, n), 100 + n)    # 101..113 bytes: 8-9 batches fit
            start += n
        q.finish()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    got: list[int] = []
    max_rows = 1
    while True:
        out = q.take(max_rows, timeout=JOIN_S)
        assert out is not None, "the consumer starved"
        if out is EOS:
            break
        assert 1 <= out.num_rows <= max_rows
        got.extend(ids_of(out))
        max_rows = max_rows % 17 + 1
    producer.join(JOIN_S)
    assert not producer.is_alive()
    assert got == list(range(total))
    assert q.rows_in == total
    assert 0 < q.peak_bytes <= 1000
    assert q.bytes == 0


def test_a_reply_waits_for_batch_size_rows_while_the_producer_keeps_up():
    q = ResultQueue(1 << 20)
    q.put(batch(0, 3), 10)
    waiting = Call(q.take, 10, fill_wait_s=JOIN_S)
    assert waiting.blocked()                          # 3 of 10 rows: waits for the rest
    q.put(batch(3, 4), 10)
    assert waiting.blocked()                          # 7 of 10
    q.put(batch(7, 5), 10)
    assert ids_of(waiting.wait().result) == list(range(10))  # one reply from three batches
    assert q.bytes == 10 and q.depth == 1             # the third batch's last 2 rows still held
    q.finish()
    assert ids_of(q.take(10, fill_wait_s=JOIN_S)) == [10, 11]  # the end of the scan: fewer
    assert q.take(10) is EOS


def test_a_reply_is_sent_short_when_the_fill_wait_ends():
    q = ResultQueue(1 << 20)
    q.put(batch(0, 3), 10)
    short = Call(q.take, 10, fill_wait_s=0.2).wait()
    assert ids_of(short.result) == [0, 1, 2]


def test_a_reply_is_sent_short_when_the_producer_waits_for_room():
    """The queue is full below batch_size rows: waiting would deadlock, so what is there goes."""
    q = ResultQueue(100)
    assert q.put(batch(0, 3), 80)
    blocked_put = Call(q.put, batch(3, 3), 80)
    assert blocked_put.blocked()
    assert ids_of(Call(q.take, 10, fill_wait_s=JOIN_S).wait().result) == [0, 1, 2]
    assert blocked_put.wait().result is True
    waiting = Call(q.take, 10, fill_wait_s=JOIN_S)  # not full now: waits for more or the end
    assert waiting.blocked()
    q.finish()
    assert ids_of(waiting.wait().result) == [3, 4, 5]


def test_a_reply_never_is_empty_while_the_scan_runs():
    q = ResultQueue(1 << 20)
    assert q.take(10, timeout=0.1, fill_wait_s=0) is None  # no row: no reply yet, never an empty one


# ---- fail / close -----------------------------------------------------------------------
def test_fail_wakes_a_blocked_take_with_the_error():
    q = ResultQueue(1 << 20)
    waiting = Call(q.take, 10)
    assert waiting.blocked()
    err = ScanTimeout("the scan exceeded query_timeout of 1 s and was cancelled")
    q.fail(err)
    waiting.wait()
    assert waiting.error is err
    with pytest.raises(ScanTimeout):
        q.take(10)


def test_fail_wakes_a_blocked_put_and_drops_queued_data():
    q = ResultQueue(100)
    assert q.put(batch(0, 3), 80)
    blocked_put = Call(q.put, batch(3, 3), 80)
    assert blocked_put.blocked()
    q.fail(MemLimitExceeded("too big"))
    assert blocked_put.wait().result is False
    assert q.bytes == 0 and q.depth == 0
    # The first failure wins; later puts are refused.
    q.fail(ScanCancelled("later"))
    with pytest.raises(MemLimitExceeded):
        q.take(1)
    assert q.put(batch(6, 1), 1) is False
    assert q.bytes == 0


def test_fail_after_finish_still_reports_the_error_not_eos():
    q = ResultQueue(1 << 20)
    q.put(batch(0, 2), 10)
    q.finish()
    q.fail(ScanCancelled("closed"))
    with pytest.raises(ScanCancelled):
        q.take(10)


def test_close_drops_bytes_and_wakes_both_sides():
    q = ResultQueue(100)
    assert q.put(batch(0, 5), 70)
    blocked_put = Call(q.put, batch(5, 5), 70)
    assert blocked_put.blocked()
    assert q.bytes == 70
    q.close()
    assert q.bytes == 0 and q.depth == 0
    assert blocked_put.wait().result is False
    with pytest.raises(ScanCancelled):
        q.take(1)
    assert q.put(batch(10, 1), 1) is False
    assert q.bytes == 0

    q2 = ResultQueue(100)
    waiting = Call(q2.take, 1)
    assert waiting.blocked()
    q2.close()
    waiting.wait()
    assert isinstance(waiting.error, ScanCancelled)



def test_a_short_batch_does_not_cut_the_reply_sized_batches_after_it():
    """Two tasks push reply-sized batches and each split ends with a short one. Filling the
    short batch's reply from the next batch would cut every later batch in two; instead the
    short batch is a short reply and each later batch is a reply of its own, passed on as
    the IPC message it arrived as."""
    q = ResultQueue(1 << 20)
    sizes = [10, 3, 10, 10, 2, 4, 10]
    start = 0
    for n in sizes:
        q.put(batch(start, n), 10, ipc=f"ipc-{start}")
        start += n
    q.finish()
    replies = []
    while (out := q.take_reply(10)) is not EOS:
        replies.append((ids_of(out[0])[0], out[0].num_rows, out[1]))
    assert replies == [(0, 10, "ipc-0"), (10, 3, "ipc-10"), (13, 10, "ipc-13"), (23, 10, "ipc-23"),
                       (33, 6, None),                      # two short batches joined: 2 + 4
                       (39, 10, "ipc-39")]


# ---- an ordered queue: splits read at once, handed out split after split ---------------
def _drain(q: ResultQueue, max_rows: int = 1000) -> list[int]:
    got: list[int] = []
    while (out := q.take(max_rows, timeout=JOIN_S)) is not EOS:
        assert out is not None, "no rows came"
        got += ids_of(out)
    return got


def test_an_ordered_queue_holds_a_later_split_until_the_earlier_ones_end():
    q = ResultQueue(1 << 20, ordered=True)
    assert q.put(batch(100, 2), 10, split=1)   # split 1 first: held
    assert q.put(batch(200, 2), 10, split=2)
    assert q.take(10, timeout=0.2) is None     # nothing of split 0 yet: nothing to hand out
    assert q.put(batch(0, 3), 10, split=0)
    assert ids_of(q.take(10)) == [0, 1, 2]     # split 0's rows only
    q.end_split(2)                             # split 2 ended before split 1: still held
    assert q.put(batch(102, 1), 10, split=1)
    q.end_split(0)
    assert ids_of(q.take(10, timeout=JOIN_S)) == [100, 101, 102]
    q.end_split(1)                             # split 2 follows at once: it had ended
    q.finish()
    assert _drain(q) == [200, 201]
    assert q.rows_in == 8 and q.bytes == 0


def test_an_unordered_queue_hands_out_every_split_at_once():
    q = ResultQueue(1 << 20)
    q.put(batch(100, 2), 10, split=1)
    q.put(batch(0, 2), 10, split=0)
    q.finish()
    assert _drain(q) == [100, 101, 0, 1]


def test_held_batches_take_half_the_bound_and_never_block_the_split_handed_out():
    q = ResultQueue(100, ordered=True)
    assert q.put(batch(100, 1), 40, split=1)
    assert q.put(batch(101, 1), 10, split=1)   # 50: half the bound
    later = Call(q.put, batch(102, 1), 10, split=1)
    assert later.blocked()                     # over half: waits for its turn
    # The split handed out is not held back by what is held (50 of 100 bytes).
    assert Call(q.put, batch(0, 1), 40, split=0).wait().result is True
    assert q.ready_bytes == 40 and q.bytes == 90
    q.end_split(0)                             # split 1's turn: its held batches are handed out
    assert later.wait().result is True
    assert ids_of(q.take(10)) == [0, 100, 101, 102]
    assert q.ready_bytes == q.bytes == 0


def test_held_batches_keep_the_whole_queue_within_its_bound():
    q = ResultQueue(100, ordered=True)
    assert q.put(batch(0, 1), 90, split=0)     # the split handed out fills the queue
    held = Call(q.put, batch(100, 1), 20, split=1)
    assert held.blocked()                      # 90 + 20 > 100, though nothing is held yet
    assert ids_of(q.take(10)) == [0]
    assert held.wait().result is True
    assert q.bytes == 20 and q.ready_bytes == 0


def test_a_held_batch_times_out_only_while_the_reader_takes_nothing():
    q = ResultQueue(100, ordered=True)
    q.put(batch(100, 1), 60, split=1)
    for i in range(4):
        q.put(batch(i, 1), 1, split=0)
    # The reader takes every 0.25 s, for longer than the rule's 0.8 s: the put never gives up then.
    held = Call(q.put, batch(101, 1), 10, room_wait=YieldRule(0.8), split=1)
    for _ in range(4):
        threading.Event().wait(0.25)
        assert ids_of(q.take(1)) is not None
    assert held.blocked()
    assert held.wait().result is None          # the reader stopped taking: timed out, nothing added
    assert q.rows_in == 5


def test_finish_hands_out_what_is_held_and_fail_drops_it():
    q = ResultQueue(1 << 20, ordered=True)
    q.put(batch(10, 1), 10, split=1)
    q.put(batch(0, 1), 10, split=0)
    q.end_split(0)
    q.end_split(1)
    q.finish()
    assert _drain(q) == [0, 10]

    failed = ResultQueue(1 << 20, ordered=True)
    failed.put(batch(10, 1), 10, split=1)
    failed.fail(ScanTimeout("too slow"))
    assert failed.bytes == failed.ready_bytes == 0
    with pytest.raises(ScanTimeout):
        failed.take(10)


@settings(max_examples=60, deadline=None)
@given(splits=st.lists(st.lists(st.integers(1, 7), max_size=6), min_size=1, max_size=6),
       readers=st.integers(1, 3), max_bytes=st.integers(1, 120), reply=st.integers(1, 9))
def test_an_ordered_queue_gives_every_row_once_in_split_order(splits, readers, max_bytes, reply):
    """Readers claim the splits lowest first (as the sink's ``claim``) and put each split's
    batches (bytes = rows * 10), a reader thread takes replies: the rows are the splits' rows
    in split order, each split's in the order put, whatever the bound and the interleaving."""
    first = 0
    rows: list[list[tuple[int, int]]] = []
    for sizes in splits:
        rows.append([(first + sum(sizes[:i]), n) for i, n in enumerate(sizes)])
        first += sum(sizes)
    q = ResultQueue(max_bytes, ordered=True)
    claims = iter(range(len(splits)))
    claim_lock = threading.Lock()

    def reader() -> None:
        while True:
            with claim_lock:
                number = next(claims, None)
            if number is None:
                return
            for start, n in rows[number]:
                assert q.put(batch(start, n), n * 10, room_wait=YieldRule(JOIN_S), split=number) is True
            q.end_split(number)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(readers)]
    for t in threads:
        t.start()
    got: list[int] = []
    while len(got) < first:
        out = q.take(reply, timeout=JOIN_S)
        assert out is not None, f"stuck after {len(got)} of {first} rows"
        got += ids_of(out)
    for t in threads:
        t.join(JOIN_S)
        assert not t.is_alive()
    q.finish()
    assert q.take(reply) is EOS
    assert got == list(range(first))
    assert q.bytes == 0

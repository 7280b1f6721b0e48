"""The push connection between scan tasks and the BE (provider/push/wire.py,
provider/push/listener.py) over real sockets, without Spark: tasks are played by
TaskSender in threads, as Spark's Python workers run it.

What must hold: only a scan's token opens a connection; a split read again (a retried or
resumed task) neither loses nor repeats a row; a stop reaches a task as a normal end; an
idle reader makes the task yield; a wrong frame fails the scan, not the BE. Each test runs
over TCP and over the Unix socket a BE offers to tasks on its own machine."""

from __future__ import annotations

import os
import socket
import stat
import struct
import threading
import time

import pyarrow as pa
import pytest
from support.sockets import closed_without_a_word
from support.waits import wait_until

from starscan.provider.push.listener import PushListener
from starscan.provider.push.sink import PushSink
from starscan.provider.push.wire import (
    ANY_SPLIT,
    GO,
    HELLO,
    KEEP_SPLIT,
    MAGIC,
    NEXT_SPLIT,
    STOP,
    PushStopped,
    TaskSender,
    recv_exact,
)
from starscan.provider.result_queue import EOS, ResultQueue
from starscan.provider.scheduler import YieldRule

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(start, start + n), pa.int64())], schema=SCHEMA)


@pytest.fixture(params=["tcp", "local"])
def listener(request):
    lst = PushListener("127.0.0.1", 0, local=request.param == "local")
    yield lst
    lst.stop()


def connect(listener) -> socket.socket:
    """A raw connection the way a task on this machine makes one."""
    if listener.local_path is None:
        return socket.create_connection(("127.0.0.1", listener.port), timeout=10)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(listener.local_path)
    return s


def sender_for(listener, token: bytes, split: int, attempt: int) -> TaskSender:
    return TaskSender("127.0.0.1", listener.port, token, split, attempt, listener.local_path)


def sink_for(listener, splits=1, max_bytes=1 << 20, yield_after_s=None) -> PushSink:
    sink = PushSink(ResultQueue(max_bytes), SCHEMA, splits, YieldRule.of(yield_after_s))
    listener.register(sink)
    return sink


def drain(queue: ResultQueue) -> list[int]:
    out = []
    while True:
        b = queue.take(1 << 20, timeout=10)
        assert b is not None, "the queue starved"
        if b is EOS:
            return out
        out.extend(b.column(0).to_pylist())


def send_split(listener, sink, split, batches, attempt=0, end=True):
    sender = sender_for(listener, sink.token, split, attempt)
    try:
        assert sender.go
        for b in batches:
            sender.send(b)
        if end:
            sender.end()
    finally:
        sender.close()


def test_a_split_arrives_whole_and_ends(listener):
    sink = sink_for(listener)
    send_split(listener, sink, 0, [batch(0, 5), batch(5, 5)])
    assert sink.all_ended() and sink.splits[0].delivered == 10
    sink.queue.finish()
    assert drain(sink.queue) == list(range(10))


def test_a_retried_split_neither_loses_nor_repeats_a_row(listener):
    """Attempt 0 delivers two batches and dies; attempt 1 re-reads the split from the
    start (Parquet splits re-read the same rows in the same order): only the rest passes."""
    sink = sink_for(listener)
    send_split(listener, sink, 0, [batch(0, 4), batch(4, 4)], attempt=0, end=False)
    wait_until(lambda: sink.splits[0].delivered == 8, timeout_s=10, interval_s=0.01)
    assert not sink.splits[0].ended
    send_split(listener, sink, 0, [batch(0, 4), batch(4, 4), batch(8, 3), batch(11, 6)], attempt=1)
    assert sink.splits[0].ended and sink.splits[0].delivered == 17
    sink.queue.finish()
    assert drain(sink.queue) == list(range(17))


def test_a_split_already_ended_is_told_to_stop(listener):
    sink = sink_for(listener)
    send_split(listener, sink, 0, [batch(0, 3)])
    late = sender_for(listener, sink.token, 0, 1)
    try:
        assert not late.go
    finally:
        late.close()


def test_forged_and_expired_tokens_get_no_answer_and_add_no_rows(listener):
    sink = sink_for(listener)
    for token in (b"\x00" * 32, sink.token[:-1] + bytes([sink.token[-1] ^ 1])):
        s = connect(listener)
        s.sendall(HELLO.pack(MAGIC, token, 0, 0))
        assert closed_without_a_word(s)
    s = connect(listener)
    s.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"x" * 64)  # not our protocol at all
    assert closed_without_a_word(s)
    send_split(listener, sink, 0, [batch(0, 2)])
    listener.unregister(sink)  # the scan ended: its token is spent
    replay = connect(listener)
    replay.sendall(HELLO.pack(MAGIC, sink.token, 0, 0))
    assert closed_without_a_word(replay)
    sink.queue.finish()
    assert drain(sink.queue) == [0, 1]


def test_a_split_number_out_of_range_is_refused(listener):
    sink = sink_for(listener, splits=2)
    s = connect(listener)
    s.sendall(HELLO.pack(MAGIC, sink.token, 7, 0))
    assert closed_without_a_word(s)


def test_stop_reaches_a_sending_task_as_a_normal_end(listener):
    sink = sink_for(listener)
    sender = sender_for(listener, sink.token, 0, 0)
    try:
        assert sender.go
        sender.send(batch(0, 3))
        sink.stop()
        with pytest.raises(PushStopped):
            for i in range(1000):  # the stop arrives within a send or two
                sender.send(batch(3 + i, 1))
    finally:
        sender.close()
    assert not sink.splits[0].ended


def test_an_idle_reader_makes_the_task_yield_and_the_split_resumes(listener):
    """The queue holds one batch (its whole limit) and nobody reads: after yield_after_s the task is told to
    give its slot back. Read again later, the split goes on where it stopped."""
    sink = sink_for(listener, max_bytes=batch(0, 2).get_total_buffer_size(), yield_after_s=0.2)

    def task():
        try:
            send_split(listener, sink, 0, [batch(i * 2, 2) for i in range(10)])
        except PushStopped:
            pass  # told before its last frame; else its end is ignored: either way it ends normally

    t = threading.Thread(target=task, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive()
    state = sink.splits[0]
    wait_until(lambda: state.yielded, timeout_s=10, interval_s=0.01)
    assert state.yielded and not state.ended
    sink.yield_rule = YieldRule(30)  # read on from here: a stalled reader thread must not make it yield again
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(drain(sink.queue)), daemon=True)
    reader.start()  # the reader reads again: the split is resumed and read to its end
    send_split(listener, sink, 0, [batch(i * 2, 2) for i in range(10)], attempt=1)
    wait_until(lambda: state.ended, timeout_s=10, interval_s=0.01)
    sink.queue.finish()
    reader.join(20)
    assert got == list(range(20))


def test_a_frame_of_an_unknown_kind_ends_that_connection_only(listener):
    sink = sink_for(listener)
    s = connect(listener)
    s.sendall(HELLO.pack(MAGIC, sink.token, 0, 0))
    assert recv_exact(s, 1) == GO
    s.sendall(struct.pack(">cI", b"Q", 3) + b"abc")
    assert closed_without_a_word(s)
    send_split(listener, sink, 0, [batch(0, 2)], attempt=1)
    assert sink.splits[0].ended


def test_a_garbled_batch_fails_the_scan_with_a_clear_error_and_the_listener_goes_on(listener):
    sink = sink_for(listener)
    s = connect(listener)
    s.sendall(HELLO.pack(MAGIC, sink.token, 0, 0))
    assert recv_exact(s, 1) == GO
    s.sendall(struct.pack(">cI", b"B", 16) + b"\xff" * 16)
    s.recv(1)
    s.close()
    with pytest.raises(Exception) as err:
        sink.queue.take(10, timeout=10)
    assert "split 0" in str(err.value)
    other = sink_for(listener)
    send_split(listener, other, 0, [batch(0, 3)])
    other.queue.finish()
    assert drain(other.queue) == [0, 1, 2]


def test_a_stop_byte_is_what_a_stopped_scan_sends(listener):
    sink = sink_for(listener)
    sink.stop()
    s = connect(listener)
    s.sendall(HELLO.pack(MAGIC, sink.token, 0, 0))
    assert s.recv(1) == STOP
    s.close()


def test_tasks_on_the_bes_machine_come_through_the_unix_socket_others_through_tcp():
    lst = PushListener("127.0.0.1", 0, local=True)
    try:
        sink = sink_for(lst, splits=2)
        assert lst.local_path is not None
        send_split(lst, sink, 0, [batch(0, 3)])  # the path exists here: the Unix socket
        assert lst.accepted == {"tcp": 0, "local": 1}
        elsewhere = TaskSender("127.0.0.1", lst.port, sink.token, 1, 0, lst.local_path + ".elsewhere")
        try:  # another machine has no such path: TCP
            assert elsewhere.go
            elsewhere.send(batch(3, 2))
            elsewhere.end()
        finally:
            elsewhere.close()
        assert lst.accepted == {"tcp": 1, "local": 1}
        sink.queue.finish()
        assert sorted(drain(sink.queue)) == list(range(5))
        folder = os.path.dirname(lst.local_path)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700  # no other user reaches the socket
    finally:
        lst.stop()
    assert not os.path.exists(folder)  # removed with the listener


def test_without_a_unix_socket_tasks_push_over_tcp(tmp_path, monkeypatch):
    """A path too long for a socket address (a long TMPDIR): the listener says so, keeps no
    folder, and tasks push over TCP as on another machine."""
    from starscan.provider.push import listener as push_listener

    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    monkeypatch.setattr(push_listener.tempfile, "mkdtemp", lambda prefix: str(deep))
    lst = PushListener("127.0.0.1", 0, local=True)
    try:
        assert lst.local_path is None and not deep.exists()
        sink = sink_for(lst)
        send_split(lst, sink, 0, [batch(0, 4)])
        assert lst.accepted == {"tcp": 1, "local": 0}
        sink.queue.finish()
        assert drain(sink.queue) == [0, 1, 2, 3]
    finally:
        lst.stop()


def test_a_killed_servers_socket_folder_is_removed_by_the_next_listener(tmp_path, monkeypatch):
    """A server killed before it could remove its folder: the next listener removes folders
    whose socket refuses connections or is gone, and keeps a live listener's, and a new
    folder's without a socket yet (another server's, starting)."""
    from starscan.provider.push import listener as push_listener

    monkeypatch.setattr(push_listener.tempfile, "tempdir", str(tmp_path))
    live = PushListener("127.0.0.1", 0, local=True)
    dead_socket = tmp_path / "starscan-push-dead1"
    dead_socket.mkdir(mode=0o700)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead_socket / "push.sock"))  # bound, never listening, then closed: as after a kill
    s.close()
    no_socket = tmp_path / "starscan-push-dead2"
    no_socket.mkdir(mode=0o700)
    long_ago = time.time() - push_listener.STARTING_FOLDER_S - 1
    for old in (dead_socket, no_socket, os.path.dirname(live.local_path)):  # the live one is probed too
        os.utime(old, (long_ago, long_ago))
    starting = tmp_path / "starscan-push-starting"
    starting.mkdir(mode=0o700)
    other = tmp_path / "not-ours"
    other.mkdir()
    try:
        new = PushListener("127.0.0.1", 0, local=True)
        try:
            assert not dead_socket.exists() and not no_socket.exists() and starting.exists()
            assert os.path.exists(live.local_path) and other.exists() and os.path.exists(new.local_path)
            send_split(live, sink_for(live), 0, [batch(0, 2)])  # the live one still serves
        finally:
            new.stop()
    finally:
        live.stop()


# ---- tasks that name no split (the arrow engine's): the BE assigns them ----

def claim_and_send(listener, sink, rows_of, attempt=0, end=True, ask=ANY_SPLIT) -> int | None:
    """What an arrow-engine task does for one split: ask for any, send the assigned one's
    batches (``rows_of(split)``). The split's number, or None when the BE had none left."""
    sender = sender_for(listener, sink.token, ask, attempt)
    try:
        if not sender.go:
            return None
        for b in rows_of(sender.split):
            sender.send(b)
        if end:
            sender.end()
        return sender.split
    finally:
        sender.close()


def test_tasks_that_name_no_split_get_each_split_once_lowest_first(listener):
    sink = sink_for(listener, splits=3)
    got = [claim_and_send(listener, sink, lambda n: [batch(n * 10, 2)]) for _ in range(4)]
    assert got == [0, 1, 2, None]  # then none is left: a stop
    assert sink.all_ended() and not sink.unclaimed() and sink.lost() == []
    sink.queue.finish()
    assert drain(sink.queue) == [0, 1, 10, 11, 20, 21]


def test_a_split_being_read_is_not_given_to_a_second_task(listener):
    sink = sink_for(listener, splits=2)
    first = sender_for(listener, sink.token, ANY_SPLIT, 0)
    try:
        assert first.go and first.split == 0
        first.send(batch(0, 1))
        assert claim_and_send(listener, sink, lambda n: [batch(100, 1)]) == 1  # split 0 is taken
        assert claim_and_send(listener, sink, lambda n: [batch(200, 1)]) is None  # 0 is read, 1 ended
        first.send(batch(1, 1))
        first.end()
    finally:
        first.close()
    sink.queue.finish()
    assert sorted(drain(sink.queue)) == [0, 1, 100]


def test_a_split_left_by_a_failed_task_goes_to_the_next_task_without_its_delivered_rows(listener):
    """Spark retries a task that died mid-split: the new attempt asks for any split, gets the
    one left unfinished, re-reads it from its start, and only the rest passes on."""
    sink = sink_for(listener, splits=2)
    rows = {0: [batch(0, 4), batch(4, 4), batch(8, 4)], 1: [batch(100, 3)]}
    assert claim_and_send(listener, sink, lambda n: rows[n][:2], end=False) == 0  # died after 8 rows
    # Left without an end: what the driver reports if no task is left to read it again.
    wait_until(lambda: sink.lost() == [0], timeout_s=10, interval_s=0.01)
    assert sink.splits[0].delivered == 8 and sink.unclaimed()
    assert claim_and_send(listener, sink, lambda n: rows[n], attempt=1) == 0
    assert claim_and_send(listener, sink, lambda n: rows[n], attempt=1) == 1
    assert sink.all_ended() and sink.lost() == []
    sink.queue.finish()
    assert sorted(drain(sink.queue)) == list(range(12)) + [100, 101, 102]


def test_a_yielded_split_is_the_first_one_given_again(listener):
    sink = sink_for(listener, splits=3, max_bytes=batch(0, 2).get_total_buffer_size(), yield_after_s=0.2)
    try:
        claim_and_send(listener, sink, lambda n: [batch(i * 2, 2) for i in range(10)])
    except PushStopped:
        pass
    wait_until(lambda: sink.splits[0].yielded, timeout_s=10, interval_s=0.01)
    assert sink.yields == 1 and sink.lost() == [] and sink.unclaimed()
    sink.yield_rule = YieldRule(30)  # read on from here: a stalled reader thread must not make it yield again
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(drain(sink.queue)), daemon=True)
    reader.start()
    order = [claim_and_send(listener, sink, lambda n: [batch(n * 100 + i * 2, 2) for i in range(10)])
             for _ in range(3)]
    assert order == [0, 1, 2] and sink.all_ended()
    sink.queue.finish()
    reader.join(20)
    assert got == [n * 100 + i for n in range(3) for i in range(20)]


def test_a_stopped_scan_assigns_nothing(listener):
    sink = sink_for(listener, splits=2)
    sink.stop()
    assert claim_and_send(listener, sink, lambda n: [batch(0, 1)]) is None
    assert not any(split.generation for split in sink.splits)  # no split was served


def test_a_yield_that_comes_after_the_last_batch_reaches_the_task_through_its_end(listener):
    """The task has sent all its batches when the BE, its queue full, tells it to yield: the
    BE then ignores the end, and the task learns of it from ``end`` (an arrow-engine task
    would otherwise go on to another split while this one is still to be read)."""
    sink = sink_for(listener, splits=1, max_bytes=batch(0, 2).get_total_buffer_size(), yield_after_s=0.2)
    sender = sender_for(listener, sink.token, ANY_SPLIT, 0)
    try:
        assert sender.go
        sender.send(batch(0, 2))
        sender.send(batch(2, 2))  # the queue holds one batch: the BE waits, then yields
        with pytest.raises(PushStopped):
            sender.end()
    finally:
        sender.close()
    wait_until(lambda: sink.splits[0].yielded, timeout_s=10, interval_s=0.01)
    assert not sink.splits[0].ended and sink.unclaimed()


def test_a_task_hands_its_slot_over_at_a_splits_end_while_another_scans_task_waits(listener):
    """Scan B's driver started a task that has not come yet (it waits for a Spark slot): scan
    A's task, asking for its next split after its turn, is told to stop, and its slot goes
    round; within its turn it is served. A first ask is always served; once B's task has
    come, A's next asks are served again."""
    turns = listener.scheduler
    a, b = sink_for(listener, splits=4), sink_for(listener, splits=1)
    rows = lambda n: [batch(n * 10, 1)]  # noqa: E731
    assert claim_and_send(listener, a, rows) == 0
    assert turns.turn(b, True)  # B's driver starts a job: its task waits for a slot
    assert turns.hands_over(a) and not turns.hands_over(b)
    assert claim_and_send(listener, a, rows, ask=KEEP_SPLIT) == 1  # its turn is not over
    assert claim_and_send(listener, a, rows, ask=NEXT_SPLIT) is None  # handed over
    assert claim_and_send(listener, a, rows) == 2  # a new task of A (its driver started it again)
    assert claim_and_send(listener, b, rows) == 0  # B's task came: nothing waits any more
    assert not turns.hands_over(a)
    assert claim_and_send(listener, a, rows, ask=NEXT_SPLIT) == 3
    assert a.all_ended() and b.all_ended()


def test_a_job_that_finished_without_asking_leaves_no_waiting_count(listener):
    """A job whose task failed before it asked no longer waits: once its driver says how many
    jobs are unfinished, the other scans' tasks keep their slots again."""
    turns = listener.scheduler
    a, b = sink_for(listener, splits=2), sink_for(listener, splits=1)
    rows = lambda n: [batch(n * 10, 1)]  # noqa: E731
    assert claim_and_send(listener, a, rows) == 0
    assert turns.turn(b, True)
    turns.jobs_unfinished(b, 1)  # still unfinished: it still waits
    assert turns.waiting_jobs(b) == 1
    turns.jobs_unfinished(b, 0)  # finished without its task asking
    assert turns.waiting_jobs(b) == 0
    assert claim_and_send(listener, a, rows, ask=NEXT_SPLIT) == 1


def test_a_job_that_cannot_start_holds_the_other_scans_back_for_a_while_only():
    """A job that has waited WAIT_COUNTS_S for a slot (a cluster without free executors)
    no longer makes the other scans hand their slots over or hold their jobs back."""
    from starscan.provider.scheduler import WAIT_COUNTS_S, SlotScheduler

    now = [100.0]
    turns = SlotScheduler(clock=lambda: now[0])
    a, b = Scan(), Scan()
    turns.add(a), turns.add(b)
    assert turns.turn(b, True)
    assert turns.hands_over(a)
    assert not turns.turn(a, True)
    now[0] += WAIT_COUNTS_S  # b's job has waited that long
    assert not turns.hands_over(a)
    assert turns.turn(a, True)


class Scan:
    """A scan as the scheduler sees it."""

    stopped = False


def test_scans_start_their_jobs_in_turns_first_come_first():
    """While a scan's job waits for a Spark slot, no other scan queues one (Spark would pick
    between them by pool name); the scans that asked meanwhile go next in the order they
    asked, and a scan in line leaves it when it wants no job any more."""
    from starscan.provider.scheduler import SlotScheduler

    turns = SlotScheduler()
    a, b, c, d = (Scan() for _ in range(4))
    for scan in (a, b, c, d):
        turns.add(scan)
    assert turns.turn(a, True)             # a's job waits for a slot
    assert not turns.turn(c, True)         # c asks first, then b: both in line
    assert not turns.turn(b, True)
    assert not turns.turn(a, True)         # a second job of a: not while others are in line
    turns.task_asked(a)                    # a's task came
    assert not turns.turn(b, True)         # c is first in line
    assert turns.turn(c, True)             # c's job waits
    assert not turns.turn(b, True)
    turns.task_asked(c)
    assert not turns.turn(d, True)         # b and a (its second job) came before d
    assert not turns.turn(b, False)        # b wants no job now: it leaves the line
    assert not turns.turn(d, True)         # a is first in line now
    assert turns.turn(a, True)
    a.stopped = True                       # a stopped scan's waiting job holds no one back
    assert turns.turn(d, True)
    turns.remove(a)
    assert turns.waiting_jobs(a) == 0

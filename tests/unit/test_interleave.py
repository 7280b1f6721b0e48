"""starscan.core.interleave: items read on a few threads, one bounded queue to one consumer
(the BE's and direct readers' row groups, the client's tablets)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from support.waits import wait_until

from starscan.core.interleave import Interleaved

pytestmark = pytest.mark.quick


def test_every_result_comes_once_and_each_items_results_stay_in_order():
    def read(item: int) -> Iterator[tuple[int, int]]:
        for j in range(50):
            yield item, j

    got = list(Interleaved(iter(range(8)), read, threads=3, ahead=2))
    assert sorted(got) == [(i, j) for i in range(8) for j in range(50)]
    for i in range(8):
        assert [j for item, j in got if item == i] == list(range(50))


def test_the_queue_bounds_what_the_threads_make_ahead_of_a_slow_consumer():
    made = []
    lock = threading.Lock()

    def read(item: int) -> Iterator[int]:
        for j in range(1000):
            with lock:
                made.append((item, j))
            yield j

    pool = Interleaved(iter(range(2)), read, threads=2, ahead=3)
    first = pool.next()
    assert first is not None
    # Made at most: the queue (2 x 3), one taken, and one more each thread waits to put.
    wait_until(lambda: pool._queue.full(), timeout_s=10, what="the queue to fill")
    assert len(made) <= 2 * 3 + 1 + 2
    pool.stop()


def test_the_first_error_reaches_the_consumer_and_stops_the_other_items():
    closed = threading.Event()

    def read(item: int) -> Iterator[int]:
        if item == 1:
            raise ValueError("item 1 cannot be read")
        try:
            while True:  # an endless item: only a stop ends it
                yield item
        finally:
            closed.set()

    pool = Interleaved(iter(range(2)), read, threads=2)
    with pytest.raises(ValueError, match="item 1 cannot be read"):
        for _ in pool:
            pass
    assert pool.stopped
    wait_until(closed.is_set, timeout_s=10, what="the other item's iterator to be closed")


def test_an_error_taking_the_next_item_is_raised_too():
    def items() -> Iterator[int]:
        yield 0
        raise OSError("the second file cannot be opened")

    with pytest.raises(OSError, match="second file"):
        list(Interleaved(items(), lambda item: iter([item]), threads=1))


def test_a_consumer_that_stops_early_closes_every_items_iterator_and_the_threads_leave():
    closed = []
    lock = threading.Lock()

    def read(item: int) -> Iterator[int]:
        try:
            while True:
                yield item
        finally:
            with lock:
                closed.append(item)

    pool = Interleaved(iter(range(3)), read, threads=3)
    results = iter(pool)
    assert next(results) in range(3)
    results.close()  # the consumer is done
    for thread in pool.threads:
        thread.join(10)
    assert not any(t.is_alive() for t in pool.threads)
    assert sorted(closed) == [0, 1, 2]


def test_no_items_is_an_empty_read():
    assert list(Interleaved(iter(()), lambda item: iter([item]), threads=4)) == []

"""starscan.core.collector: the cyclic collector held off while a large structure is built,
what was built kept out of its walks afterwards, and given back now and then."""

from __future__ import annotations

import gc
import weakref

import pytest

from starscan.core import collector


@pytest.fixture()
def clock(monkeypatch):
    now = [1_000_000.0]
    monkeypatch.setattr(collector, "_clock", lambda: now[0])
    monkeypatch.setattr(collector, "_last_thaw", now[0])
    yield now
    gc.unfreeze()


class _Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_what_a_pause_builds_is_frozen_and_given_back_after_the_thaw_interval(clock):
    gc.unfreeze()
    assert gc.isenabled()
    with collector.collector_paused():
        with collector.collector_paused():  # nested: one pause
            assert not gc.isenabled()
        assert not gc.isenabled()
        built = [[i] for i in range(10_000)]
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    assert frozen >= len(built)  # out of the collector's walks
    walked = {id(o) for o in gc.get_objects()}  # what the collector's generations hold
    assert not any(id(b) in walked for b in built)

    garbage = _Node()
    gone = weakref.ref(garbage)
    del garbage
    with collector.collector_paused():
        pass  # frozen with the rest: not collected while frozen
    gc.collect()
    assert gone() is not None

    clock[0] += collector.THAW_EVERY_S
    with collector.collector_paused():
        pass
    assert gc.get_freeze_count() == 0  # given back
    gc.collect()
    assert gone() is None  # and the cycle is freed
    del built


def test_a_collector_off_before_the_pause_stays_off(clock):
    gc.disable()
    try:
        with collector.collector_paused():
            pass
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()

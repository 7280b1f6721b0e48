"""Password checks under concurrency (no server): the same credentials arriving together are
checked once, and argon2 (64 MiB per check) never runs more than ARGON2_AT_ONCE at a time."""

from __future__ import annotations

import threading

import pytest

from starscan.security import users as users_module
from starscan.security.users import ARGON2_AT_ONCE, UserStore


@pytest.fixture
def store(tmp_path):
    s = UserStore(tmp_path / "users.json")
    s.set_password("alice", "right", create=True)
    s.set_password("bob", "other", create=True)
    return s


@pytest.fixture
def argon2_calls(monkeypatch):
    """The real argon2 hasher, watched: how many checks ran and the most at once."""
    state = {"calls": 0, "running": 0, "most": 0}
    lock = threading.Lock()
    real = users_module._argon2

    class Watched:
        def hash(self, password):
            return self._run(real.hash, password)

        def verify(self, stored, password):
            return self._run(real.verify, stored, password)

        @staticmethod
        def _run(fn, *args):
            with lock:
                state["calls"] += 1
                state["running"] += 1
                state["most"] = max(state["most"], state["running"])
            try:
                return fn(*args)
            finally:
                with lock:
                    state["running"] -= 1

    monkeypatch.setattr(users_module, "_argon2", Watched())
    return state


def _together(n, fn):
    results = [None] * n
    start = threading.Barrier(n)

    def run(i):
        start.wait()
        results[i] = fn()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_the_same_credentials_arriving_together_are_checked_once(store, argon2_calls):
    assert _together(12, lambda: store.authenticate("alice", "right")) == [True] * 12
    assert argon2_calls["calls"] == 1
    assert store.authenticate("alice", "right") and argon2_calls["calls"] == 1  # remembered


def test_wrong_passwords_fail_for_every_caller_and_are_not_remembered(store, argon2_calls):
    assert _together(6, lambda: store.authenticate("alice", "wrong")) == [False] * 6
    assert not store.authenticate("alice", "wrong")
    assert store.authenticate("alice", "right")


def test_checks_of_different_credentials_run_one_at_a_time(store, argon2_calls):
    creds = [("alice", "right"), ("bob", "other"), ("alice", "x"), ("bob", "y"), ("carol", "z")]
    got = []
    threads = [threading.Thread(target=lambda u=u, p=p: got.append(store.authenticate(u, p))) for u, p in creds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == [False, False, False, True, True]
    assert argon2_calls["most"] <= ARGON2_AT_ONCE

"""Rate limits: a token bucket per key (plan requests per user) and a failed-login guard
per user and client address. Keys live in TTL caches, so an attacker cycling through
names cannot grow memory without bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

from starscan.core.errors import TooManyRequests


class TokenBuckets:
    """``rate`` tokens per second per key, at most ``burst`` saved up. rate 0 = no limit."""

    def __init__(self, rate: float, burst: int, max_keys: int = 100_000):
        self._lock = threading.Lock()
        self._max_keys = max_keys
        self.configure(rate, burst)

    def configure(self, rate: float, burst: int) -> None:
        """New limits (update_config); every bucket starts full again."""
        # An idle bucket refills completely after burst/rate seconds: it can be forgotten then.
        ttl = (burst / rate + 1.0) if rate > 0 else 1.0
        with self._lock:
            self.rate, self.burst = rate, burst
            self._buckets: TTLCache[str, tuple[float, float]] = TTLCache(maxsize=self._max_keys, ttl=ttl)

    def acquire(self, key: str) -> float:
        """Take one token; 0.0 when allowed, else the seconds until one is available."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, stamp = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - stamp) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate


class LoginGuard:
    """After ``max_failures`` failed logins for one (user, client address) within
    ``lockout_s``, further attempts from there are refused for ``lockout_s`` without even
    checking the password (no guessing oracle, and argon2's cost is not spent on them)."""

    def __init__(self, max_failures: int, lockout_s: float, max_keys: int = 100_000):
        self._lock = threading.Lock()
        self._max_keys = max_keys
        self.configure(max_failures, lockout_s)

    def configure(self, max_failures: int, lockout_s: float) -> None:
        """New limits (update_config); failures counted so far are forgotten."""
        with self._lock:
            self.max_failures, self.lockout_s = max_failures, lockout_s
            self._failures: TTLCache[tuple[str, str], tuple[int, float]] = TTLCache(maxsize=self._max_keys, ttl=lockout_s)

    def check(self, user: str, client: str) -> None:
        with self._lock:
            entry = self._failures.get((user, client))
        if entry and entry[0] >= self.max_failures:
            wait = max(0.0, entry[1] + self.lockout_s - time.monotonic())
            raise TooManyRequests(
                f"too many failed logins for {user}@{client}: try again in {wait:.0f} s", retry_after_s=wait)

    def failed(self, user: str, client: str) -> None:
        with self._lock:
            count, _ = self._failures.get((user, client), (0, 0.0))
            self._failures[(user, client)] = (count + 1, time.monotonic())  # re-inserting restarts the TTL

    def succeeded(self, user: str, client: str) -> None:
        with self._lock:
            self._failures.pop((user, client), None)

    def attempt(self, user: str, client: str, verify: Callable[[], bool]) -> bool:
        """One login attempt: refused unchecked while locked out (``TooManyRequests``), else
        ``verify()``'s answer, counted as a failure or clearing the count. Every port's login
        goes through here."""
        self.check(user, client)
        if verify():
            self.succeeded(user, client)
            return True
        self.failed(user, client)
        return False

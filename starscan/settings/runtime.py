"""Run-time configuration: which keys may change on a running server, checking a change,
and applying it in one place.

``Settings`` is immutable. The keys that may change while the server runs are the fields
marked ``json_schema_extra=RUNTIME`` (starscan.settings.config). ``LiveSettings`` holds the settings
as they are now: a change is checked by validating a whole new ``Settings`` with the model
itself (every field validator runs), then that object replaces the current one in one step
and the subscribers hear of it (the reaper's interval, the log level, the plan rate limit,
...). The running parts read ``live.current`` when they need a value, so none of them keeps
a copy that could go stale.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import ValidationError

from starscan.core.errors import ConfigChangeRefused
from starscan.settings.config import Settings

log = logging.getLogger("starscan.settings.config")

RUNTIME_KEYS: tuple[str, ...] = tuple(
    name for name, field in Settings.model_fields.items()
    if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("runtime")
)


def changed_settings(current: Settings, changes: dict[str, str]) -> Settings:
    """``current`` with ``changes`` (key -> text) applied and validated by the model, or
    ``ConfigChangeRefused`` naming the first key that is unknown, fixed until a restart, or
    given a bad value."""
    if not changes:
        raise ConfigChangeRefused("nothing to change: POST /api/update_config?key=value")
    for key in changes:
        if key not in Settings.model_fields:
            raise ConfigChangeRefused(f"unknown configuration key {key!r}")
        if key not in RUNTIME_KEYS:
            raise ConfigChangeRefused(
                f"{key!r} cannot change at run time: set it in starscan.conf (or STARSCAN_{key.upper()}) and restart; "
                f"keys that can: {', '.join(RUNTIME_KEYS)}")
    try:
        return Settings.model_validate({**current.model_dump(), **changes})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else "?"
        message = error["msg"].removeprefix("Value error, ")
        raise ConfigChangeRefused(f"bad value for {key!r}: {message} (got {changes.get(key)!r})") from None


Subscriber = Callable[[Settings, dict[str, Any]], None]


class LiveSettings:
    """The server's settings as they are now, and who must hear of a change."""

    def __init__(self, settings: Settings):
        self._lock = threading.Lock()
        self._current = settings
        self._subscribers: list[tuple[frozenset[str], Subscriber]] = []

    @classmethod
    def of(cls, settings: Settings | LiveSettings) -> LiveSettings:
        """``settings`` itself if live, else live settings that start from it (a part built
        on its own, outside a server)."""
        return settings if isinstance(settings, LiveSettings) else cls(settings)

    @property
    def current(self) -> Settings:
        return self._current

    def subscribe(self, keys: Iterable[str], callback: Subscriber) -> None:
        """``callback(settings, changed)`` after a change to any of ``keys``."""
        unknown = set(keys) - set(RUNTIME_KEYS)
        if unknown:
            raise ValueError(f"not run-time keys: {sorted(unknown)}")
        with self._lock:
            self._subscribers.append((frozenset(keys), callback))

    def bound(self, **fixed: Any) -> None:
        """Record what the server found at start (a port bound where the config said 0)."""
        with self._lock:
            self._current = self._current.model_copy(update=fixed)

    def apply(self, changes: dict[str, str]) -> dict[str, Any]:
        """Check every change, then apply them all; returns the typed values."""
        with self._lock:
            new = changed_settings(self._current, changes)
            self._current = new
            parsed = {key: getattr(new, key) for key in changes}
            subscribers = [cb for keys, cb in self._subscribers if keys & parsed.keys()]
        for callback in subscribers:
            callback(new, parsed)
        log.info("configuration changed at run time: %s", ", ".join(f"{k}={v}" for k, v in parsed.items()))
        return parsed

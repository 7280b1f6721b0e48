"""Run-time configuration: which keys may change on a running server, checking a change,
and applying it in one place.

The keys are the ``Settings`` fields marked ``json_schema_extra=RUNTIME`` (starscan.config).
The server's wiring registers every ``Settings`` object a running part reads
(``track``) and what must happen when a key changes (``subscribe``: the reaper's interval,
the log level, the plan rate limit, ...); ``apply`` checks every change first, then sets
them all and tells the subscribers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from starscan.config import Settings, table_patterns
from starscan.errors import ConfigChangeRefused

log = logging.getLogger("starscan.config")

RUNTIME_KEYS: tuple[str, ...] = tuple(
    name for name, field in Settings.model_fields.items()
    if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("runtime")
)


def parse_changes(changes: dict[str, str]) -> dict[str, Any]:
    """The typed values of ``changes`` (key -> text), or ``ConfigChangeRefused`` naming the
    first key that is unknown, fixed until a restart, or given a bad value."""
    if not changes:
        raise ConfigChangeRefused("nothing to change: POST /api/update_config?key=value")
    parsed: dict[str, Any] = {}
    for key, raw in changes.items():
        field = Settings.model_fields.get(key)
        if field is None:
            raise ConfigChangeRefused(f"unknown configuration key {key!r}")
        if key not in RUNTIME_KEYS:
            raise ConfigChangeRefused(
                f"{key!r} cannot change at run time: set it in starscan.conf (or STARSCAN_{key.upper()}) and restart; "
                f"keys that can: {', '.join(RUNTIME_KEYS)}")
        try:
            if key == "result_cache_tables":
                parsed[key] = table_patterns(raw)
                continue
            args = (field.annotation, *field.metadata)
            kind: Any = Annotated[args] if field.metadata else field.annotation
            parsed[key] = TypeAdapter(kind).validate_python(raw)
        except ValidationError as exc:
            raise ConfigChangeRefused(f"bad value for {key!r}: {exc.errors()[0]['msg']} (got {raw!r})") from None
        except ValueError as exc:
            raise ConfigChangeRefused(f"bad value for {key!r}: {exc} (got {raw!r})") from None
    return parsed


Subscriber = Callable[[Settings, dict[str, Any]], None]


class LiveSettings:
    """The server's settings as they are now, and who must hear of a change."""

    def __init__(self, settings: Settings):
        self._lock = threading.Lock()
        self._holders: list[Settings] = [settings]
        self._subscribers: list[tuple[frozenset[str], Subscriber]] = []

    @property
    def current(self) -> Settings:
        return self._holders[0]

    def track(self, settings: Settings) -> None:
        """Another ``Settings`` object a running part reads (a copy made at start)."""
        with self._lock:
            if all(held is not settings for held in self._holders):
                self._holders.append(settings)

    def subscribe(self, keys: Iterable[str], callback: Subscriber) -> None:
        """``callback(settings, changed)`` after a change to any of ``keys``."""
        unknown = set(keys) - set(RUNTIME_KEYS)
        if unknown:
            raise ValueError(f"not run-time keys: {sorted(unknown)}")
        with self._lock:
            self._subscribers.append((frozenset(keys), callback))

    def apply(self, changes: dict[str, str]) -> dict[str, Any]:
        """Check every change, then apply them all; returns the typed values."""
        parsed = parse_changes(changes)
        with self._lock:
            for held in self._holders:
                for key, value in parsed.items():
                    setattr(held, key, value)
            subscribers = [cb for keys, cb in self._subscribers if keys & parsed.keys()]
        for callback in subscribers:
            callback(self.current, parsed)
        log.info("configuration changed at run time: %s", ", ".join(f"{k}={v}" for k, v in parsed.items()))
        return parsed

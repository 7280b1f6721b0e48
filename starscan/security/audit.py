"""The audit trail: one JSON line per plan and per scanner, enough to answer "who read
what, from where, when, and how much" after the fact.

Lines go to their own file (``audit_log``, default ``<warehouse>/_starscan/audit.log``;
``-`` for stderr), never through the application log, and never carry passwords, tokens
or plan secrets. ``WatchedFileHandler`` reopens the file after logrotate moves it.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_FIELD_CHARS = 2000  # a single field never makes a line huge


class AuditLog:
    def __init__(self, path: Path | None, name: str = "starscan.security.audit"):
        self.logger = logging.getLogger(f"{name}.{id(self)}")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        if path is None:
            handler: logging.Handler = logging.StreamHandler(sys.stderr)
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.WatchedFileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        self.logger.addHandler(handler)
        self._handler = handler
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def add_listener(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Also hand every line, as a dict, to ``listener`` (the admin page's recent plans)."""
        self._listeners.append(listener)

    def record(self, event: str, **fields: Any) -> None:
        now = time.time()
        line = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z",
                "event": event}
        for key, value in fields.items():
            if isinstance(value, str) and len(value) > _FIELD_CHARS:
                value = value[:_FIELD_CHARS] + "..."
            line[key] = value
        self.logger.info(json.dumps(line, ensure_ascii=False, default=str, separators=(",", ":")))
        for listener in self._listeners:
            try:
                listener(line)
            except Exception:  # noqa: BLE001 - a listener never breaks the audit trail
                logging.getLogger("starscan").exception("an audit listener failed")

    def close(self) -> None:
        self.logger.removeHandler(self._handler)
        self._handler.close()


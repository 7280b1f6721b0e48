"""Consumers of incremental reads: the last version each named consumer committed per table.

A consumer reads what was appended since its committed version (``_query_plan`` with
``"consumer": name`` and no ``since_version``), handles the rows, then commits the plan's
``version`` (``POST /api/{db}/{table}/_consumers/{name}/commit``). A commit is idempotent (the
same version again changes nothing) and monotonic: a version earlier in the table's history
than the one committed is refused, so a consumer restarted from an old checkpoint cannot
move its position back and be served rows twice. The positions of a table's consumers are
one JSON file under ``<state_dir>/consumers/``, replaced atomically.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starscan.core.errors import BadRequest, PositionBehind, VersionUnknown
from starscan.storage.files import JsonPerTable
from starscan.tables.changes import TableChanges

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_consumer_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadRequest(f"a consumer name is 1-128 letters, digits, '_', '.' or '-' (starting with a letter or digit), "
                         f"not {name!r}")
    return name


class ConsumerPositions:
    def __init__(self, state_dir: Path | None):
        self._lock = threading.Lock()
        self._files = JsonPerTable(Path(state_dir) / "consumers" if state_dir is not None else None,
                                   lambda location: {"location": location, "consumers": {}})

    def committed(self, location: str, name: str) -> int | None:
        with self._lock:
            entry = self._load(location)["consumers"].get(name)
        return None if entry is None else int(entry["version"])

    def commit(self, table: str, location: str, name: str, version: int, user: str, changes: TableChanges) -> int:
        """Record ``version`` as ``name``'s position; returns it. Refuses a version the table
        cannot place (VersionUnknown) and one before the position (PositionBehind)."""
        with self._lock, self._files.updating(location) as update:
            state = update.doc
            current = state["consumers"].get(name)
            order = changes.order(version)
            if order is None:
                raise VersionUnknown(f"version {version} of {table} is not known to this server")
            if current is not None and int(current["version"]) != version:
                before = changes.order(int(current["version"]))
                if before is not None and order < before:
                    raise PositionBehind(f"consumer {name} of {table} has committed version {current['version']}, "
                                         f"which comes after {version}: a position never moves back")
            state["consumers"][name] = {"version": version, "user": user, "at": round(time.time(), 3)}
            state["table"] = table
            update.changed = True
        return version

    def consumers(self, location: str) -> dict[str, int]:
        with self._lock:
            return {n: int(e["version"]) for n, e in self._load(location)["consumers"].items()}

    def every(self) -> list[Position]:
        """Every consumer of every table, in table and name order."""
        with self._lock:
            docs = self._files.every()
        out = [Position(str(doc.get("table", "")), doc["location"], name, int(entry["version"]), float(entry.get("at", 0)))
               for doc in docs for name, entry in doc["consumers"].items()]
        return sorted(out, key=lambda p: (p.table, p.consumer))

    def _load(self, location: str) -> dict[str, Any]:
        return self._files.load(location)



@dataclass(frozen=True)
class Position:
    table: str           # db.table
    location: str
    consumer: str
    version: int         # the committed version
    committed_at: float  # seconds since the epoch

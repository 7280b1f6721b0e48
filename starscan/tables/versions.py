"""Each folder table's version history: what was added and removed between the versions this
server has observed, so a reader can ask for only what was appended since a version it read.

A table's version is a hash of its file set (starscan.tables.catalog). Every time a listing finds a
new version, the difference from the last one observed is recorded: the files added and the
files removed or rewritten (a rewritten file is a removed identity and an added one). The
history of a table is one JSON file under ``<state_dir>/versions/``, replaced atomically on
each new version, bounded to ``max_versions`` entries (the oldest are dropped: asking for a
version older than that is "unknown", as is one this server never saw), and read back at
start, so it survives restarts.

A new version is recorded on the history's own thread, not the listing's: a table's first
listing of a million files spent 2.5 s of its first plan recording it (issue 39). The
history's readers (``added_since``, ``position``) wait for what is still to be recorded of
their table, so they never answer from a history a version behind a plan already made.

``added_since(V)`` is exact or refuses: the files added after V up to the current version,
or ``TableRewritten`` when any file present at V was removed or rewritten since (the rows
appended are then not the only change), or ``VersionUnknown``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from starscan.core.collector import collector_paused
from starscan.core.errors import TableRewritten, VersionUnknown
from starscan.storage.files import JsonPerTable

log = logging.getLogger("starscan.tables.versions")

FileKey = tuple[str, int, int]  # relative path, size, mtime_ns


class VersionHistory:
    def __init__(self, state_dir: Path | None, max_versions: int = 1000):
        self.max_versions = max_versions
        self._lock = threading.Lock()
        self._files = JsonPerTable(Path(state_dir) / "versions" if state_dir is not None else None,
                                   lambda location: {"location": location, "current": [], "log": []})
        self._waiting = threading.Condition()
        self._to_record: deque[tuple[str, str, int, Iterable[FileKey]]] = deque()
        self._pending: dict[str, int] = {}  # location -> observations not recorded yet
        self._recorder: threading.Thread | None = None

    def observe(self, table: str, location: str, version: int, files: Iterable[FileKey]) -> None:
        """Record ``version`` of the table at ``location`` with its file set (iterated only
        when the version is new), if it is new: on the history's own thread, in the order
        observed."""
        with self._waiting:
            self._pending[location] = self._pending.get(location, 0) + 1
            self._to_record.append((table, location, version, files))
            if self._recorder is None:
                self._recorder = threading.Thread(target=self._record_pending, name="starscan-versions", daemon=True)
                self._recorder.start()

    def settled(self, location: str) -> None:
        """Wait until every observation of the table at ``location`` so far is recorded."""
        with self._waiting:
            self._waiting.wait_for(lambda: not self._pending.get(location))

    def _record_pending(self) -> None:
        while True:
            with self._waiting:
                if not self._to_record:
                    self._recorder = None
                    return
                table, location, version, files = self._to_record.popleft()
            try:
                with collector_paused():
                    self._record(table, location, version, files)
            except Exception:  # noqa: BLE001 - the next listing observes its version again
                log.warning("the version history of %s could not be recorded", table, exc_info=True)
            finally:
                with self._waiting:
                    left = self._pending.get(location, 1) - 1
                    if left:
                        self._pending[location] = left
                    else:
                        self._pending.pop(location, None)
                    self._waiting.notify_all()

    def _record(self, table: str, location: str, version: int, files: Iterable[FileKey]) -> None:
        with self._lock, self._files.updating(location) as update:
            state = update.doc
            if state["log"] and state["log"][-1]["version"] == version:
                return
            now = dict.fromkeys(map(tuple, files))  # (path, size, mtime_ns), in the order given
            before = set(map(tuple, state["current"])) if state["log"] else set()
            current = now.keys()
            entry = {"version": version, "at": round(time.time(), 3),
                     "added": sorted(map(list, current - before)) if state["log"] else [],
                     "removed": sorted(map(list, before - current))}
            state["log"].append(entry)
            del state["log"][:-self.max_versions]
            # Sorted as tuples (lists compare several times slower), and at once when the files
            # come in path order, as listings give them: a million took 7.6 s as lists.
            state["current"] = sorted(current)  # tuples: JSON arrays all the same
            state["table"] = table
            update.changed = True

    def added_since(self, location: str, since: int, current: int) -> list[FileKey]:
        """The files added after version ``since`` up to ``current`` (the table's version now,
        which ``observe`` has recorded)."""
        self.settled(location)
        with self._lock:
            log = self._load(location)["log"]
        versions = [e["version"] for e in log]
        if since not in versions:
            raise VersionUnknown(f"version {since} of this table is not known to this server: it was never observed "
                                 f"or is older than the {self.max_versions} versions kept; read the whole table and "
                                 f"continue from version {current}")
        if since == current:
            return []
        start = len(versions) - 1 - versions[::-1].index(since)
        added: dict[FileKey, None] = {}
        for entry in log[start + 1:]:
            for removed in entry["removed"]:
                key = (removed[0], removed[1], removed[2])
                if key in added:
                    del added[key]  # added after `since` and removed again: only its replacement counts
                else:
                    raise TableRewritten(
                        f"the table was rewritten after version {since} (file {removed[0]} was removed or rewritten "
                        f"in version {entry['version']}): a full read is needed, then continue from version {current}")
            for key in entry["added"]:
                added[(key[0], key[1], key[2])] = None
            if entry["version"] == current:
                break
        return sorted(added)

    def position(self, location: str, version: int) -> int | None:
        """Where ``version`` stands in the table's history (larger: later), None when it is
        not there."""
        self.settled(location)
        with self._lock:
            versions = [e["version"] for e in self._load(location)["log"]]
        if version not in versions:
            return None
        return len(versions) - 1 - versions[::-1].index(version)

    def _load(self, location: str) -> dict[str, Any]:
        return self._files.load(location)

"""Each folder table's version history: what was added and removed between the versions this
server has observed, so a reader can ask for only what was appended since a version it read.

A table's version is a hash of its file set (starscan.tables.catalog). Every time a listing finds a
new version, the difference from the last one observed is recorded: the files added and the
files removed or rewritten (a rewritten file is a removed identity and an added one). The
history of a table is bounded to ``max_versions`` entries (the oldest are dropped: asking
for a version older than that is "unknown", as is one this server never saw) and kept under
``<state_dir>/versions/``, so it survives restarts, in two files: a checkpoint (the file set
of the last version in it and the entries), replaced atomically, and a journal the entries
after it are appended to, one JSON line each. A new version costs a line the size of its
change, not a rewrite of the table's whole file set (a million files' set took seconds of
CPU at every append of a streaming table: issue 39); the checkpoint is written again once
the journal holds ``JOURNAL_LINES`` entries or ``JOURNAL_BYTES``. Several processes may share
the folder (FEs of one deployment): each records under an exclusive lock on the table's
lock file and reads the other's lines as they come; entries carry a sequence number, so a
line that a checkpoint holds already is not applied twice.

A new version is recorded on the history's own thread, not the listing's: a table's first
listing of a million files spent 2.5 s of its first plan recording it (issue 39). The
history's readers (``added_since``, ``position``) wait for what is still to be recorded of
their table, so they never answer from a history a version behind a plan already made.

``added_since(V)`` is exact or refuses: the files added after V up to the current version,
or ``TableRewritten`` when any file present at V was removed or rewritten since (the rows
appended are then not the only change), or ``VersionUnknown``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starscan.core.collector import collector_paused
from starscan.core.errors import TableRewritten, VersionUnknown
from starscan.storage.files import exclusive_lock, file_stamp, stat_stamp, table_file, write_private

log = logging.getLogger("starscan.tables.versions")

FileKey = tuple[str, int, int]  # relative path, size, mtime_ns
Change = tuple[int, list[FileKey], list[FileKey]]  # an earlier version, files added since, files removed


#: A table's checkpoint is written again once its journal holds this many entries or bytes.
JOURNAL_LINES = 100
JOURNAL_BYTES = 8 << 20


class _State:
    """One table's history as this process holds it: what its checkpoint file held (read at
    ``stamp``) with the journal's entries applied up to ``journal_at`` bytes of the journal
    file ``journal_id``.

    The last version's file set (``current``) is parsed from the checkpoint only when it is
    first needed, with the journal's entries read meanwhile applied then: a server started
    again over an unchanged table of a million files finds its version recorded from the
    checkpoint's log alone (parsing the file set took ~2 s of CPU beside its first plan).
    Until then the state holds where the file set's text is in the checkpoint (``_current_at``:
    the file, from byte, to byte), not the text: a million files' is ~50 MB, held for as long
    as the table's version did not change. It is read under the table's lock (``_record``),
    which any process replacing the checkpoint holds too, so it is the text ``stamp`` saw."""

    __slots__ = ("location", "table", "seq", "log", "_current", "_current_at", "_unapplied", "stamp", "journal_id",
                 "journal_at", "journal_lines", "laid_out_old")

    def __init__(self, location: str, doc: dict[str, Any] | None = None, stamp: tuple[int, int, int] | None = None,
                 current_at: tuple[Path, int, int] | None = None):
        doc = doc or {}
        self.location = location
        self.table = doc.get("table", "")
        self.seq: int = doc.get("seq", len(doc.get("log", ())))
        self.log: list[dict[str, Any]] = doc.get("log", [])
        # (path, size, mtime_ns) -> None: the files of the last version recorded, in order;
        # None until parsed from the checkpoint (then ``_unapplied`` entries are applied).
        self._current: dict[FileKey, None] | None = None
        self._current_at = current_at
        self._unapplied: list[dict[str, Any]] = []
        if current_at is None:
            self._current = dict.fromkeys(map(tuple, doc.get("current", ())))
        self.stamp = stamp
        self.journal_id: int | None = None
        self.journal_at = 0
        self.journal_lines = 0
        # A checkpoint with its file set before its log (this writer's layout before the
        # file set was read lazily) is read whole at every start: ~230 MB of objects for a
        # million files. It is written again in this layout by the next record.
        self.laid_out_old = current_at is None and "current" in doc and doc.get("current") != []

    @property
    def current(self) -> dict[FileKey, None]:
        if self._current is None:
            try:
                listed = json.loads(self._read_current() or b"[]")
                if not isinstance(listed, list):
                    raise ValueError("not a list")
                self._current = dict.fromkeys(map(tuple, listed))
            except (TypeError, ValueError, OSError):
                # An unreadable file set: the history starts again (what it held becomes
                # unknown, never wrong), as for an unreadable checkpoint.
                log.warning("the version history of %s has an unreadable file set; it starts again", self.location)
                self.log, self._current, self._unapplied = [], {}, []
            for entry in self._unapplied:
                self._change(entry)
            self._current_at, self._unapplied = None, []
        return self._current

    @current.setter
    def current(self, files: dict[FileKey, None]) -> None:
        self._current, self._current_at, self._unapplied = files, None, []

    def _read_current(self) -> bytes | None:
        """The file set's text where the checkpoint read at ``stamp`` holds it; a checkpoint
        that is not that one any more raises ValueError (read as unreadable: the history
        starts again, which makes what it held unknown, never wrong)."""
        if self._current_at is None:
            return None
        path, start, end = self._current_at
        with open(path, "rb") as fh:
            if stat_stamp(os.fstat(fh.fileno())) != self.stamp:
                raise ValueError("the checkpoint was replaced")
            fh.seek(start)
            text = fh.read(end - start)
        if len(text) != end - start:
            raise ValueError("the checkpoint is shorter than when it was read")
        return text

    def apply(self, entry: dict[str, Any], max_versions: int) -> None:
        if self._current is None:
            self._unapplied.append(entry)
        else:
            self._change(entry)
        self.log.append(entry)
        del self.log[:-max_versions]
        self.seq = entry["seq"]

    def _change(self, entry: dict[str, Any]) -> None:
        current = self._current
        assert current is not None
        for key in entry["removed"]:
            current.pop((key[0], key[1], key[2]), None)
        for key in entry["added"]:
            current[(key[0], key[1], key[2])] = None

    def checkpoint(self) -> bytes:
        return json.dumps({"location": self.location, "table": self.table, "seq": self.seq, "log": self.log,
                           # sorted as tuples (lists compare several times slower), at once when
                           # in path order, as listings give them. Last: a reader parses what
                           # comes before it on its own (_read_checkpoint).
                           "current": sorted(self.current)}, separators=(",", ":")).encode("utf-8")


class VersionHistory:
    def __init__(self, state_dir: Path | None, max_versions: int = 1000):
        self.max_versions = max_versions
        self._lock = threading.Lock()
        self._folder = Path(state_dir) / "versions" if state_dir is not None else None
        self._states: dict[str, _State] = {}
        self._waiting = threading.Condition()
        self._to_record: deque[tuple[str, str, int, Iterable[FileKey], Change | None, int | None]] = deque()
        self._pending: dict[str, int] = {}  # location -> observations not recorded yet
        self._recorder: threading.Thread | None = None

    def observe(self, table: str, location: str, version: int, files: Iterable[FileKey],
                change: Change | None = None, count: int | None = None) -> None:
        """Record ``version`` of the table at ``location`` with its file set (iterated only
        when needed), if it is new: on the history's own thread, in the order observed.
        ``change``: (an earlier version, the files added since it, the files removed), and
        ``count``: how many files ``files`` holds; when the history's last version is that
        earlier one, the version is recorded from the change alone."""
        with self._waiting:
            self._pending[location] = self._pending.get(location, 0) + 1
            self._to_record.append((table, location, version, files, change, count))
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
                table, location, version, files, change, count = self._to_record.popleft()
            try:
                with collector_paused():
                    self._record(table, location, version, files, change, count)
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

    def _record(self, table: str, location: str, version: int, files: Iterable[FileKey],
                change: Change | None = None, count: int | None = None) -> None:
        with self._lock, self._table_lock(location):
            state = self._state(location)
            paths = self._paths(location)
            if state.log and state.log[-1]["version"] == version:
                if state.laid_out_old and paths is not None:
                    self._write_checkpoint(state, *paths)  # read lazily from now on
                return
            entry: dict[str, Any] = {"seq": state.seq + 1, "version": version, "at": round(time.time(), 3)}
            current = state.current
            if change is not None and state.log and state.log[-1]["version"] == change[0]:
                _, added, removed = change
                if all(k in current for k in removed) and not any(k in current for k in added) and \
                        (count is None or len(current) - len(removed) + len(added) == count):
                    for key in removed:
                        del current[key]
                    for key in added:
                        current[key] = None
                    entry.update(added=sorted([list(k) for k in added]), removed=sorted([list(k) for k in removed]))
                else:  # not the file set the change was taken against: compared whole below
                    log.warning("the version history of %s: a change did not add up; the file set is compared whole", table)
            if "added" not in entry:
                now: dict[FileKey, None] = dict.fromkeys(map(tuple, files))  # type: ignore[arg-type]  # in the order given
                before = state.current
                entry.update(added=sorted([list(k) for k in now if k not in before]) if state.log else [],
                             removed=sorted([list(k) for k in before if k not in now]))
                current = now
            first = not state.log
            state.table = table
            state.log.append(entry)
            del state.log[:-self.max_versions]
            state.seq = entry["seq"]
            state.current = current
            if paths is None:
                return
            checkpoint, journal = paths
            if first or state.laid_out_old or state.journal_lines >= JOURNAL_LINES or state.journal_at >= JOURNAL_BYTES:
                self._write_checkpoint(state, checkpoint, journal)
                return
            line = json.dumps(entry, separators=(",", ":")).encode("utf-8") + b"\n"
            fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                st = os.fstat(fd)
                if st.st_ino != state.journal_id:
                    state.journal_at = state.journal_lines = 0  # a new journal (this state read none)
                if st.st_size > state.journal_at:
                    os.ftruncate(fd, state.journal_at)  # a line a crashed writer left torn: this one follows whole
                os.write(fd, line)
                state.journal_id = st.st_ino
            finally:
                os.close(fd)
            state.journal_at += len(line)
            state.journal_lines += 1

    @staticmethod
    def _write_checkpoint(state: _State, checkpoint: Path, journal: Path) -> None:
        """The checkpoint first, then the journal it holds is removed: a crash between the two
        leaves lines it holds already, which are skipped by their numbers; a reader of the
        old journal reads again."""
        write_private(checkpoint, state.checkpoint())
        journal.unlink(missing_ok=True)
        state.stamp, state.journal_id, state.journal_at, state.journal_lines = file_stamp(checkpoint), None, 0, 0
        state.laid_out_old = False

    def _paths(self, location: str) -> tuple[Path, Path] | None:
        if self._folder is None:
            return None
        return table_file(self._folder, location, ".json"), table_file(self._folder, location, ".journal")

    @contextmanager
    def _table_lock(self, location: str) -> Iterator[None]:
        """Held across a table's read-change-write, against other processes."""
        paths = self._paths(location)
        if paths is None:
            yield
            return
        with exclusive_lock(paths[0]):
            yield

    def _state(self, location: str) -> _State:
        """The table's history as its files hold it now (under ``self._lock``): the
        checkpoint read again when it was replaced, then the journal's new lines."""
        paths = self._paths(location)
        state = self._states.get(location)
        if paths is None:
            if state is None:
                state = self._states[location] = _State(location)
            return state
        checkpoint, journal = paths
        for _ in range(100):  # another process replacing the checkpoint meanwhile: read again
            stamp = file_stamp(checkpoint)
            if state is None or state.stamp != stamp:
                found = _read_checkpoint(checkpoint, location)
                doc, current_at = found if found is not None else (None, None)
                state = self._states[location] = _State(location, doc, stamp, current_at=current_at)
            if self._replay(state, journal) and file_stamp(checkpoint) == stamp:
                return state
            state = None
        raise OSError(f"the version history of {location} keeps changing under this reader")

    def _replay(self, state: _State, journal: Path) -> bool:
        """Apply the journal's whole lines not applied yet; False when the journal is not the
        one this state read (a checkpoint replaced it): then everything is read again."""
        try:
            fh = open(journal, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return state.journal_at == 0
        with fh:
            ino = os.fstat(fh.fileno()).st_ino
            if state.journal_at and ino != state.journal_id:
                return False
            fh.seek(state.journal_at)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line being written is applied once whole
        for line in data[:end].splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # not one of ours (a torn line after a crash): left out, as unknown
            if entry.get("seq", 0) > state.seq:
                state.apply(entry, self.max_versions)
            state.journal_lines += 1
        state.journal_id, state.journal_at = ino, state.journal_at + end
        return True

    def added_since(self, location: str, since: int, current: int) -> list[FileKey]:
        """The files added after version ``since`` up to ``current`` (the table's version now,
        which ``observe`` has recorded)."""
        self.settled(location)
        with self._lock:
            log = self._log(location)
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
            versions = [e["version"] for e in self._log(location)]
        if version not in versions:
            return None
        return len(versions) - 1 - versions[::-1].index(version)

    def _log(self, location: str) -> list[dict[str, Any]]:
        return self._state(location).log


_CURRENT_KEY = b',"current":'


def _read_checkpoint(path: Path, location: str) -> tuple[dict[str, Any], tuple[Path, int, int] | None] | None:
    """A checkpoint's document without its file set, and where the file set's JSON text is in
    the file: (path, from byte, to byte) (None: the document held none, or held it elsewhere
    than last, and it is in the document)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return None  # unreadable: start again (what it held becomes unknown, never wrong)
    # Quotes inside JSON strings are escaped, so ',"current":' is a key; the writer puts the
    # document's own one last, after the log (whose entries have no such key).
    doc: Any = None
    current_at: tuple[Path, int, int] | None = None
    cut = data.rfind(_CURRENT_KEY)
    if cut > 0 and data.endswith(b"]}"):
        try:
            doc, current_at = json.loads(data[:cut] + b"}"), (path, cut + len(_CURRENT_KEY), len(data) - 1)
        except ValueError:
            pass
    if not isinstance(doc, dict) or "log" not in doc:  # not this writer's layout: read whole
        try:
            doc, current_at = json.loads(data), None
        except ValueError:
            return None  # unreadable: start again
    return (doc, current_at) if isinstance(doc, dict) and doc.get("location") == location else None

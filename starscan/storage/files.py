"""File rules used in several places: what Spark treats as hidden, how starscan writes a
file only its own user may read (the users file, plan secrets), and the per-table JSON
documents kept under the state folder (version histories, consumer positions)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def is_hidden(name: str) -> bool:
    """Whether Spark's file index leaves out a file of this name (its listing filter and
    its data-file rule together): names starting with ``.`` (``.crc`` files), names
    starting with ``_`` that hold no ``=`` (``_SUCCESS``, ``_metadata``,
    ``_common_metadata``, ``_temporary``, starscan's own ``_starscan``: but ``_x=1.parquet``
    is data), and uploads still in progress (``part-0.parquet._COPYING_``, as ``hadoop fs
    -put`` names them)."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def is_hidden_folder(name: str) -> bool:
    """Whether Spark's listing leaves out a folder of this name: the file rule, except that
    it enters folders whose names start with ``_metadata`` or ``_common_metadata`` (a
    partition folder ``_p=1`` is entered too: it holds ``=``)."""
    return is_hidden(name) and not name.startswith(("_metadata", "_common_metadata"))


def write_private(path: Path, data: bytes, *, replace: bool = True) -> bool:
    """Write ``data`` to ``path`` with mode 0600, atomically: readers see the old file or
    the new one, never a part. ``replace=False``: only if ``path`` does not exist yet (the
    first of two processes starting together wins). Returns whether this call wrote it."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    if replace:
        os.replace(tmp, path)
        return True
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def table_file(folder: Path, location: str, suffix: str) -> Path:
    """The file of a table's state under ``folder``: named by a hash of its location."""
    return folder / (hashlib.blake2b(location.encode("utf-8"), digest_size=16).hexdigest() + suffix)


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """(mtime, size, inode) of a file: another one once it was replaced; None when absent."""
    try:
        return stat_stamp(path.stat())
    except OSError:
        return None


def stat_stamp(st: os.stat_result) -> tuple[int, int, int]:
    """``file_stamp`` of a file already stat-ed (an open one: ``os.fstat``)."""
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@contextmanager
def exclusive_lock(state_file: Path) -> Iterator[None]:
    """An exclusive lock on ``state_file``'s lock file (``<name>.lock``), against other
    processes sharing the folder, held across a read-change-write of it."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_file.with_name(state_file.name + ".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class JsonPerTable:
    """One small JSON document per table under ``folder`` (named by a hash of the table's
    location), replaced atomically on each save; ``folder`` None keeps them in memory only.

    Several processes may share the folder (FEs of one deployment): a document is read
    again whenever its file changed since this process read it, and ``updating`` holds an
    exclusive lock on the table's lock file across its read-change-write, so no process
    writes over another's change."""

    def __init__(self, folder: Path | None, empty: Callable[[str], dict[str, Any]]):
        self.folder = folder
        self.empty = empty
        self._docs: dict[str, tuple[tuple[int, int, int] | None, dict[str, Any]]] = {}

    def _path(self, location: str) -> Path | None:
        return table_file(self.folder, location, ".json") if self.folder is not None else None

    def load(self, location: str) -> dict[str, Any]:
        """The table's document as the folder holds it now (read again when it changed)."""
        path = self._path(location)
        cached = self._docs.get(location)
        if path is None:
            if cached is None:
                cached = (None, self.empty(location))
                self._docs[location] = cached
            return cached[1]
        stamp = file_stamp(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        doc = self.empty(location)
        if stamp is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                if loaded.get("location") == location:
                    doc = loaded
            except (OSError, ValueError):
                pass  # unreadable: start again (what it held becomes unknown, never wrong)
        self._docs[location] = (stamp, doc)
        return doc

    @contextmanager
    def updating(self, location: str) -> Iterator[Update]:
        """The document to change, under the table's lock; written when the caller marks it
        ``changed`` and returns without an error."""
        path = self._path(location)
        if path is None:
            update = Update(self.load(location))
            yield update
            return
        with exclusive_lock(path):
            update = Update(self.load(location))
            try:
                yield update
            except BaseException:
                self._docs.pop(location, None)  # it may be half changed: read the file again next time
                raise
            if update.changed:
                self.save(location, update.doc)

    def every(self) -> list[dict[str, Any]]:
        """Every table's document: those in memory and those only on disk."""
        locations = set(self._docs)
        if self.folder is not None and self.folder.is_dir():
            for path in self.folder.glob("*.json"):
                try:
                    location = json.loads(path.read_text(encoding="utf-8")).get("location")
                except (OSError, ValueError):
                    continue
                if isinstance(location, str):
                    locations.add(location)
        return [self.load(location) for location in sorted(locations)]

    def save(self, location: str, doc: dict[str, Any]) -> None:
        path = self._path(location)
        if path is None:
            self._docs[location] = (None, doc)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, json.dumps(doc, separators=(",", ":")).encode("utf-8"))
        self._docs[location] = (file_stamp(path), doc)


class Update:
    """A document being changed in ``JsonPerTable.updating``."""

    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self.changed = False

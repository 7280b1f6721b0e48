"""File rules used in several places: what Spark treats as hidden, how starscan writes a
file only its own user may read (the users file, plan secrets), and the per-table JSON
documents kept under the state folder (version histories, consumer positions)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def is_hidden(name: str) -> bool:
    """Spark's rule: a data source ignores files and folders whose names start with ``_`` or
    ``.`` (``_SUCCESS``, ``.crc`` files, ``_temporary``, starscan's own ``_starscan``)."""
    return name.startswith(("_", "."))


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


class JsonPerTable:
    """One small JSON document per table under ``folder`` (named by a hash of the table's
    location), cached in memory and replaced atomically on each save; ``folder`` None keeps
    them in memory only. Callers hold their own lock around a load-change-save."""

    def __init__(self, folder: Path | None, empty: Callable[[str], dict[str, Any]]):
        self.folder = folder
        self.empty = empty
        self._docs: dict[str, dict[str, Any]] = {}

    def _path(self, location: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / (hashlib.blake2b(location.encode("utf-8"), digest_size=16).hexdigest() + ".json")

    def load(self, location: str) -> dict[str, Any]:
        doc = self._docs.get(location)
        if doc is not None:
            return doc
        doc = self.empty(location)
        path = self._path(location)
        if path is not None and path.exists():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                if loaded.get("location") == location:
                    doc = loaded
            except (OSError, ValueError):
                pass  # unreadable: start again (what it held becomes unknown, never wrong)
        self._docs[location] = doc
        return doc

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
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, json.dumps(doc, separators=(",", ":")).encode("utf-8"))

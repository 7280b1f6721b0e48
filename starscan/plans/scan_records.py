"""Records of resumable scans: what any BE of a deployment needs to go on with a scan
another BE opened (docs/scaling.md "Resumable scans").

A BE that opens a resumable scanner writes one small JSON file into the deployment's shared
state (``<state_dir>/scans/<context id>.json``, the folder the nodes already share for the
users file): the signed plan, the tablets, the batch size and starscan's own properties.
Its rows come in a fixed order (``starscan.ordered``), so a BE that is asked for a context it
does not hold opens the same scan and hands out the rows from the reader's offset on.

The record lives as long as the context:

* ``close_scanner`` deletes it, on whichever BE it arrives;
* the BE holding the context touches it while readers use it (at most every quarter of
  the keep-alive), so its age is the context's idle time; a record idle past its keep-alive
  is gone for every BE (``get`` answers None and deletes it), as the context's reaping is;
* a BE that reaps a context deletes its record unless another BE touched it since (a
  reader went on there); every BE's reaper deletes the records nobody touched for their
  keep-alive (their BE died) and drops the contexts it holds whose record was deleted by a
  close elsewhere.

A record holds no secret: the plan is signed (a BE checks it as at any open) and the
reader's password is not kept; the BE that resumes checks the plan's user again against
the users file.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

from pydantic import BaseModel, ValidationError

#: The folder under the deployment's state directory.
FOLDER = "scans"


class ScanRecord(BaseModel):
    """One resumable scan, as its open_scanner asked for it."""

    context_id: str
    plan: str                       # opaqued_query_plan, signed
    tablet_ids: list[int]
    batch_size: int
    keep_alive_s: float
    properties: dict[str, str] = {}  # starscan's own (ordered, eos row count, error kinds)
    query_timeout: int | None = None
    mem_limit: int | None = None


def is_context_id(context_id: str) -> bool:
    """Whether ``context_id`` is a UUID in its canonical text (the only names a record has)."""
    try:
        return str(uuid.UUID(context_id)) == context_id
    except (ValueError, AttributeError, TypeError):
        return False


class ScanRecords:
    """The records in one folder (local or a shared file system)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, context_id: str) -> Path | None:
        return self.folder / f"{context_id}.json" if is_context_id(context_id) else None

    def put(self, record: ScanRecord) -> float:
        """Write ``record`` (atomically: a reader never sees half of it); its time stamp."""
        path = self._path(record.context_id)
        if path is None:
            raise ValueError(f"not a context id: {record.context_id!r}")
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(record.model_dump_json())
        os.replace(tmp, path)
        return path.stat().st_mtime

    def get(self, context_id: str | None) -> ScanRecord | None:
        """The record of a context that is still alive somewhere; None when there is none
        (never recorded, closed, or idle past its keep-alive: then it is deleted)."""
        path = self._path(context_id or "")
        if path is None:
            return None
        try:
            text = path.read_text()
            touched = path.stat().st_mtime
        except OSError:
            return None
        try:
            record = ScanRecord.model_validate_json(text)
        except ValidationError:
            return None
        if record.context_id != context_id:
            return None
        if time.time() - touched > record.keep_alive_s:
            self.delete(record.context_id)
            return None
        return record

    def touch(self, context_id: str) -> float | None:
        """Mark the context used now; its new time stamp (None: the record is gone)."""
        path = self._path(context_id)
        if path is None:
            return None
        try:
            os.utime(path)
            return path.stat().st_mtime
        except OSError:
            return None

    def touched(self, context_id: str) -> float | None:
        """When the record was last written or touched (None: it is gone)."""
        path = self._path(context_id)
        try:
            return path.stat().st_mtime if path is not None else None
        except OSError:
            return None

    def delete(self, context_id: str | None) -> None:
        path = self._path(context_id or "")
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()

    def delete_unless_touched_since(self, context_id: str, stamp: float) -> None:
        """Delete the record unless another BE wrote or touched it after ``stamp`` (this BE's
        last touch): a reader may have gone on with the scan there."""
        touched = self.touched(context_id)
        if touched is not None and touched <= stamp:
            self.delete(context_id)

    def expire(self) -> int:
        """Delete every record idle past its keep-alive (its BE died or reaped it); how many."""
        try:
            names = [p for p in self.folder.iterdir() if p.suffix == ".json"]
        except OSError:
            return 0
        gone = 0
        for path in names:
            if self.get(path.stem) is None and not path.exists():
                gone += 1
        return gone

"""Where tables live: a local folder or an object store, read through ``pyarrow.fs``.

A location is a local absolute path (``/data/wh``) or a URI (``s3://bucket/prefix``,
``gs://bucket/prefix``, ``hdfs://namenode/path``, ``file:///data/wh``). ``Storage`` answers
the few questions the catalog, the schema reader and the scans ask of one: is this a folder,
what is in it, what is below it (one listing for an object store), and a file to read. Local
folders keep the ``os`` calls they always had (one ``stat`` on a plan's hot path); everything
else goes through a ``pyarrow.fs`` filesystem.

Credentials and the endpoint come from ``StorageOptions`` (config keys ``s3_*``) or, when
those are unset, from each store's standard environment (``AWS_ACCESS_KEY_ID``, ...). They
live in the filesystem object only: never in a location, a plan, a log line or ``/varz``.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from starscan.core.errors import StorageDenied, StorageUnavailable
from starscan.storage.files import is_hidden_folder
from starscan.storage.folder_entries import FileColumns, FolderEntries, FolderReader
from starscan.storage.locations import SCHEMES, StorageOptions, check_location, is_uri, local_path

__all__ = ["LOCAL", "SCHEMES", "STALE", "Entry", "FolderStamp", "Storage", "StorageOptions", "check_location", "is_uri", "local_path",
           "open_storage", "store_error"]

_LOCAL_FS = pafs.LocalFileSystem()
# Hadoop's name for each scheme, for the Spark SQL path (s3a is Hadoop's S3 client).
_HADOOP_SCHEMES = {"s3": "s3a", "s3a": "s3a", "gs": "gs", "gcs": "gs", "hdfs": "hdfs", "viewfs": "viewfs"}


@dataclass(frozen=True, slots=True)
class Entry:
    """One name in a folder, or one file below a table (``name`` is then its relative path)."""

    name: str
    is_dir: bool
    size: int = 0
    mtime_ns: int = 0


class Storage:
    """A local folder tree or an object store; locations are strings (see the module doc)."""

    def __init__(self, fs: pafs.FileSystem | None, scheme: str, authority: str = "",
                 options: StorageOptions | None = None):
        self.fs = fs              # None: a local folder, read with os calls
        self.scheme = scheme      # "" for local paths
        self.authority = authority  # the bucket (s3, gs) or namenode (hdfs)
        self.options = options

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to Spark's Python tasks with the scan: the filesystem pickles itself.
        return (Storage, (self.fs, self.scheme, self.authority, self.options))

    def delta_options(self) -> dict[str, str] | None:
        """The same store for ``deltalake``; None for a store it reaches by its own defaults."""
        return (self.options or StorageOptions()).delta_options() if self.scheme == "s3" else None

    @property
    def is_local(self) -> bool:
        return self.fs is None

    # ---- locations ----
    def join(self, location: str, *names: str) -> str:
        out = location.rstrip("/") if location not in ("/", "") else location
        for name in names:
            out = f"{out}/{name}" if not out.endswith("/") else f"{out}{name}"
        return out

    def _fs_path(self, location: str) -> str:
        if self.fs is None or not is_uri(location):
            return location
        parts = urlsplit(location)
        return f"{parts.netloc}{parts.path}".rstrip("/") if self.scheme in ("s3", "gs") else parts.path.rstrip("/") or "/"

    def arrow_path(self, location: str) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem and the path in it (for ``pyarrow.dataset``)."""
        if self.fs is None:
            return _LOCAL_FS, location
        return self.fs, self._fs_path(location)

    def spark_path(self, location: str) -> str:
        """The location as Spark's Hadoop filesystems name it (``s3://`` -> ``s3a://``)."""
        if self.fs is None or not is_uri(location):
            return location
        scheme, rest = location.split("://", 1)
        return f"{_HADOOP_SCHEMES.get(scheme, scheme)}://{rest}"

    # ---- questions ----
    def dir_stamp(self, location: str) -> int | None:
        """A number that changes when the folder's own entries change (local: its mtime), 0
        when the store cannot tell (object stores); None when it is not a folder."""
        if self.fs is None:
            try:
                st = os.stat(location)
            except (OSError, ValueError):  # ValueError: a NUL in a name
                return None
            return st.st_mtime_ns if stat.S_ISDIR(st.st_mode) else None
        info = self._info(location)
        return 0 if info.type == pafs.FileType.Directory else None

    def is_dir(self, location: str) -> bool:
        return self.dir_stamp(location) is not None

    def list_dir(self, location: str) -> list[Entry]:
        """The names in a folder (none when it does not exist), sorted."""
        if self.fs is None:
            try:
                with os.scandir(location) as it:
                    out = [Entry(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            except (FileNotFoundError, NotADirectoryError):
                return []
        else:
            try:
                infos = self._call(self.fs.get_file_info, pafs.FileSelector(self._fs_path(location), allow_not_found=True))
            except NotADirectoryError:
                return []
            out = [Entry(i.base_name, i.type == pafs.FileType.Directory) for i in infos]
        return sorted(out, key=lambda e: e.name)

    def walk_files(self, location: str) -> Iterator[Entry]:
        """Every file below a folder, as paths relative to it ('/'-separated), with size and
        modification time, in no particular order; folders Spark's listing leaves out (starscan.storage.files.is_hidden_folder) are not entered."""
        if self.fs is None:
            for folder, files in _walk_local(location, ""):
                rows = files.rows() if isinstance(files, FileColumns) else files or ()
                for name, size, mtime_ns in rows:
                    yield Entry(folder + name, False, size, mtime_ns)
            return
        yield from self._walk_store(location)

    def walk_folders(self, location: str, folders: dict[str, FolderStamp] | None = None,
                     known: dict[str, FolderStamp] | None = None
                     ) -> Iterator[tuple[str, Files]]:
        """``walk_files`` folder by folder: (the folder's relative path, '' or ending in '/';
        its files' (name, size, modification time), as ``FileColumns`` or Python rows), a
        folder perhaps in several parts. A table of a million files is listed without an
        object per file on the way (their construction took seconds of a first plan: issue 39).

        Local folders only: ``folders`` is filled with every folder entered (its absolute
        path -> ``FolderStamp``); ``known``, such a map from a walk before, lets the walk
        skip reading a folder whose modification time is the one recorded then (its entries
        are the same): it yields ``(folder, None)`` for it, and enters the subfolders it had.
        A streaming job's append then costs a walk of the folders it wrote to, not of the
        whole table."""
        if self.fs is None:
            yield from _walk_local(location, "", folders, known=known)
            return
        current, files = "", []  # type: str, list[tuple[str, int, int]]
        for entry in self._walk_store(location):
            folder, _, name = entry.name.rpartition("/")
            folder = folder + "/" if folder else ""
            if folder != current and files:
                yield current, files
                files = []
            current = folder
            files.append((name, entry.size, entry.mtime_ns))
        if files:
            yield current, files

    def _walk_store(self, location: str) -> Iterator[Entry]:
        assert self.fs is not None
        root = self._fs_path(location)
        try:
            infos = self._call(self.fs.get_file_info, pafs.FileSelector(root, recursive=True, allow_not_found=True))
        except NotADirectoryError:
            return
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(root):].lstrip("/")
            if any(is_hidden_folder(part) for part in rel.split("/")[:-1]):
                continue
            mtime = info.mtime_ns if info.mtime_ns is not None else 0
            yield Entry(rel, False, info.size or 0, mtime)

    def file_identity(self, location: str) -> tuple[int, int] | None:
        """(size, modification time in ns) of a file, or None when it is not there."""
        if self.fs is None:
            try:
                st = os.stat(location)
            except (OSError, ValueError):
                return None
            return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
        info = self._info(location)
        if info.type != pafs.FileType.File:
            return None
        return info.size or 0, info.mtime_ns or 0

    def open(self, location: str) -> Any:
        """A file to read (what pyarrow's readers take)."""
        if self.fs is None:
            return location
        return self._call(self.fs.open_input_file, self._fs_path(location))

    def read_bytes(self, location: str) -> bytes | None:
        """A whole (small) file's bytes, None when there is no such file."""
        try:
            if self.fs is None:
                with open(location, "rb") as fh:
                    return fh.read()
            with self._call(self.fs.open_input_stream, self._fs_path(location)) as stream:
                return bytes(stream.read())
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    # ---- writing (starscan load into object storage) ----
    def upload(self, local_file: str, location: str) -> None:
        """Copy a local file to ``location``, in one piece as the store sees it."""
        fs, path = self.arrow_path(location)
        self._call(pafs.copy_files, local_file, path, _LOCAL_FS, fs)

    def delete_dir(self, location: str) -> None:
        """Remove a folder and everything below it (nothing when it is not there)."""
        fs, path = self.arrow_path(location)
        try:
            self._call(fs.delete_dir, path)
        except FileNotFoundError:
            pass

    def _info(self, location: str) -> pafs.FileInfo:
        return self._call(self.fs.get_file_info, self._fs_path(location))  # type: ignore[union-attr]

    def _call(self, fn: Any, *args: Any) -> Any:
        """Run one store call; errors of the store itself (refused credentials, a bucket that
        is gone, no answer) become ``StorageUnavailable`` naming the store, never its keys."""
        try:
            return fn(*args)
        except (FileNotFoundError, NotADirectoryError):
            raise
        except OSError as exc:
            raise store_error(f"{self.scheme}://{self.authority}", exc) from None


@dataclass(slots=True)
class FolderStamp:
    """A local folder as a walk found it: its modification time, taken before its entries
    were read (``STALE``: read it again at the next walk), the folders below it the walk
    entered, as (absolute path, path relative to the walk's root), and its regular files
    when there are many (the next walk stats only files it does not hold:
    starscan.storage.folder_entries)."""

    mtime_ns: int
    subfolders: tuple[tuple[str, str], ...] = ()
    entries: FolderEntries | None = None


STALE = -1  # a FolderStamp.mtime_ns no folder has

#: What a walk yields per folder part: its files as columns, as Python rows (a name Arrow
#: cannot hold), or None (unchanged since the walk before).
Files = FileColumns | list[tuple[str, int, int]] | None


def _walk_local(directory: str, rel: str, folders: dict[str, FolderStamp] | None = None,
                chunk: int = 4096, known: dict[str, FolderStamp] | None = None) -> Iterator[tuple[str, Files]]:
    """The files below ``directory`` in the order the folder gives them (callers sort what
    they keep), as (``rel``, files) of up to ``chunk`` files at a time: a folder's entries
    are not all held at once, which for a folder of a million files was over a gigabyte of
    ``DirEntry`` objects (issue 39). pyarrow's local listing was no faster here: reading a
    million ``FileInfo`` objects' fields costs what it saves. A folder ``known`` with its
    present modification time is not read: (``rel``, None) (``Storage.walk_folders``); one
    known with other files stats only the files it did not hold (FolderReader)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        # Taken before the entries are read: a file added meanwhile moves it past this.
        folder_stat = os.fstat(fd)
        mtime_ns = folder_stat.st_mtime_ns
        before = known.get(directory) if known is not None else None
        if before is not None and before.mtime_ns == mtime_ns:
            os.close(fd)
            fd = -1
            if folders is not None:
                folders[directory] = before
            yield rel, None
            for path, below in before.subfolders:
                yield from _walk_local(path, below, folders, chunk, known)
            return
        reader = FolderReader(fd, folder_stat.st_dev, before.entries if before is not None else None,
                              folders is not None, chunk)
        # Read through the folder's descriptor: each entry's stat is then an fstatat of its
        # name, not a walk of its whole path (~10 % of a million files' walk here).
        with os.scandir(fd) as entries:
            for files in reader.read(entries):
                yield rel, files
    finally:
        if fd >= 0:
            os.close(fd)
    subfolders = tuple((os.path.join(directory, name), f"{rel}{name}/")
                       for name in reader.subfolders if not is_hidden_folder(name))
    if folders is not None:
        folders[directory] = FolderStamp(mtime_ns, subfolders, reader.entries())
    for path, below in subfolders:
        yield from _walk_local(path, below, folders, chunk, known)


_DENIED = ("ACCESS_DENIED", "Access Denied", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
           "Forbidden", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "HTTP status 403", "code 15")


def store_error(store: str, exc: OSError) -> StorageDenied | StorageUnavailable:
    """The domain error for a failed store call: refused credentials, or a store that cannot
    serve (gone, unreachable)."""
    message = _store_message(exc)
    if any(marker in str(exc) for marker in _DENIED):
        return StorageDenied(f"{store} refused starscan's credentials ({message}); check the s3_* settings of the "
                             "server (or a direct reader's connect(storage=...)) or the AWS_* environment")
    return StorageUnavailable(f"{store} cannot be read: {message}")


def _store_message(exc: OSError) -> str:
    """The store's own words, without pyarrow's request ids and with any key blanked."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for marker in (" Detail: ", " detail: "):
        text = text.split(marker)[0]
    return text[:300]


LOCAL = Storage(None, "")  # local folders
_SETUP_HINTS = {
    "hdfs": " (pyarrow's HDFS client loads libhdfs through Java: set JAVA_HOME, HADOOP_HOME and CLASSPATH="
            "$(hadoop classpath --glob) for the server)",
    "viewfs": " (pyarrow's HDFS client loads libhdfs through Java: set JAVA_HOME, HADOOP_HOME and CLASSPATH="
              "$(hadoop classpath --glob) for the server)",
    "gs": " (Google Cloud Storage credentials come from GOOGLE_APPLICATION_CREDENTIALS or the instance)",
}


def open_storage(location: str, options: StorageOptions | None = None) -> Storage:
    """The storage a location lives in: local for a path or ``file://``, else pyarrow.fs.
    One filesystem per store and options in a process: a scanner's open, a catalog's table
    and the warehouse reach the same bucket through the same client."""
    if not is_uri(location):
        return LOCAL
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return LOCAL
    if scheme in ("s3", "s3a"):
        return _store("s3", parts.netloc, options or StorageOptions())
    return _store(scheme, parts.netloc, None)


@functools.lru_cache(maxsize=64)
def _store(scheme: str, netloc: str, options: StorageOptions | None) -> Storage:
    if scheme == "s3":
        assert options is not None
        return Storage(options.s3_filesystem(), "s3", netloc, options)
    try:
        fs, _ = pafs.FileSystem.from_uri(f"{scheme}://{netloc}/")
    except (OSError, ValueError) as exc:  # not cached: the next call tries again
        hint = _SETUP_HINTS.get(scheme, "")
        if isinstance(exc, OSError):
            error = store_error(f"{scheme}://{netloc}", exc)
            raise type(error)(error.message + hint) from None
        raise StorageUnavailable(f"cannot open {scheme}://{netloc}: {exc}{hint}") from None
    return Storage(fs, scheme, netloc)

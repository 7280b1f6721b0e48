"""A folder's files read with a stat only for what the walk before did not hold
(starscan.storage.folder_entries), against a plain stat of every file."""

from __future__ import annotations

import os

import pytest

from starscan.storage import folder_entries
from starscan.storage.folder_entries import FileColumns, FolderReader


def _read(folder, before=None, chunk=3):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        reader = FolderReader(fd, os.fstat(fd).st_dev, before, record=True, chunk=chunk)
        with os.scandir(fd) as entries:
            rows = [row for part in reader.read(entries)
                    for row in (part.rows() if isinstance(part, FileColumns) else part)]
        return sorted(rows), reader
    finally:
        os.close(fd)


def _truth(folder):
    return sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(folder) if e.is_file())


@pytest.fixture(autouse=True)
def remember_all(monkeypatch):
    monkeypatch.setattr(folder_entries, "ENTRIES_MIN", 1)
    monkeypatch.setattr(folder_entries, "SETTLED_NS", 0)  # the files here are written just now


def _files(folder, count):
    folder.mkdir(exist_ok=True)
    for i in range(count):
        (folder / f"f{i:02d}").write_bytes(b"x" * i)


def test_the_entries_answer_what_a_stat_would(tmp_path):
    _files(tmp_path, 10)
    (tmp_path / "sub").mkdir()
    rows, reader = _read(tmp_path)
    assert rows == _truth(tmp_path)
    assert reader.subfolders == ["sub"]
    entries = reader.entries()
    assert entries is not None and len(entries) == 10
    (tmp_path / "f03").unlink()
    (tmp_path / "new").write_bytes(b"y" * 50)
    (tmp_path / "tmp").write_bytes(b"z" * 70)
    os.replace(tmp_path / "tmp", tmp_path / "f05")  # a new inode under an old name
    again, _ = _read(tmp_path, entries)
    assert again == _truth(tmp_path)


def test_a_file_gone_between_reading_the_folder_and_its_stat_is_left_out(tmp_path):
    _files(tmp_path, 5)
    _, reader = _read(tmp_path)
    entries = reader.entries()
    (tmp_path / "new").write_bytes(b"new")
    for before in (None, entries):
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            listed = list(os.scandir(fd))  # read, then the file goes
            (tmp_path / "new").unlink(missing_ok=True)
            parts = list(FolderReader(fd, os.fstat(fd).st_dev, before, record=False, chunk=100).read(iter(listed)))
        finally:
            os.close(fd)
        rows = sorted(row for part in parts for row in part.rows())
        assert rows == _truth(tmp_path)
        (tmp_path / "new").write_bytes(b"new")


def test_names_arrow_cannot_hold_are_read_as_python_rows_and_not_remembered(tmp_path):
    _files(tmp_path, 4)
    fd = os.open(bytes(tmp_path) + b"/bad-\xff", os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"abc")
    os.close(fd)
    rows, reader = _read(tmp_path)
    assert rows == _truth(tmp_path)
    assert reader.python_rows and reader.entries() is None


def test_a_small_folder_is_not_remembered(tmp_path, monkeypatch):
    monkeypatch.setattr(folder_entries, "ENTRIES_MIN", 6)
    _files(tmp_path, 5)
    _, reader = _read(tmp_path)
    assert reader.entries() is None


def test_entries_of_another_file_system_are_not_used(tmp_path, monkeypatch):
    """Inodes name files within one file system: a folder now on another (a mount in its
    place) is stat-ed whole."""
    _files(tmp_path, 5)
    _, reader = _read(tmp_path)
    entries = reader.entries()
    assert entries is not None
    entries.sizes[:] = 12345  # what the entries would answer
    entries.device += 1
    rows, _ = _read(tmp_path, entries)
    assert rows == _truth(tmp_path)

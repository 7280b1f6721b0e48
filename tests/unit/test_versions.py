"""starscan.tables.versions: what was appended since a version, exactly, or a refusal."""

from __future__ import annotations

import pytest

from starscan.core.errors import TableRewritten, VersionUnknown
from starscan.tables.versions import VersionHistory

A, B, C = ("a.parquet", 10, 1), ("b.parquet", 20, 2), ("c.parquet", 30, 3)


def test_appended_files_since_each_version_survive_a_restart(tmp_path):
    history = VersionHistory(tmp_path)
    history.observe("d.t", "/wh/d.db/t", 1, [A])
    history.observe("d.t", "/wh/d.db/t", 1, [A])  # the same version again: nothing new
    history.observe("d.t", "/wh/d.db/t", 2, [A, B])
    history.observe("d.t", "/wh/d.db/t", 3, [A, B, C])
    assert history.added_since("/wh/d.db/t", 1, 3) == [B, C]
    assert history.added_since("/wh/d.db/t", 2, 3) == [C]
    assert history.added_since("/wh/d.db/t", 3, 3) == []
    again = VersionHistory(tmp_path)  # another process, the same state folder
    assert again.added_since("/wh/d.db/t", 1, 3) == [B, C]


def test_a_rewritten_or_removed_file_refuses_and_unknown_versions_are_said():
    history = VersionHistory(None)
    history.observe("d.t", "loc", 1, [A])
    history.observe("d.t", "loc", 2, [A, B])
    history.observe("d.t", "loc", 3, [("a.parquet", 11, 9), B])  # a.parquet rewritten
    with pytest.raises(TableRewritten, match="rewritten after version 1.*a.parquet"):
        history.added_since("loc", 1, 3)
    assert history.added_since("loc", 3, 3) == []
    with pytest.raises(VersionUnknown, match="version 77"):
        history.added_since("loc", 77, 3)


def test_a_file_appended_and_replaced_after_the_version_counts_once():
    history = VersionHistory(None)
    history.observe("d.t", "loc", 1, [A])
    history.observe("d.t", "loc", 2, [A, B])
    history.observe("d.t", "loc", 3, [A, ("b.parquet", 21, 5)])  # b, appended after 1, rewritten
    assert history.added_since("loc", 1, 3) == [("b.parquet", 21, 5)]


def test_a_new_version_is_recorded_behind_the_listing_and_read_after_it():
    """observe returns before the history is written (a million files took seconds of a first
    plan); its readers wait for it, and a file set of a version already recorded is not read."""
    import threading

    history = VersionHistory(None)
    history.observe("d.t", "loc", 1, [A])
    history.settled("loc")
    gate = threading.Event()

    def slow_files():
        gate.wait(10)
        yield from (A, B)

    history.observe("d.t", "loc", 2, slow_files())
    answer: list = []
    reader = threading.Thread(target=lambda: answer.append(history.added_since("loc", 1, 2)))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive() and not answer  # waits for version 2 to be recorded
    gate.set()
    reader.join(10)
    assert answer == [[B]]

    read: list = []

    def files_of_2():
        read.append(True)
        yield from (A, B)

    history.observe("d.t", "loc", 2, files_of_2())
    assert history.position("loc", 2) == 1
    assert not read  # version 2 was recorded already: its files were not gone through again


def test_the_history_is_bounded():
    history = VersionHistory(None, max_versions=3)
    for v in range(1, 6):
        history.observe("d.t", "loc", v, [(f"f{i}", 1, 1) for i in range(v)])
    with pytest.raises(VersionUnknown):
        history.added_since("loc", 1, 5)
    assert history.added_since("loc", 3, 5) == [("f3", 1, 1), ("f4", 1, 1)]


def test_two_processes_sharing_the_state_folder_lose_no_change(tmp_path):
    """Two FEs (here: two sets of objects, each with its own cache and file descriptors) on
    one state folder: versions one observes and positions both commit, at the same time,
    are all kept, and each sees the other's."""
    import threading

    from starscan.tables.changes import FolderChanges
    from starscan.tables.consumers import ConsumerPositions

    fe1 = (VersionHistory(tmp_path), ConsumerPositions(tmp_path))
    fe2 = (VersionHistory(tmp_path), ConsumerPositions(tmp_path))
    loc = "/wh/db.db/t"
    # Each records on its own thread: the order on disk is the order recorded (as it was the
    # order in which two FEs' listings ended).
    fe1[0].observe("db.t", loc, 1, [("a", 1, 1)])
    fe1[0].settled(loc)
    fe2[0].observe("db.t", loc, 2, [("a", 1, 1), ("b", 1, 1)])
    fe2[0].settled(loc)
    assert [p for p, _, _ in fe1[0].added_since(loc, 1, 2)] == ["b"]  # fe1 reads fe2's version

    def commits(fe, prefix: str) -> None:
        history, positions = fe
        for i in range(25):
            positions.commit("db.t", loc, f"{prefix}{i}", 2 if i % 2 else 1, "root", FolderChanges(history, loc))

    threads = [threading.Thread(target=commits, args=(fe, name)) for fe, name in ((fe1, "x"), (fe2, "y"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = {f"{p}{i}": 2 if i % 2 else 1 for p in "xy" for i in range(25)}
    assert fe1[1].consumers(loc) == fe2[1].consumers(loc) == expected
    assert ConsumerPositions(tmp_path).consumers(loc) == expected  # and on disk

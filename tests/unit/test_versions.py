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


def _files(n, extra=()):
    return [(f"part-{i:05d}.parquet", 100, 1) for i in range(n)] + list(extra)


def test_a_new_version_is_a_journal_line_and_the_checkpoint_is_written_now_and_then(tmp_path, monkeypatch):
    """A version of a large table costs a line the size of its change; the file set is
    written again only once the journal holds versions.JOURNAL_LINES entries; another
    process (or a restart) reads checkpoint and journal to the same answers."""
    from starscan.tables import versions

    monkeypatch.setattr(versions, "JOURNAL_LINES", 3)
    history = VersionHistory(tmp_path)
    loc = "/wh/d.db/t"
    history.observe("d.t", loc, 1, _files(10_000))
    history.settled(loc)
    [checkpoint] = (tmp_path / "versions").glob("*.json")
    journal = checkpoint.with_suffix(".journal")
    written = checkpoint.stat().st_mtime_ns, checkpoint.stat().st_ino
    appended = []
    for v in range(2, 5):
        appended.append((f"new-{v}.parquet", 7, v))
        history.observe("d.t", loc, v, _files(10_000, appended))
        history.settled(loc)
        assert (checkpoint.stat().st_mtime_ns, checkpoint.stat().st_ino) == written  # not rewritten
        lines = journal.read_bytes().splitlines()
        assert len(lines) == v - 1 and len(lines[-1]) < 200  # one small line per version
    appended.append(("new-5.parquet", 7, 5))
    history.observe("d.t", loc, 5, _files(10_000, appended))  # the journal is full: a checkpoint
    history.settled(loc)
    assert not journal.exists() and checkpoint.stat().st_ino != written[1]
    appended.append(("new-6.parquet", 7, 6))
    history.observe("d.t", loc, 6, _files(10_000, appended))
    history.settled(loc)
    for reader in (history, VersionHistory(tmp_path)):
        assert reader.added_since(loc, 1, 6) == sorted(appended)
        assert reader.added_since(loc, 4, 6) == appended[3:]
        assert reader.position(loc, 3) == 2


def test_two_processes_recording_in_turn_across_checkpoints_see_every_version(tmp_path, monkeypatch):
    from starscan.tables import versions

    monkeypatch.setattr(versions, "JOURNAL_LINES", 2)
    fe1, fe2 = VersionHistory(tmp_path), VersionHistory(tmp_path)
    loc = "/wh/d.db/t"
    files = [("a", 1, 1)]
    for v in range(1, 12):
        fe = fe1 if v % 2 else fe2
        fe.observe("d.t", loc, v, list(files))
        fe.settled(loc)
        files.append((f"f{v}", 1, v))
    for reader in (fe1, fe2, VersionHistory(tmp_path)):
        assert reader.added_since(loc, 1, 11) == sorted(files[1:-1])
        assert reader.added_since(loc, 10, 11) == [("f10", 1, 10)]


def test_a_torn_journal_line_is_left_out_and_the_next_version_is_kept_whole(tmp_path):
    """A writer that died within a line leaves a part of it; that version is unknown, the
    ones before and after are read whole."""
    history = VersionHistory(tmp_path)
    loc = "/wh/d.db/t"
    history.observe("d.t", loc, 1, [A])
    history.observe("d.t", loc, 2, [A, B])
    history.settled(loc)
    [journal] = (tmp_path / "versions").glob("*.journal")
    with open(journal, "ab") as fh:
        fh.write(b'{"seq":3,"version":3,"at":1,"add')  # a crash mid-line
    other = VersionHistory(tmp_path)
    assert other.added_since(loc, 1, 2) == [B]
    other.observe("d.t", loc, 4, [A, B, C])
    other.settled(loc)
    for reader in (other, VersionHistory(tmp_path)):
        assert reader.added_since(loc, 1, 4) == [B, C]
        with pytest.raises(VersionUnknown):
            reader.added_since(loc, 3, 4)


def test_a_history_written_before_the_journal_is_read(tmp_path):
    """The one-file layout of earlier versions (no sequence numbers) is the checkpoint."""
    import hashlib
    import json

    loc = "/wh/d.db/t"
    folder = tmp_path / "versions"
    folder.mkdir()
    name = hashlib.blake2b(loc.encode(), digest_size=16).hexdigest()
    (folder / f"{name}.json").write_text(json.dumps({
        "location": loc, "table": "d.t", "current": [list(A), list(B)],
        "log": [{"version": 1, "at": 1.0, "added": [], "removed": []},
                {"version": 2, "at": 2.0, "added": [list(B)], "removed": []}]}))
    history = VersionHistory(tmp_path)
    assert history.added_since(loc, 1, 2) == [B]
    history.observe("d.t", loc, 3, [A, B, C])
    history.settled(loc)
    assert VersionHistory(tmp_path).added_since(loc, 1, 3) == [B, C]


def test_a_version_recorded_from_its_change_is_the_one_recorded_from_its_files(tmp_path):
    """What a listing made from the one before passes (the change since that version) gives
    the same history as the whole file set; a change that does not fit the history's last
    version, or does not add up, is not used."""
    by_change, by_files = VersionHistory(tmp_path / "a"), VersionHistory(tmp_path / "b")
    loc = "/wh/d.db/t"
    v1, v2 = [A, B], [A, ("b.parquet", 21, 5), C]  # b rewritten, c added
    for h in (by_change, by_files):
        h.observe("d.t", loc, 1, list(v1))
    by_change.observe("d.t", loc, 2, iter(()), change=(1, [("b.parquet", 21, 5), C], [B]), count=3)
    by_files.observe("d.t", loc, 2, list(v2))
    by_change.observe("d.t", loc, 3, list(v2 + [("d", 1, 1)]), change=(77, [("d", 1, 1)], []), count=4)  # not from 2
    by_files.observe("d.t", loc, 3, list(v2 + [("d", 1, 1)]))
    by_change.observe("d.t", loc, 4, list(v2), change=(3, [], [("zz", 1, 1)]), count=3)  # does not add up
    by_files.observe("d.t", loc, 4, list(v2))
    for h in (by_change, by_files):
        h.settled(loc)
    for since in (2, 3):
        assert VersionHistory(tmp_path / "a").added_since(loc, since, 3) == by_files.added_since(loc, since, 3)
    with pytest.raises(TableRewritten):
        by_change.added_since(loc, 1, 4)
    assert [e["removed"] for e in by_change._log(loc)] == [e["removed"] for e in by_files._log(loc)]
    assert [e["added"] for e in by_change._log(loc)] == [e["added"] for e in by_files._log(loc)]


def test_a_restarted_history_reads_its_file_set_only_when_a_version_changes_it(tmp_path):
    """A restart over the version last recorded reads the checkpoint's log, not its file
    set; the journal's lines read meanwhile are applied when the file set is needed."""
    loc = "/wh/d.db/t"
    history = VersionHistory(tmp_path)
    history.observe("d.t", loc, 1, [A, B])
    history.observe("d.t", loc, 2, [A, B, C])  # a journal line
    history.settled(loc)
    again = VersionHistory(tmp_path)
    again.observe("d.t", loc, 2, iter([("never", 1, 1)]))  # recorded already
    again.settled(loc)
    assert again._states[loc]._current is None
    assert again.added_since(loc, 1, 2) == [C]
    D = ("d.parquet", 40, 4)
    # Recorded from the change alone, which adds up only with the journal's line applied
    # (else the files given, which are not the table's, would be compared whole).
    again.observe("d.t", loc, 3, iter([("not", 1, 1)]), change=(2, [D], []), count=4)
    again.settled(loc)
    for reader in (again, VersionHistory(tmp_path)):
        assert reader.added_since(loc, 2, 3) == [D]
        assert reader.added_since(loc, 1, 3) == [C, D]


def test_an_unreadable_file_set_starts_the_history_again(tmp_path):
    """Unknown, never wrong: a checkpoint whose file set does not parse is a history that
    knows no version before the next one it records."""
    loc = "/wh/d.db/t"
    history = VersionHistory(tmp_path)
    history.observe("d.t", loc, 1, [A, B])
    history.settled(loc)
    [checkpoint] = (tmp_path / "versions").glob("*.json")
    text = checkpoint.read_bytes()
    assert text.endswith(b"]]}")
    checkpoint.write_bytes(text[:-3] + b",]]}")  # the log still parses, the file set does not
    again = VersionHistory(tmp_path)
    again.observe("d.t", loc, 2, [A, B, C])
    again.settled(loc)
    with pytest.raises(VersionUnknown):
        again.added_since(loc, 1, 2)
    assert VersionHistory(tmp_path).added_since(loc, 2, 2) == []


def test_a_restarted_history_holds_where_its_file_set_is_not_the_text(tmp_path):
    """The file set's text stays in the checkpoint until a version needs it (a million files'
    is ~50 MB); it is read from the checkpoint the state was read from, and one replaced
    behind the history's back (no writer does: they hold the table's lock) is unreadable,
    so the history starts again rather than compare against another file set."""
    loc = "/wh/d.db/t"
    history = VersionHistory(tmp_path)
    history.observe("d.t", loc, 1, [A, B])
    history.settled(loc)
    again = VersionHistory(tmp_path)
    assert again.position(loc, 1) == 0
    state = again._states[loc]
    assert state._current is None and not any(isinstance(getattr(state, s), bytes) for s in state.__slots__)
    assert dict(state.current) == {A: None, B: None}  # read where it is

    third = VersionHistory(tmp_path)
    assert third.position(loc, 1) == 0
    [checkpoint] = (tmp_path / "versions").glob("*.json")
    text = checkpoint.read_bytes()
    replaced = text.replace(b'"a.parquet"', b'"x.parquet"')
    assert replaced != text
    checkpoint.with_suffix(".tmp").write_bytes(replaced)
    checkpoint.with_suffix(".tmp").replace(checkpoint)  # another file (inode) from now on
    assert dict(third._states[loc].current) == {}  # not the text this state read: unknown
    assert third._states[loc].log == []


def test_a_checkpoint_with_its_file_set_first_is_laid_out_again_by_the_next_record(tmp_path):
    """Earlier writers put the file set before the log, which makes every start read the
    whole file set (a million files': ~230 MB of objects): the next record, of the same
    version too, writes it again with the file set last, and later starts hold only where
    it is. Nothing the history knew is lost."""
    import hashlib
    import json

    loc = "/wh/d.db/t"
    folder = tmp_path / "versions"
    folder.mkdir()
    name = hashlib.blake2b(loc.encode(), digest_size=16).hexdigest()
    checkpoint = folder / f"{name}.json"
    checkpoint.write_text(json.dumps({
        "location": loc, "current": [list(A), list(B)], "seq": 2,
        "log": [{"seq": 1, "version": 1, "at": 1.0, "added": [], "removed": []},
                {"seq": 2, "version": 2, "at": 2.0, "added": [list(B)], "removed": []}], "table": "d.t"}))
    history = VersionHistory(tmp_path)
    history.observe("d.t", loc, 2, [A, B])  # the version recorded last: no new entry
    history.settled(loc)
    assert checkpoint.read_bytes().endswith(b'"current":[["a.parquet",10,1],["b.parquet",20,2]]}')
    again = VersionHistory(tmp_path)
    assert again.added_since(loc, 1, 2) == [B]
    assert again._states[loc]._current is None and not again._states[loc].laid_out_old
    again.observe("d.t", loc, 3, [A, B, C])
    again.settled(loc)
    assert VersionHistory(tmp_path).added_since(loc, 1, 3) == [B, C]

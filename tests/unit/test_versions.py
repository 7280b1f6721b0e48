"""starscan.versions: what was appended since a version, exactly, or a refusal."""

from __future__ import annotations

import pytest

from starscan.errors import TableRewritten, VersionUnknown
from starscan.versions import VersionHistory

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


def test_the_history_is_bounded():
    history = VersionHistory(None, max_versions=3)
    for v in range(1, 6):
        history.observe("d.t", "loc", v, [(f"f{i}", 1, 1) for i in range(v)])
    with pytest.raises(VersionUnknown):
        history.added_since("loc", 1, 5)
    assert history.added_since("loc", 3, 5) == [("f3", 1, 1), ("f4", 1, 1)]

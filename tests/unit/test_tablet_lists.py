"""starscan.plans.tablet_lists: a large table's tablet list, named by a digest of its tablets
and held by the server, as listed at once and packed behind the plan."""

from __future__ import annotations

import threading

from support.waits import wait_until

from starscan.plans import tablet_lists as tl
from starscan.tables.catalog import DataFile
from starscan.tables.tablets import Sizing, split_files


def _tablets(n: int = 50, table: str = "d.t"):
    files = [DataFile(f"part-{i:04d}.parquet", 100 + i, 1_700_000_000_000_000_000 + i) for i in range(n)]
    return split_files(table, files, Sizing(target_bytes=1000, open_cost_bytes=100), lambda f: None)


def _wait_packed(lists: tl.TabletLists, digest: bytes) -> None:
    def packed() -> bool:
        with lists._lock:
            return digest not in lists._held

    wait_until(packed, 10, 0.01, what="the list to be packed")


def test_the_digest_names_the_list_whether_listed_or_packed():
    tablets = _tablets()
    assert tl.digest_of(tablets) == tl.digest_of(tl.to_plan_tablets(tablets))
    assert tl.digest_of(tablets) == tl.digest_of(_tablets())  # the same files: the same list
    moved = _tablets(table="d.u")
    assert tl.digest_of(tablets) != tl.digest_of(moved)  # other ids
    assert tl.digest_of(tablets) != tl.digest_of(_tablets(51))


def test_a_held_list_answers_at_once_and_the_same_once_packed(monkeypatch):
    tablets = _tablets()
    by_id = {t.tablet_id: t for t in tablets}
    digest = tl.digest_of(tablets)
    lists = tl.TabletLists(1 << 20)
    gate = threading.Event()
    real_pack = tl.plan_codec.pack_tablets
    monkeypatch.setattr(tl.plan_codec, "pack_tablets", lambda ts, *index: gate.wait(10) and real_pack(ts, *index))
    lists.hold(digest, by_id)
    ids = [tablets[3].tablet_id, tablets[0].tablet_id, 12345]
    held = lists.planned(digest, ids)  # before it is packed
    gate.set()
    _wait_packed(lists, digest)
    packed = lists.planned(digest, ids)
    assert held == packed == tl.to_plan_tablets([tablets[3], tablets[0]])
    assert lists.planned(tl.digest_of(_tablets(7)), ids) is None  # not held


def test_a_list_larger_than_the_store_is_packed_once_and_not_kept(monkeypatch):
    tablets = _tablets(400)
    by_id = {t.tablet_id: t for t in tablets}
    digest = tl.digest_of(tablets)
    lists = tl.TabletLists(1)  # the store holds nothing this large (its floor: 1 byte)
    packs: list[int] = []
    real_pack = tl.plan_codec.pack_tablets
    monkeypatch.setattr(tl.plan_codec, "pack_tablets", lambda ts, *index: packs.append(1) or real_pack(ts, *index))
    lists.hold(digest, by_id)
    _wait_packed(lists, digest)
    lists.hold(digest, by_id)  # as each plan of the version does
    _wait_packed(lists, digest)
    assert packs == [1]
    assert lists.planned(digest, [tablets[0].tablet_id]) is None  # rebuilt from a listing when asked


def test_tablets_packed_one_at_a_time_are_the_whole_lists_bytes():
    from starscan.core.thrift_defs import plan as plan_idl
    from starscan.plans import codec

    files = [DataFile(f"p={i % 3}/part-{i:04d}.parquet", 100 + i, 1_700_000_000_000_000_000 + i, (("p", str(i % 3)),),
                      deletes="dv" if i % 5 == 0 else None, recorded_partition='{"p":"1"}' if i % 7 == 0 else None)
             for i in range(40)]
    tablets = split_files("d.t", files, Sizing(target_bytes=1000, open_cost_bytes=100), lambda f: None)
    planned = tl.to_plan_tablets(tablets)
    planned[0].first_row_group, planned[0].row_groups, planned[0].first_row, planned[0].rows = 2, 3, 4096, 100
    for some in ([], planned[:1], planned):
        whole = codec.serialize(plan_idl.TPlanTablets(tablets=some))
        assert codec.pack_tablets(iter(some)) == codec.pack_tablets(list(some)) == whole
        assert codec.unpack_tablets(whole) == some
    assert codec.pack_tablets(tl.plan_tablets(tablets)) == codec.pack_tablets(tl.to_plan_tablets(tablets))


def test_a_packed_list_answers_a_scanners_tablets_without_decoding_the_rest(monkeypatch):
    tablets = _tablets(300)
    by_id = {t.tablet_id: t for t in tablets}
    digest = tl.digest_of(tablets)
    lists = tl.TabletLists(1 << 20)
    lists.hold(digest, by_id)
    _wait_packed(lists, digest)
    monkeypatch.setattr(tl.plan_codec, "unpack_tablets", lambda packed: (_ for _ in ()).throw(AssertionError("whole list")))
    decoded: list[int] = []
    real_one = tl.plan_codec.unpack_tablet
    monkeypatch.setattr(tl.plan_codec, "unpack_tablet", lambda *a: decoded.append(1) or real_one(*a))
    some = [tablets[i] for i in (17, 3, len(tablets) - 1, 0)]
    assert lists.planned(digest, [t.tablet_id for t in some] + [999]) == tl.to_plan_tablets(some)
    assert len(decoded) == len(some) < len(tablets)

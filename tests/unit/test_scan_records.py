"""Records of resumable scans (starscan.plans.scan_records): written whole, found by context
id only, gone once idle past their keep-alive, and kept when another BE touched them."""

from __future__ import annotations

import os
import time
import uuid

from starscan.plans.scan_records import ScanRecord, ScanRecords, is_context_id


def _record(keep_alive_s: float = 60.0) -> ScanRecord:
    return ScanRecord(context_id=str(uuid.uuid4()), plan="signed-plan", tablet_ids=[3, 1], batch_size=1024,
                      keep_alive_s=keep_alive_s, properties={"starscan.eos_row_count": "true"}, query_timeout=30)


def _age(records: ScanRecords, context_id: str, seconds: float) -> None:
    path = records.folder / f"{context_id}.json"
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def test_a_record_reads_back_as_written(tmp_path):
    records = ScanRecords(tmp_path / "scans")
    record = _record()
    records.put(record)
    assert records.get(record.context_id) == record
    assert [p.name for p in records.folder.iterdir()] == [f"{record.context_id}.json"]  # no temporary left


def test_only_context_ids_name_records(tmp_path):
    records = ScanRecords(tmp_path)
    assert not is_context_id("../users") and not is_context_id("") and not is_context_id(None)  # type: ignore[arg-type]
    assert not is_context_id(str(uuid.uuid4()).upper())
    assert records.get("../users") is None and records.get(None) is None
    (tmp_path / "users.json").write_text("{}")
    records.delete("users")
    assert (tmp_path / "users.json").exists()


def test_a_record_idle_past_its_keep_alive_is_gone(tmp_path):
    records = ScanRecords(tmp_path)
    idle, used = _record(keep_alive_s=5), _record(keep_alive_s=5)
    records.put(idle)
    records.put(used)
    _age(records, idle.context_id, 10)
    _age(records, used.context_id, 10)
    records.touch(used.context_id)  # its BE read from it just now
    assert records.get(idle.context_id) is None
    assert not (tmp_path / f"{idle.context_id}.json").exists()
    assert records.get(used.context_id) == used


def test_expire_deletes_what_no_be_touched(tmp_path):
    records = ScanRecords(tmp_path)
    dead, alive = _record(keep_alive_s=5), _record(keep_alive_s=5)
    records.put(dead)
    records.put(alive)
    _age(records, dead.context_id, 6)
    assert records.expire() == 1
    assert records.get(dead.context_id) is None and records.get(alive.context_id) == alive


def test_a_reaping_be_leaves_a_record_another_be_touched(tmp_path):
    records = ScanRecords(tmp_path)
    record = _record()
    mine = records.put(record)
    _age(records, record.context_id, 30)
    records.delete_unless_touched_since(record.context_id, mine)  # nobody else: gone
    assert records.get(record.context_id) is None

    mine = records.put(record)
    _age(records, record.context_id, -30)  # another BE resumed it after this one's last touch
    records.delete_unless_touched_since(record.context_id, mine)
    assert records.get(record.context_id) == record

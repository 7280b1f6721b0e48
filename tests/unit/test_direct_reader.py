"""The client's direct reader (starscan/client/direct.py) shared by a read's worker threads:
tablets opened side by side all read their rows, none falls back to the BE."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from starscan.arrow.direct import DirectFile, DirectRead
from starscan.client import direct as client_direct
from starscan.client.direct import DirectReader

SPARK_SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
]}


def _file(path: Path, first: int, rows: int) -> DirectFile:
    ids = pa.array(range(first, first + rows), pa.int64())
    stamps = pa.array([i * 1_000_000 for i in range(first, first + rows)], pa.timestamp("us", "UTC"))
    pq.write_table(pa.table({"id": ids, "ts": stamps}), path)
    stat = path.stat()
    return DirectFile(path.as_uri(), stat.st_size, stat.st_mtime_ns)


@pytest.mark.parametrize("native", [False, True])
def test_tablets_opened_at_once_by_several_threads_all_read_their_rows(tmp_path: Path, monkeypatch, native):
    files = [_file(tmp_path / f"part-{i}.parquet", i * 1000, 1000) for i in range(4)]
    section = DirectRead("demo.t", 1, SPARK_SCHEMA, (("id", "id"), ("ts", "ts")), None, "UTC", ()).to_json()
    # Widen the window between the first thread's building of the read and of its converter:
    # a thread that found the read in between once converted with no converter (seen in CI).
    slow = client_direct.native_schema

    def native_schema(*args):
        time.sleep(0.2)
        return slow(*args)

    monkeypatch.setattr(client_direct, "native_schema", native_schema)
    reader = DirectReader(section, None, native, workers=len(files))
    start = threading.Barrier(len(files))
    got: dict[int, object] = {}

    def read(n: int) -> None:
        start.wait()
        try:
            got[n] = sum(b.num_rows for b in reader.tablet(n, {"direct": True, "files": [files[n].to_json()]}))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            got[n] = exc

    threads = [threading.Thread(target=read, args=(n,)) for n in range(len(files))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert got == {n: 1000 for n in range(len(files))}

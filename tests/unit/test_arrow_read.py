"""The kernel's Parquet reader (starscan/arrow/read.py) with several row groups decoding at
once, as a client's direct read runs it: the same rows as one after another, a bounded
number of batches ahead of the caller, errors reaching the caller, and no thread left
behind when the caller stops early."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from starscan.arrow.read import _AHEAD, read_split
from starscan.arrow.scan import Fields, plan_read
from starscan.arrow.split_plan import ArrowSplit, FilePart, SplitReadError
from starscan.core.sql_types import parse_schema
from starscan.expr import column, literal, op

SCHEMA = parse_schema({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "d", "type": "date", "nullable": True, "metadata": {}},
]})


def _write(path: Path, first: int, groups: list[int]) -> None:
    """A file of ``groups`` row groups (their sizes), ids counting up from ``first``."""
    schema = pa.schema([("id", pa.int64(), False), ("d", pa.date32())])
    with pq.ParquetWriter(path, schema) as writer:
        for rows in groups:
            ids = pa.array(range(first, first + rows), pa.int64())
            days = pa.array([i % 3000 if i % 7 else None for i in range(first, first + rows)], pa.int32())
            writer.write_table(pa.table([ids, days.view(pa.date32())], schema=schema), row_group_size=rows)
            first += rows


def _split(tmp_path: Path, names: list[str]) -> ArrowSplit:
    """The files as planned now: their sizes and modification times pin them."""
    parts = []
    for name in names:
        path = tmp_path / name
        stat = path.stat()
        parts.append(FilePart(str(path), name, stat.st_size, stat.st_mtime_ns, None))
    return ArrowSplit(tuple(parts))


@pytest.fixture
def table(tmp_path: Path):
    _write(tmp_path / "a.parquet", 0, [5000, 3000, 7000, 10])
    _write(tmp_path / "b.parquet", 15010, [6000, 4000])
    read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id"), ("d", "d")], None, "UTC", "parquet", set())
    return read, _split(tmp_path, ["a.parquet", "b.parquet"])


def _rows(batches) -> Counter:
    out: Counter = Counter()
    for batch in batches:
        out.update(zip(*(c.to_pylist() for c in batch.columns)))
    return out


def test_row_groups_side_by_side_give_the_rows_one_after_another_gives(table):
    read, split = table
    alone = _rows(read_split(read, split, batch_rows=1024))
    assert sum(alone.values()) == 25010 and len(alone) == 25010
    for threads in (2, 3, 8):
        assert _rows(read_split(read, split, batch_rows=1024, threads=threads)) == alone


def test_a_predicate_and_the_finish_step_run_in_the_decoding_threads(tmp_path: Path, table):
    del table  # (it wrote the files)
    pred = op(">=", column("id"), literal("bigint", "14000"))
    read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id")], pred, "UTC", "parquet", set())
    split = _split(tmp_path, ["a.parquet", "b.parquet"])
    where: set[str] = set()

    def finish(batch: pa.RecordBatch) -> pa.RecordBatch:
        where.add(threading.current_thread().name)
        return batch

    rows = _rows(read_split(read, split, batch_rows=1024, threads=2, finish=finish))
    assert rows == Counter((i,) for i in range(14000, 25010))
    assert where and all(name.startswith("starscan-decode") for name in where)


def _decoders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("starscan-decode")]


def _waiting_to_put(thread: threading.Thread) -> bool:
    """Whether the thread is inside the reader's hand-over (``_put``), blocked waiting for
    room in the queue (a queue with room never waits there)."""
    frame = sys._current_frames().get(thread.ident)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "_put" in names and "wait" in names[:names.index("_put")]


def _wait_for_no_decoders() -> None:
    from support.waits import wait_until  # here: this module is also imported by scripts without tests/ on the path

    wait_until(lambda: not _decoders(), 10, 0.02, what="the decoding threads to end")


def test_the_threads_stay_a_bounded_number_of_batches_ahead_and_end_when_the_caller_stops(table):
    read, split = table
    made = []
    batches = read_split(read, split, batch_rows=500, threads=2, finish=lambda b: made.append(1) or b)
    next(batches)
    from support.waits import wait_until  # here: this module is also imported by scripts without tests/ on the path

    # Run ahead as far as they may: until every decoding thread waits to hand a batch over.
    wait_until(lambda: len(_decoders()) == 2 and all(_waiting_to_put(t) for t in _decoders()),
               what="the decoding threads to fill the queue and wait")
    # The queue holds threads x _AHEAD; each thread may hold one more it waits to put.
    assert len(made) <= 1 + 2 * _AHEAD + 2 < 25010 // 500
    batches.close()
    _wait_for_no_decoders()


def test_a_broken_file_fails_the_read_naming_it_and_stops_the_other_threads(tmp_path: Path, table):
    read, _ = table
    broken = tmp_path / "c.parquet"
    broken.write_bytes((tmp_path / "b.parquet").read_bytes()[:-100])  # the footer cut off
    split = _split(tmp_path, ["a.parquet", "c.parquet"])
    with pytest.raises(SplitReadError, match=r"file .*c\.parquet is not a readable Parquet, ORC or Avro file"):
        for _ in read_split(read, split, batch_rows=500, threads=2):
            pass
    _wait_for_no_decoders()


def test_a_file_rewritten_before_it_is_opened_is_gone(tmp_path: Path, table):
    read, split = table
    _write(tmp_path / "b.parquet", 0, [10])  # rewritten after the split was made
    with pytest.raises(SplitReadError, match=r"version 1 is gone: file .*b\.parquet was rewritten"):
        for _ in read_split(read, split, batch_rows=1024, threads=2):
            pass
    _wait_for_no_decoders()


def test_one_thread_reads_a_file_of_many_small_row_groups_in_full_batches(tmp_path: Path):
    """A Spark task's read (threads=1) sends each batch as a message of its own: 300 row
    groups of 50 rows are 15 batches of 1,000 rows, not 300 of 50."""
    _write(tmp_path / "small.parquet", 0, [50] * 300)
    read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id")], None, "UTC", "parquet", set())
    batches = list(read_split(read, _split(tmp_path, ["small.parquet"]), batch_rows=1000))
    assert [b.num_rows for b in batches] == [1000] * 15
    assert [v for b in batches for v in b.column(0).to_pylist()] == list(range(15000))  # in order


def _run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """``body`` run by a fresh interpreter, with ``read`` (id and d of both files of the
    ``table`` fixture), ``split`` and ``read_split`` defined."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys, threading, time\n"
        "from pathlib import Path\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_arrow_read import SCHEMA, _split\n"
        "from starscan.arrow.read import read_split\n"
        "from starscan.arrow.scan import Fields, plan_read\n"
        "read = plan_read('t.t', 1, Fields(SCHEMA), [('id', 'id'), ('d', 'd')], None, 'UTC', 'parquet', set())\n"
        f"split = _split(Path({str(tmp_path)!r}), ['a.parquet', 'b.parquet'])\n" + body)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)


def test_a_read_left_unfinished_does_not_keep_the_program_from_ending(tmp_path: Path, table):
    """The decoding threads must not hold the interpreter at exit (nor must anything wait
    for them): a script that takes one batch and ends, ends."""
    del table  # (it wrote the files)
    # The read stays referenced (a module global) until the interpreter ends.
    done = _run_script(tmp_path, "batches = read_split(read, split, 500, threads=2)\nnext(batches)\nprint('took one')\n")
    assert done.returncode == 0 and done.stdout.strip() == "took one", done.stderr[-2000:]


def test_a_reader_thread_that_outlives_the_main_thread_reads_every_row(tmp_path: Path, table):
    """The decoding threads must serve a reading thread after the main thread has ended
    (the interpreter lives on for it): every row, no hang."""
    del table  # (it wrote the files)
    done = _run_script(tmp_path, (
        "def later():\n"
        "    time.sleep(0.5)  # the main thread has ended by now\n"
        "    print(sum(b.num_rows for b in read_split(read, split, 500, threads=2)), flush=True)\n"
        "threading.Thread(target=later).start()\n"))
    assert done.returncode == 0 and done.stdout.strip() == "25010", done.stderr[-2000:]


@pytest.mark.parametrize("outputs", [[("id", "id"), ("d", "d")], [("d", "d"), ("id", "id")],
                                     [("when", "d"), ("id", "id"), ("again", "id")]])
def test_a_plain_file_is_passed_on_by_position_in_any_output_order(tmp_path: Path, table, monkeypatch, outputs):
    """The output is the file's own columns (any order, renamed, repeated): the batches are
    picked by position, never reshaped column by column, and hold what the files hold."""
    from starscan.arrow import decode as arrow_decode

    del table  # (it wrote the files)
    split = _split(tmp_path, ["a.parquet", "b.parquet"])
    read = plan_read("t.t", 1, Fields(SCHEMA), outputs, None, "UTC", "parquet", set())

    def reshaped(*args):
        raise AssertionError("a plain file's batch was reshaped column by column")

    monkeypatch.setattr(arrow_decode, "_shape", reshaped)
    got = pa.Table.from_batches(list(read_split(read, split, batch_rows=1024)))
    files = pa.concat_tables([pq.read_table(tmp_path / name) for name in ("a.parquet", "b.parquet")])
    expected = pa.table([files.column(source) for _, source in outputs], names=[name for name, _ in outputs])
    assert got.schema.names == expected.schema.names and got.num_rows == 25010
    assert all(a.equals(b) for a, b in zip(got.columns, expected.columns))


def test_a_split_names_its_files_and_row_groups_for_messages():
    def part(name, groups):
        return FilePart(f"/w/{name}", name, 1, 1, groups)

    split = ArrowSplit((part("a.parquet", None), part("b.parquet", (2, 3, 4)), part("c.parquet", (5,)),
                        part("d.parquet", (1, 3)), part("e.parquet", ())))
    assert split.describe() == ("file a.parquet, file b.parquet row groups 2-4, file c.parquet row group 5, "
                                "file d.parquet row groups 1, 3, file e.parquet (no row groups)")
    assert split.describe(files=2) == "file a.parquet, file b.parquet row groups 2-4 and 3 more files"


@pytest.mark.parametrize("deleted", [range(0, 4500), range(0, 10_000, 10), range(5000, 9990)])
def test_a_file_with_deleted_rows_gives_the_kept_rows_in_batches_of_at_most_batch_rows(tmp_path: Path, deleted):
    """Row groups of a file with deleted positions are decoded in wider batches (by their
    deleted share): bunched or spread deletes still give only the kept rows, in order, and no
    batch over ``batch_rows``."""
    import struct

    from pyroaring import BitMap64

    from starscan.arrow.deletes import PORTABLE_MAGIC, DeletionVector, z85_encode

    _write(tmp_path / "a.parquet", 0, [5000, 5000])
    data = struct.pack("<I", PORTABLE_MAGIC) + BitMap64(deleted).serialize()
    data += b"\0" * (-len(data) % 4)  # Z85 takes whole 4-byte groups
    vector = DeletionVector.from_log({"storageType": "i", "pathOrInlineDv": z85_encode(data),
                                      "sizeInBytes": len(data), "cardinality": len(deleted)})
    path = tmp_path / "a.parquet"
    split = ArrowSplit((FilePart(str(path), "a.parquet", path.stat().st_size, path.stat().st_mtime_ns, None,
                                 deletes=vector.to_json()),))
    read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id")], None, "UTC", "parquet", set())
    batches = list(read_split(read, split, batch_rows=100))
    assert max(b.num_rows for b in batches) <= 100
    assert [i for b in batches for i in b.column(0).to_pylist()] == sorted(set(range(10_000)) - set(deleted))


@pytest.mark.parametrize("run_bytes", [16 << 20, 64 << 10])
def test_a_predicate_runs_over_long_runs_and_the_batches_stay_within_batch_rows(tmp_path: Path, monkeypatch,
                                                                                run_bytes):
    """pyarrow runs an expression at a fixed cost per call: a filtered read runs it over runs
    of up to FILTER_RUN_ROWS rows (fewer for wide rows: FILTER_RUN_BYTES), then hands the
    rows on in batches of at most ``batch_rows``, the same rows in the same order."""
    from starscan.arrow import read as read_mod

    monkeypatch.setattr(read_mod, "FILTER_RUN_BYTES", run_bytes)
    monkeypatch.setattr(read_mod, "FILTER_RUN_ROWS", 1 << 16)
    _write(tmp_path / "big.parquet", 0, [100_000, 60_000])
    _write(tmp_path / "small.parquet", 160_000, [700])
    pred = op(">", column("id"), literal("bigint", "5"))
    read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id"), ("d", "d")], pred, "UTC", "parquet", set())
    calls = []
    real_finish = read_mod.finish_table
    monkeypatch.setattr(read_mod, "finish_table", lambda r, t: calls.append(t.num_rows) or real_finish(r, t))
    batches = list(read_split(read, _split(tmp_path, ["big.parquet", "small.parquet"]), batch_rows=1000))
    assert all(0 < b.num_rows <= 1000 for b in batches)
    assert [v for b in batches for v in b.column(0).to_pylist()] == list(range(6, 160_700))
    if run_bytes == 16 << 20:
        assert max(calls) == read_mod.FILTER_RUN_ROWS and len(calls) <= 4  # not one per 1,000 rows
    else:
        assert 1000 <= max(calls) < read_mod.FILTER_RUN_ROWS  # wide rows for 64 KiB: shorter runs


@pytest.mark.parametrize("filtered", [False, True])
def test_uncut_batches_are_runs_of_the_same_rows_and_wide_rows_make_shorter_ones(tmp_path: Path, monkeypatch,
                                                                                 filtered):
    """``cut=False`` (a reader that converts and cuts the rows itself): a large file comes in
    batches of up to DECODE_ROWS rows (a filtered one: what the predicate keeps of each),
    fewer where FILTER_RUN_BYTES says the rows are wide; a file of at most ``batch_rows``
    rows as it is; the same rows in the same order."""
    from starscan.arrow import read as read_mod

    _write(tmp_path / "big.parquet", 0, [100_000, 60_000])
    _write(tmp_path / "small.parquet", 160_000, [700])
    pred = op(">", column("id"), literal("bigint", "5")) if filtered else None
    read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id"), ("d", "d")], pred, "UTC", "parquet", set())
    split = _split(tmp_path, ["big.parquet", "small.parquet"])
    cut = list(read_split(read, split, batch_rows=1000))
    whole = list(read_split(read, split, batch_rows=1000, cut=False))
    assert [v for b in whole for v in b.column(0).to_pylist()] == [v for b in cut for v in b.column(0).to_pylist()]
    assert max(b.num_rows for b in cut) == 1000
    # decoded DECODE_ROWS at a time (a filtered run's output: pieces of them, as Acero gives them)
    largest = max(b.num_rows for b in whole)
    assert (largest <= read_mod.DECODE_ROWS if filtered else largest == read_mod.DECODE_ROWS) and len(whole) <= 12
    monkeypatch.setattr(read_mod, "FILTER_RUN_BYTES", 64 << 10)
    narrow = list(read_split(read, split, batch_rows=1000, cut=False))
    assert 1000 <= max(b.num_rows for b in narrow) < read_mod.DECODE_ROWS


class _CountedFormat:
    """pyarrow.dataset's Parquet format, counting the fragments made for row-group statistics."""

    def __init__(self, real):
        self.real, self.fragments = real, 0

    def make_fragment(self, *args, **kwargs):
        self.fragments += 1
        return self.real.make_fragment(*args, **kwargs)


def test_small_files_statistics_are_consulted_while_they_skip_files(tmp_path: Path, monkeypatch):
    """A split of small one-row-group files reads each footer once more for its statistics
    only while that pays: always when they rule most files out, one file in RECHECK after
    the first PROBE when they rule none out. Large files are always checked, and the rows
    are those of a read that checks every file."""
    from starscan.arrow import opening, statistics_use

    counted = _CountedFormat(opening._parquet_format())
    monkeypatch.setattr(opening, "_parquet_format", lambda: counted)
    names = []
    for i in range(60):
        names.append(f"s{i:02d}.parquet")
        _write(tmp_path / names[-1], i * 10, [10])
    _write(tmp_path / "big.parquet", 600, [20_000, 20_000])  # two row groups: always checked
    split = _split(tmp_path, names + ["big.parquet"])

    def read_with(predicate):
        read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id")], predicate, "UTC", "parquet", set())
        counted.fragments = 0
        rows = _rows(read_split(read, split, batch_rows=1000))
        checked = counted.fragments
        counted.fragments = 0
        everything = _rows(b for part in split.parts for b in read_split(read, ArrowSplit((part,)), batch_rows=1000))
        assert rows == everything  # each file alone: its statistics checked (within PROBE)
        return rows, checked

    rows, checked = read_with(op(">=", column("id"), literal("bigint", "0")))  # every file has rows
    assert sum(rows.values()) == 40_600
    probe, recheck = statistics_use.PROBE, statistics_use.RECHECK
    assert checked == probe + (60 - probe) // recheck + 1  # and the large file

    rows, checked = read_with(op(">=", column("id"), literal("bigint", "30000")))  # only big.parquet's
    assert sum(rows.values()) == 10_600 and checked == 61  # every small file ruled out by its statistics


def test_statistics_use_follows_what_the_checks_skipped():
    from starscan.arrow.statistics_use import PROBE, RECHECK, SMALL_FILE_BYTES, StatisticsUse

    use = StatisticsUse()
    assert use.wanted(SMALL_FILE_BYTES, 1) and use.wanted(100, 2)  # not small: always, not counted
    for _ in range(PROBE):
        assert use.wanted(100, 1)
        use.record(100, 1, skipped=False)
    asked = [use.wanted(100, 1) for _ in range(4 * RECHECK)]
    assert asked.count(True) == 4 and asked[RECHECK - 1]
    for _ in range(PROBE + 4):  # the files change: the statistics now rule them out
        use.record(100, 1, skipped=True)
    assert all(use.wanted(100, 1) for _ in range(10))

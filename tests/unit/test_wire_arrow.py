"""The wire-type conversion of dates (starscan/arrow/wire.py): the day-to-text table
gives exactly what Arrow's cast gives, for every batch shape a scan can hand it."""

from __future__ import annotations

import random

import pyarrow as pa

from starscan.arrow.wire import _converter, _dates_by_cast
from starscan.core.sql_types import SqlType

MIN_DAY, MAX_DAY = -719162, 2932896  # 0001-01-01 and 9999-12-31


def _dates(days: list[int | None]) -> pa.Array:
    return pa.array(days, pa.int32()).view(pa.date32())


def test_dates_by_table_equal_the_cast_for_every_batch_shape():
    rng = random.Random(7)
    convert = _converter(SqlType("date"))
    batches = [
        [rng.randint(8000, 10500) for _ in range(5000)],                      # lineitem-like
        [None if rng.random() < 0.3 else rng.randint(8000, 10500) for _ in range(5000)],  # nulls
        [rng.randint(7000, 12000) for _ in range(5000)],                      # wider: the table grows
        [rng.randint(MIN_DAY, MAX_DAY) for _ in range(3000)],                 # too wide: cast
        [MIN_DAY, MAX_DAY, 0, -1] * 400,                                     # the ends of the range
        [rng.randint(-400, 400) for _ in range(2000)],                        # around 1970 and before it
        [None] * 2000,
        [rng.randint(9000, 9010) for _ in range(10)],                         # small: cast
    ]
    for days in batches:
        arr = _dates(days)
        assert convert(arr).equals(_dates_by_cast(arr)), days[:5]
        sliced = arr.slice(17, len(arr) - 40) if len(arr) > 60 else arr
        assert convert(sliced).equals(_dates_by_cast(sliced))
    assert _dates([0]).cast(pa.utf8()).to_pylist() == ["1970-01-01"]
    assert _dates_by_cast(_dates([MIN_DAY, MAX_DAY])).to_pylist() == ["0001-01-01", "9999-12-31"]


def test_whatever_lies_under_a_null_date_is_not_read():
    """Parquet leaves any value under a NULL: the day-to-text table must not index with it."""
    values = pa.array([1, 99999999, 2, -99999999] * 1000, pa.int32())
    valid = pa.array([True, False, True, False] * 1000).buffers()[1]
    days = pa.Array.from_buffers(pa.int32(), 4000, [valid, values.buffers()[1]], null_count=2000).view(pa.date32())
    convert = _converter(SqlType("date"))
    for arr in (days, days.slice(3, 2500)):
        assert convert(arr).equals(_dates_by_cast(arr))


def test_later_batches_with_new_days_are_taken_from_the_table(monkeypatch):
    """A scan whose first batch spans fewer days than later ones kept casting every later
    batch (the table was sized by the first batch's rows): no date of the table's range is
    cast once the table exists."""
    from starscan.arrow import wire as wire_arrow

    convert = _converter(SqlType("date"))
    rng = random.Random(11)
    first = _dates([rng.randint(8036, 8100) for _ in range(4096)])   # 1992, a few weeks
    expected_first = _dates_by_cast(first)
    assert convert(first).equals(expected_first)
    later = [_dates([rng.randint(8036, 10_591) for _ in range(4096)]),     # 1992-1998
             _dates([rng.randint(-25_567, 65_535) for _ in range(4096)])]  # the table's ends
    expected = [_dates_by_cast(arr) for arr in later]

    def no_cast(arr):
        raise AssertionError(f"{len(arr)} dates were cast instead of taken from the table")

    monkeypatch.setattr(wire_arrow, "_dates_by_cast", no_cast)
    for arr, want in zip(later, expected):
        assert convert(arr).equals(want)

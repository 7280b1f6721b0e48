"""starscan.arrow.nested: a file's nested columns rebuilt as the schema's types by the names
or field ids the files give their struct fields. Property: a file whose struct fields are
renamed (or numbered) reads back as the rows that were written, whatever the values, nulls
and slicing."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starscan.arrow.nested import NestedMismatch, conform, parse_file_name

# The schema's type, and the same type as the files name it: every struct field physical.
LOGICAL = pa.struct([
    ("x", pa.int64()),
    ("tags", pa.list_(pa.struct([("name", pa.string()), ("score", pa.int32())]))),
    ("attrs", pa.map_(pa.string(), pa.struct([("n", pa.int64())]))),
])


def _physical(ids: bool) -> pa.DataType:
    def field(name: str, kind: pa.DataType, field_id: int) -> pa.Field:
        return pa.field(f"col-{name}", kind, metadata={b"PARQUET:field_id": str(field_id).encode()} if ids else None)

    tag = pa.struct([field("name", pa.string(), 11), field("score", pa.int32(), 12)])
    attr = pa.struct([field("n", pa.int64(), 21)])
    return pa.struct([field("x", pa.int64(), 1), field("tags", pa.list_(tag), 2),
                      field("attrs", pa.map_(pa.string(), attr), 3)])


def _names(ids: bool) -> object:
    def key(name: str, field_id: int) -> str | int:
        return field_id if ids else f"col-{name}"

    return parse_file_name({"key": key("s", 0), "fields": {
        "x": key("x", 1),
        "tags": {"key": key("tags", 2), "element": {"fields": {"name": key("name", 11), "score": key("score", 12)}}},
        "attrs": {"key": key("attrs", 3), "values": {"fields": {"n": key("n", 21)}}},
    }})


rows = st.lists(st.one_of(st.none(), st.fixed_dictionaries({
    "x": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "tags": st.one_of(st.none(), st.lists(st.one_of(st.none(), st.fixed_dictionaries({
        "name": st.one_of(st.none(), st.text(max_size=5)),
        "score": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))})), max_size=3)),
    "attrs": st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=3), st.one_of(
        st.none(), st.fixed_dictionaries({"n": st.one_of(st.none(), st.integers(0, 9))}))), max_size=2)),
})), max_size=12)


def _renamed(value: object) -> object:
    """A row with every struct field's name as the files spell it."""
    if isinstance(value, dict):
        return {f"col-{k}": _renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    if isinstance(value, tuple):
        return (value[0], _renamed(value[1]))
    return value


@settings(max_examples=150, deadline=None)
@given(rows, st.booleans(), st.integers(0, 3))
def test_a_renamed_file_reads_back_as_written(written, ids, offset):
    logical = pa.array(written, LOGICAL)
    # The same values under the files' names: a rename of every struct field.
    physical = pa.array([_renamed(row) for row in written], _physical(ids))
    sliced = physical.slice(min(offset, len(physical)))
    got = conform(sliced, _names(ids), LOGICAL, lambda a, t: a.cast(t))
    assert got.type == LOGICAL
    assert got.to_pylist() == logical.slice(min(offset, len(logical))).to_pylist()


def test_a_field_the_file_lacks_reads_as_null_and_a_wrong_shape_is_named():
    file = pa.array([{"a": 1}, None], pa.struct([("a", pa.int64())]))
    wanted = pa.struct([("a", pa.int64()), ("added", pa.string())])
    assert conform(file, None, wanted, lambda a, t: a.cast(t)).to_pylist() == [{"a": 1, "added": None}, None]
    with pytest.raises(NestedMismatch, match="array in the schema"):
        conform(file, None, pa.list_(pa.int64()), lambda a, t: a.cast(t))


def test_a_malformed_name_is_refused():
    with pytest.raises(ValueError):
        parse_file_name({"key": "a", "fields": ["b"]})
    with pytest.raises(ValueError):
        parse_file_name(True)

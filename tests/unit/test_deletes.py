"""starscan.arrow.deletes: Delta deletion vectors read as the protocol lays them out; Iceberg
equality delete keys matched as the spec compares them."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap64

from starscan.arrow.deletes import (
    PORTABLE_MAGIC,
    DeletesUnreadable,
    DeletionVector,
    EqualityDeletes,
    EqualityKeys,
    IcebergDeletes,
    kept_mask,
    row_deletes,
    z85_decode,
    z85_encode,
)


def test_z85_is_the_zeromq_alphabet():
    # The Z85 specification's own test vector.
    assert z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    with pytest.raises(DeletesUnreadable):
        z85_decode("abc")


def _data(positions):
    return struct.pack("<I", PORTABLE_MAGIC) + BitMap64(positions).serialize()


def test_an_inline_vector_and_a_stored_one_give_their_positions():
    positions = [3, 1, 2**32 + 5, 70000]
    inline = DeletionVector.from_log({"storageType": "i", "pathOrInlineDv": z85_encode(_data(positions)),
                                      "sizeInBytes": len(_data(positions)), "cardinality": 4})
    assert inline.positions(None).tolist() == sorted(positions)
    data = _data(positions)
    stored = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    vector = DeletionVector.from_log({"storageType": "u", "pathOrInlineDv": "ab" + z85_encode(bytes(range(16))),
                                      "offset": 1, "sizeInBytes": len(data), "cardinality": 4})
    assert vector.path == "ab/deletion_vector_00010203-0405-0607-0809-0a0b0c0d0e0f.bin"
    assert vector.positions(lambda offset, n: stored[offset:offset + n]).tolist() == sorted(positions)
    assert DeletionVector.from_json(vector.to_json()) == vector


def test_a_vector_that_does_not_match_its_descriptor_is_refused():
    data = _data([1, 2])
    stored = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data) ^ 1)
    vector = DeletionVector(path="x.bin", offset=1, size=len(data), cardinality=2)
    with pytest.raises(DeletesUnreadable, match="CRC-32"):
        vector.positions(lambda offset, n: stored[offset:offset + n])
    wrong_count = DeletionVector(None, 0, len(data), 3, inline=z85_encode(data))
    with pytest.raises(DeletesUnreadable, match="holds 2 positions"):
        wrong_count.positions(None)
    native = DeletionVector(None, 0, 4, 0, inline=z85_encode(struct.pack("<I", PORTABLE_MAGIC - 1)))
    with pytest.raises(DeletesUnreadable, match="native layout"):
        native.positions(None)
    with pytest.raises(DeletesUnreadable, match="storage type"):
        DeletionVector.from_log({"storageType": "x", "pathOrInlineDv": "", "sizeInBytes": 0, "cardinality": 0})


def test_kept_mask_covers_a_window_of_positions():
    deleted = np.array([0, 5, 9, 10, 100], dtype=np.uint64)
    assert kept_mask(deleted, 11, 50) is None
    assert kept_mask(deleted, 5, 6).tolist() == [False, True, True, True, False, False]


def test_equality_keys_match_every_column_null_equal_to_null_and_promote_int_to_long():
    keys = EqualityKeys([pa.array([1, 2, None, 4], pa.int64()), pa.array(["a", None, "c", "d"])])
    ids = pa.array([1, 1, 2, 2, None, None, 4, 9], pa.int32())  # an int column promoted to long since
    names = pa.array(["a", "b", None, "x", "c", None, "d", "a"])
    assert keys.deleted_mask([ids, names]).tolist() == [True, False, True, False, True, False, True, False]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.one_of(st.none(), st.sampled_from("xyz"))),
                max_size=12),
       st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.one_of(st.none(), st.sampled_from("xyz"))),
                max_size=30))
def test_equality_keys_delete_exactly_the_rows_equal_to_a_deleted_row(deleted, rows):
    keys = EqualityKeys([pa.array([d[0] for d in deleted], pa.int64()), pa.array([d[1] for d in deleted], pa.string())])
    mask = keys.deleted_mask([pa.array([r[0] for r in rows], pa.int64()), pa.array([r[1] for r in rows], pa.string())])
    assert mask.tolist() == [r in set(deleted) for r in rows]


def test_iceberg_deletes_round_trip_through_the_plan():
    deletes = IcebergDeletes(("data/pos.parquet",), "file:///t/data/a.parquet",
                             (EqualityDeletes("data/eq-1.parquet", (1,)), EqualityDeletes("data/eq-2.parquet", (2, 4))))
    assert row_deletes(deletes.to_json()) == deletes
    assert row_deletes('{"kind":"iceberg_positions","files":["p"],"data_file":"d"}') == IcebergDeletes(("p",), "d")

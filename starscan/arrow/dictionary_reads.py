"""Text columns a Parquet file stores as dictionary codes, read as codes and expanded after.

A file written by Spark (parquet-mr) stores a text column of few distinct values (TPC-H's
ship modes, flags, statuses) as a dictionary per column chunk and one code per row. Asking
pyarrow for such a column as it is makes its Parquet reader expand every code into the
value's bytes as it decodes; asking for it as a dictionary array (``read_dictionary``) keeps
the codes, and Arrow's cast to text expands them afterwards in one pass. On SF1 lineitem the
four such columns cost about half as much that way (bench/notes, issue 39). The batches the
reader passes on are the same either way: plain text columns with the same values and NULLs.

Only a column whose chunks are dictionary codes throughout is read so. A chunk whose
dictionary grew too large falls back to plain pages, and asked for a dictionary pyarrow
then builds one by hashing every value (five times the plain read of lineitem's comments).
A chunk's list of encodings says so for files written by parquet-mr (``PLAIN`` appears only
for fallen-back pages); parquet-cpp (pyarrow) lists ``PLAIN`` for the dictionary page
itself, so its files, which cannot be told apart, are read as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

#: Row groups smaller than this on average are read as before: expanding afterwards is one
#: more Arrow call per batch, which a small file's few rows do not repay.
MIN_ROWS_PER_ROW_GROUP = 16_384

_DICTIONARY_ENCODINGS = frozenset({"PLAIN_DICTIONARY", "RLE_DICTIONARY"})


def dictionary_columns(metadata: pq.FileMetaData, schema: pa.Schema, columns: Iterable[str],
                       row_groups: list[int]) -> tuple[str, ...]:
    """Those of ``columns`` (the file's top-level names) to read as dictionary codes: text
    columns whose chunks in every one of ``row_groups`` are dictionary-encoded throughout."""
    if not row_groups or sum(metadata.row_group(rg).num_rows for rg in row_groups) < MIN_ROWS_PER_ROW_GROUP * len(row_groups):
        return ()
    wanted = set(columns)
    text = {i: f.name for i, f in enumerate(schema) if f.name in wanted and pa.types.is_string(f.type)}
    if not text:
        return ()
    leaf = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    out = []
    for name in text.values():
        index = leaf.get(name)  # None: not a flat column of the file
        if index is not None and all(_codes_throughout(metadata.row_group(rg).column(index).encodings) for rg in row_groups):
            out.append(name)
    return tuple(out)


def _codes_throughout(encodings: tuple[str, ...]) -> bool:
    return "PLAIN" not in encodings and not _DICTIONARY_ENCODINGS.isdisjoint(encodings)


def expanded(batches: Iterator[pa.RecordBatch], names: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    """The batches with the columns ``names`` (read as codes) cast to their values' type;
    a column the file itself stores as a dictionary type is left as it is."""
    positions: list[int] = []
    schema: pa.Schema | None = None
    for batch in batches:
        if schema is None:
            positions = [i for i, f in enumerate(batch.schema) if f.name in names and pa.types.is_dictionary(f.type)]
            schema = batch.schema
            for i in positions:
                schema = schema.set(i, schema.field(i).with_type(schema.field(i).type.value_type))
        if positions:
            arrays = list(batch.columns)
            for i in positions:
                arrays[i] = arrays[i].cast(schema.field(i).type)
            batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        yield batch

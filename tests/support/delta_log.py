"""Delta log entries no writer here makes, written from the Delta protocol's text: deletion
vectors (delta-rs reads them but does not write them). The tests check every table made
this way with delta-rs' own reader before serving it."""

from __future__ import annotations

import json
import struct
import time
import uuid
import zlib
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
from pyroaring import BitMap64

from starscan.arrow.deletes import PORTABLE_MAGIC, z85_encode


def vector_bytes(positions: list[int]) -> bytes:
    """A deletion vector's data: the portable magic number and the 64-bit roaring bitmap."""
    return struct.pack("<I", PORTABLE_MAGIC) + BitMap64(positions).serialize()


def stored_vector(table: Path, positions: list[int], kind: str = "u", prefix: str = "",
                  elsewhere: Path | None = None) -> dict:
    """A deletion vector written to a file of its own (``u``: in the table folder, under
    ``prefix``; ``p``: at ``elsewhere``, named by its absolute URI), behind another vector
    in the same file so that its offset is not the file's first."""
    u = uuid.uuid4()
    name = f"deletion_vector_{u}.bin"
    folder = (table / prefix) if kind == "u" else elsewhere
    assert folder is not None
    folder.mkdir(parents=True, exist_ok=True)
    first, data = vector_bytes([0]), vector_bytes(positions)
    body = b"\x01"
    body += struct.pack(">i", len(first)) + first + struct.pack(">I", zlib.crc32(first))
    offset = len(body)
    body += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    (folder / name).write_bytes(body)
    where = prefix + z85_encode(u.bytes) if kind == "u" else (folder / name).as_uri()
    return {"storageType": kind, "pathOrInlineDv": where, "offset": offset, "sizeInBytes": len(data),
            "cardinality": len(set(positions))}


def inline_vector(positions: list[int]) -> dict:
    data = vector_bytes(positions)
    return {"storageType": "i", "pathOrInlineDv": z85_encode(data), "sizeInBytes": len(data),
            "cardinality": len(set(positions))}


def commit_deletion_vectors(table: Path, vectors: dict[str, dict], rows: dict[str, int],
                            replaced: dict[str, dict] | None = None) -> int:
    """A DELETE commit: each file of ``vectors`` removed and added again with its vector
    (``rows``: each file's row count, which readers need with a vector). A file already
    carrying a vector names it in ``replaced``: the log knows a file by its path and its
    vector, so the remove action must name the vector it removes. Returns the version."""
    log = table / "_delta_log"
    current = _replayed(log)[2]
    version = max(int(p.name[:20]) for p in log.glob("*.json")) + 1
    now = int(time.time() * 1000)
    actions: list[dict] = [{"commitInfo": {"timestamp": now, "operation": "DELETE"}}]
    for path, vector in vectors.items():
        stat = (table / unquote(path)).stat()  # the log spells paths as URIs
        size, mtime = stat.st_size, int(stat.st_mtime * 1000)
        values = (current.get(path) or {}).get("partitionValues") or {}
        remove = {"path": path, "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
                  "partitionValues": values, "size": size}
        if replaced and path in replaced:
            remove["deletionVector"] = replaced[path]
        actions.append({"remove": remove})
        actions.append({"add": {"path": path, "partitionValues": values, "size": size, "modificationTime": mtime,
                                "dataChange": True, "stats": json.dumps({"numRecords": rows[path]}),
                                "deletionVector": vector}})
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return version


def _replayed(log: Path) -> tuple[dict, dict, dict[str, dict]]:
    """(protocol, metaData, path -> add action) of the table's newest version, from its commits."""
    protocol: dict = {}
    metadata: dict = {}
    adds: dict[str, dict] = {}
    for commit in sorted(log.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "protocol" in action:
                protocol = action["protocol"]
            elif "metaData" in action:
                metadata = action["metaData"]
            elif "add" in action:
                adds[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                adds.pop(action["remove"]["path"], None)
    return protocol, metadata, adds


_VECTOR = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                     ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
_ADD = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                  ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
                  ("stats", pa.string()), ("deletionVector", _VECTOR)])


def write_v2_checkpoint(table: Path, drop_commits: bool = True) -> int:
    """A V2 checkpoint of the table's newest version, as the Delta protocol's "V2 Spec
    Checkpoints" lay it out: a commit that adds the ``v2Checkpoint`` reader and writer
    feature, then a UUID-named JSON checkpoint of that version (``checkpointMetadata``, the
    protocol, the metadata and one ``sidecar`` action) whose add actions are in a Parquet
    sidecar file under ``_delta_log/_sidecars/``, and ``_last_checkpoint`` naming it. With
    ``drop_commits`` the commits it covers are removed (what log cleanup does), so a reader
    must read the checkpoint. Returns its version."""
    import pyarrow.parquet as pq

    log = table / "_delta_log"
    protocol, metadata, adds = _replayed(log)
    protocol = {**protocol, "minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": sorted(set(protocol.get("readerFeatures") or []) | {"v2Checkpoint"}),
                "writerFeatures": sorted(set(protocol.get("writerFeatures") or []) | {"v2Checkpoint"})}
    version = max(int(p.name[:20]) for p in log.glob("*.json")) + 1
    now = int(time.time() * 1000)
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in [
        {"commitInfo": {"timestamp": now, "operation": "UPGRADE PROTOCOL"}}, {"protocol": protocol}]) + "\n")
    sidecars = log / "_sidecars"
    sidecars.mkdir(exist_ok=True)
    sidecar = f"{uuid.uuid4()}.parquet"
    rows = [{**{k: a.get(k) for k in _ADD.names}, "partitionValues": list((a.get("partitionValues") or {}).items())}
            for a in adds.values()]
    pq.write_table(pa.table({"add": pa.array(rows, _ADD)}), sidecars / sidecar)
    stat = (sidecars / sidecar).stat()
    sidecar_action = {"path": sidecar, "sizeInBytes": stat.st_size, "modificationTime": int(stat.st_mtime * 1000)}
    name = f"{version:020d}.checkpoint.{uuid.uuid4()}.json"
    actions = [{"checkpointMetadata": {"version": version}}, {"protocol": protocol}, {"metaData": metadata},
               {"sidecar": sidecar_action}]
    (log / name).write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    stat = (log / name).stat()
    (log / "_last_checkpoint").write_text(json.dumps({
        "version": version, "size": len(actions) + len(rows), "sizeInBytes": stat.st_size, "numOfAddFiles": len(rows),
        "v2Checkpoint": {"path": name, "sizeInBytes": stat.st_size, "modificationTime": int(stat.st_mtime * 1000),
                         "nonFileActions": actions[:3], "sidecarFiles": [sidecar_action]}}))
    if drop_commits:
        for commit in log.glob("*.json"):
            if ".checkpoint." not in commit.name and int(commit.name[:20]) <= version:
                commit.unlink()
    return version


def add_table_features(table: Path, features: list[str]) -> int:
    """A commit moving the table to reader version 3 and writer version 7 with ``features``
    among its reader and writer features (and, as the protocol requires of a move to table
    features, the features its old versions implied: column mapping for reader version 2).
    Returns the version."""
    log = table / "_delta_log"
    protocol, _, _ = _replayed(log)
    implied = ["columnMapping"] if protocol.get("minReaderVersion") == 2 else []
    reader = sorted(set(protocol.get("readerFeatures") or []) | set(implied) | set(features))
    writer = sorted(set(protocol.get("writerFeatures") or []) | set(implied) | set(features) |
                    ({"appendOnly", "invariants"} if protocol.get("minWriterVersion", 0) >= 2 else set()))
    version = max(int(p.name[:20]) for p in log.glob("*.json")) + 1
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in [
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "UPGRADE PROTOCOL"}},
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": reader,
                      "writerFeatures": writer}}]) + "\n")
    return version

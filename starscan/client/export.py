"""What a table gets appended, written into Parquet files exactly once across crashes
(`starscan follow`): one file per step of ``StarscanClient.follow``, made durable before the
consumer's position moves."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from starscan.client.protocol import StarscanClient


def follow_into(client: StarscanClient, db: str, table: str, sql: str, consumer: str, into: Path,
                poll_s: float = 5.0, stop_when_idle: bool = False) -> Iterator[tuple[Path, int]]:
    """(file, rows) for each step written into ``into``.

    A step's rows go to a file renamed into place (``<since>-<version>.parquet``, ``start``
    for the first read) and fsynced with its folder; then the position is committed. After a
    crash, a file whose range starts at the committed position is a step that was written
    but not committed: its version is committed first, so no row is written twice or lost."""
    into.mkdir(parents=True, exist_ok=True)
    written = {p.stem.split("-")[0]: p.stem.split("-")[1] for p in into.glob("*-*.parquet")}
    position = client.position(db, table, consumer)
    while (key := "start" if position is None else str(position)) in written:
        position = int(written[key])
        client.commit(db, table, consumer, position)
    for step in client.follow(db, table, sql, consumer, poll_s=poll_s, stop_when_idle=stop_when_idle):
        target = into / f"{'start' if step.since is None else step.since}-{step.version}.parquet"
        tmp = into / f".{target.name}.tmp"
        pq.write_table(step.rows, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        folder = os.open(into, os.O_RDONLY)
        try:
            os.fsync(folder)  # the rename is durable before the position moves
        finally:
            os.close(folder)
        yield target, step.rows.num_rows

"""``starscan load``: import a CSV, JSON or Parquet file (or directory) into a warehouse table.

The data goes through Spark and is written as Parquet by Spark (so the footer keeps Spark's
schema) into the table's directory, ``<warehouse>/<db>.db/<table>`` (the ``default``
database is the warehouse root). Each written file is a tablet; their size is bounded by
``tablet_target_bytes``: the number of files is ``ceil(source bytes / target)``, and for a
partitioned table ``maxRecordsPerFile`` caps each file at the rows of one target's worth.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from starscan.core.errors import InvalidInput
from starscan.storage.files import is_hidden, is_hidden_folder
from starscan.storage.hadoop_paths import literal
from starscan.tables.catalog import DEFAULT_DB, Warehouse, list_table_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.status import StatusTracker
    from rich.progress import Progress

    from starscan.tables.catalog import DataFile

FORMATS = ("csv", "parquet", "json")
MODES = ("overwrite", "append", "error", "errorifexists", "ignore")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*\Z")
_COMPRESSED = (".gz", ".bz2", ".zst", ".zstd", ".lz4", ".snappy", ".deflate", ".xz")
_EXTENSIONS = {
    ".csv": "csv", ".tsv": "csv",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".parq": "parquet", ".pq": "parquet",
}
_SAMPLE_BYTES = 1 << 20

_T = TypeVar("_T")


def check_name(kind: str, name: str) -> str:
    """Database and table names: letters, digits and underscores, not starting with '_'."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            f"invalid {kind} name {name!r}: use letters, digits and underscores only, "
            f"starting with a letter or digit"
        )
    return name


def source_files(source: Path) -> list[Path]:
    """The data files of a source: the file itself, or every visible file below a directory."""
    if source.is_file():
        return [source]
    files: list[Path] = []
    for directory, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if not is_hidden_folder(d))
        files.extend(Path(directory) / f for f in sorted(filenames) if not is_hidden(f))
    return files


def _data_suffix(path: Path) -> str:
    """The extension naming the data format, compression suffixes skipped (``x.csv.gz``: .csv)."""
    suffixes = [s.lower() for s in path.suffixes]
    while suffixes and suffixes[-1] in _COMPRESSED:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def format_of(path: Path) -> str | None:
    """The format an extension names (``x.csv.gz`` is CSV), or None."""
    return _EXTENSIONS.get(_data_suffix(path))


def infer_format(source: Path, files: list[Path]) -> str:
    if source.is_file():
        fmt = format_of(source)
        if fmt is None:
            raise InvalidInput(f"cannot tell the format of {source} from its extension: give the format (csv, json or parquet)")
        return fmt
    found = {f for f in (format_of(p) for p in files) if f}
    if len(found) == 1:
        return found.pop()
    if not found:
        raise InvalidInput(f"no .csv, .json or .parquet files in {source}: give the format (csv, json or parquet)")
    raise InvalidInput(f"{source} mixes formats ({', '.join(sorted(found))}): give the format (csv, json or parquet)")


def _is_compressed(path: Path) -> bool:
    return path.suffix.lower() in _COMPRESSED


def _json_multiline(files: list[Path]) -> bool:
    """A JSON document that is one array (``[{...}, ...]``) rather than JSON lines."""
    for path in files:
        if _is_compressed(path):
            return False
        with open(path, "rb") as fh:
            head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        if head:
            return head.startswith(b"[")
    return False


def _estimate_rows(fmt: str, files: list[Path], total_bytes: int) -> int | None:
    """Rows of the source without a Spark job: Parquet footers, or newlines in a sample."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            rows: int = sum(pq.read_metadata(p).num_rows for p in files)
            return rows
        except Exception:  # noqa: BLE001 - a row count is only a hint
            return None
    if any(_is_compressed(p) for p in files):
        return None
    sampled = lines = 0
    for path in files:
        with open(path, "rb") as fh:
            chunk = fh.read(_SAMPLE_BYTES - sampled)
        sampled += len(chunk)
        lines += chunk.count(b"\n")
        if sampled >= _SAMPLE_BYTES:
            break
    if not sampled:
        return 0
    return max(1, round(total_bytes * max(lines, 1) / sampled))


def _read(spark: SparkSession, fmt: str, path: str, files: list[Path], source: Path) -> DataFrame:
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
        if files and all(_data_suffix(p) == ".tsv" for p in files):
            reader = reader.option("sep", "\t")
        return reader.csv(path)
    if fmt == "json":
        if _json_multiline(files):
            reader = reader.option("multiLine", "true")
        return reader.json(path)
    return reader.parquet(path)


class _Progress:
    """A rich progress bar fed by Spark's status tracker for one job group."""

    def __init__(self, spark: SparkSession, enabled: bool):
        self.spark = spark
        self.enabled = enabled
        self._progress: Progress | None = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
                MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn(),
                console=Console(stderr=True), transient=False,
            )

    def __enter__(self) -> _Progress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def run(self, description: str, fn: Callable[[], _T]) -> _T:
        """Run ``fn()`` (Spark work); with a bar, in a thread under its own job group."""
        if self._progress is None:
            return fn()
        from pyspark import InheritableThread

        sc = self.spark.sparkContext
        group = f"starscan-load-{uuid.uuid4().hex}"
        outcome: dict[str, Any] = {}

        def work() -> None:
            sc.setJobGroup(group, description, interruptOnCancel=True)
            try:
                outcome["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = exc

        task = self._progress.add_task(description, total=None)
        thread = InheritableThread(target=work, daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.2)
                done, total = self._tasks(sc.statusTracker(), group)
                if total:
                    self._progress.update(task, completed=done, total=total)
        except KeyboardInterrupt:
            sc.cancelJobGroup(group)
            thread.join()
            raise
        done, total = self._tasks(sc.statusTracker(), group)
        if "error" in outcome:
            self._progress.update(task, description=f"{description} [red]failed")
            raise outcome["error"]
        self._progress.update(task, completed=max(done, total or 1), total=total or 1)
        return cast(_T, outcome.get("value"))

    @staticmethod
    def _tasks(tracker: StatusTracker, group: str) -> tuple[int, int]:
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                # A stage skipped because its shuffle output exists never reports its tasks.
                total += stage.numTasks
                done += stage.numCompletedTasks
        return done, total


def load_table(
    spark: SparkSession,
    warehouse: Warehouse,
    db: str,
    table: str,
    source: str,
    fmt: str | None = None,
    partition_by: list[str] | None = None,
    tablet_target_bytes: int = 128 << 20,
    mode: str = "overwrite",
    progress: bool = True,
) -> dict[str, Any]:
    """Load ``source`` (a CSV/JSON/Parquet file or a directory of them) into ``db.table``.

    ``mode`` is Spark's save mode: overwrite (default), append, error/errorifexists or ignore.
    Returns ``{"rows", "files", "bytes", "seconds"}`` for the files this load wrote.
    """
    started = time.monotonic()
    check_name("database", db)
    check_name("table", table)
    mode = (mode or "overwrite").lower()
    if mode not in MODES:
        raise InvalidInput(f"invalid mode {mode!r}: use one of {', '.join(MODES)}")
    if tablet_target_bytes < 1:
        raise InvalidInput(f"tablet_target_bytes must be positive, got {tablet_target_bytes}")
    partition_by = list(partition_by or [])

    src = Path(os.path.expanduser(str(source[len("file://"):] if str(source).startswith("file://") else source)))
    if not src.exists():
        raise InvalidInput(f"source {source} does not exist")
    files = source_files(src)
    if not files:
        raise InvalidInput(f"source {source} holds no data files")
    if fmt is None:
        fmt = infer_format(src, files)
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise InvalidInput(f"unsupported format {fmt!r}: use csv, json or parquet")
    source_bytes = sum(p.stat().st_size for p in files)

    remote = not warehouse.storage.is_local
    staging: Path | None = None
    if remote:
        # Spark writes the files into a local staging folder (this Spark may have no
        # filesystem for the store), then they are uploaded through pyarrow.fs.
        target = warehouse.table_location(db, table)
        exists = warehouse.storage.is_dir(target)
        if exists and mode in ("error", "errorifexists"):
            raise InvalidInput(f"table {db}.{table} already exists (mode {mode})")
        if exists and mode == "ignore":
            return {"rows": 0, "files": 0, "bytes": 0, "seconds": round(time.monotonic() - started, 3)}
        existing_columns = list_table_files(target, warehouse.storage)[1] if exists else []
        staging = Path(tempfile.mkdtemp(prefix="starscan-load-"))
        location = staging / table
        write_mode = "overwrite"
    else:
        location = warehouse.table_path(db, table)
        if db != DEFAULT_DB:
            location.parent.mkdir(parents=True, exist_ok=True)
        else:
            warehouse.root.mkdir(parents=True, exist_ok=True)
        if src.resolve() == location.resolve() or location.resolve() in src.resolve().parents:
            raise InvalidInput(f"source {source} is inside the table {db}.{table} it would be loaded into")
        existing_columns = list_table_files(location)[1]
        write_mode = mode

    num_files = max(1, math.ceil(source_bytes / tablet_target_bytes))
    before = {(f.path, f.size, f.mtime_ns) for f in list_table_files(location)[0]}
    try:
        result = _write(spark, warehouse, db, table, src, files, fmt, partition_by, num_files, source_bytes, location,
                        write_mode, mode, existing_columns, before, progress)
        if staging is not None:
            _publish(warehouse, db, table, location, mode, partition_by, existing_columns)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    warehouse.invalidate(db, table)
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _write(spark: SparkSession, warehouse: Warehouse, db: str, table: str, src: Path, files: list[Path], fmt: str,
           partition_by: list[str], num_files: int, source_bytes: int, location: Path, write_mode: str, mode: str,
           existing_columns: list[str], before: set[tuple[str, int, int]], progress: bool) -> dict[str, Any]:
    """Spark reads the source and writes the table's files at ``location`` (a local folder)."""
    with _Progress(spark, progress) as bar:
        df = bar.run(f"Reading {src.name}", lambda: _read(spark, fmt, literal(str(src.resolve())), files, src))
        columns = df.columns
        for col in partition_by:
            if col not in columns:
                raise InvalidInput(
                    f"partition column {col!r} is not in the data (columns: {', '.join(columns)})"
                )
        if len(set(partition_by)) != len(partition_by):
            raise InvalidInput(f"partition columns repeat: {', '.join(partition_by)}")
        if partition_by and len(partition_by) >= len(columns):
            raise InvalidInput("cannot partition by every column: at least one must stay in the data files")

        writer_df = df
        options: dict[str, str] = {}
        if partition_by:
            from pyspark.sql import functions as F

            rows = _estimate_rows(fmt, files, source_bytes)
            if rows is None:
                rows = bar.run("Counting rows", df.count)
            options["maxRecordsPerFile"] = str(max(1, math.ceil(rows / num_files)))
            # All rows of a partition value in one task: one file per partition and bound.
            writer_df = df.repartition(*[F.col(c) for c in partition_by])
            if mode == "overwrite" and existing_columns != partition_by:
                # Dynamic overwrite (the session default) replaces only the partitions
                # loaded; it is right only when the table is partitioned the same way.
                options["partitionOverwriteMode"] = "static"
        else:
            writer_df = df.repartition(num_files)

        writer = writer_df.write.mode(write_mode).options(**options)
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        bar.run(f"Writing {db}.{table}", lambda: writer.parquet(str(location)))

    written = [f for f in list_table_files(location)[0] if (f.path, f.size, f.mtime_ns) not in before]
    return {
        "rows": _count_rows(location, written),
        "files": len(written),
        "bytes": sum(f.size for f in written),
    }


def _publish(warehouse: Warehouse, db: str, table: str, staged: Path, mode: str, partition_by: list[str],
             existing_columns: list[str]) -> None:
    """Upload the staged files into the table in object storage, as Spark's save mode would
    have written them there: overwrite replaces the table, or only the partitions loaded when
    the table is partitioned the same way (Spark's dynamic overwrite); append adds."""
    storage = warehouse.storage
    target = warehouse.table_location(db, table)
    files = list_table_files(staged)[0]
    if mode == "overwrite":
        if partition_by and existing_columns == partition_by:
            for folder in sorted({f.path.rpartition("/")[0] for f in files}):
                storage.delete_dir(storage.join(target, folder))
        else:
            storage.delete_dir(target)
    for f in files:
        storage.upload(str(staged / f.path), storage.join(target, f.path))


def _count_rows(location: Path, files: Iterable[DataFile]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(location / f.path).num_rows for f in files)

"""Many small files (issue 39): a folder table of ``--files`` Parquet files of
``--rows-per-file`` rows each, as a streaming job leaves them, read through starscan against
``pyarrow.dataset`` reading the same files with the same filter in one process.

Writes ``small.t`` (``id`` bigint, ``v`` int = id % 10; written once into ``--warehouse``,
reused while its shape is the same), starts an in-process starscan server, times the FE's
first ``_query_plan`` of ``select id from small.t where v > 3`` and a second one, then reads
that query through the BE (the bundled client in its own process, ``--scanners`` scanners
asking no order as a StarRocks connector does, then one scanner asking for a fixed order as
the bundled client does by default, each after a warm-up read) and with ``pyarrow.dataset``
(``to_table`` with the same filter, its own threads, after a warm-up), each ``--repeats``
times. Reported: wall time, rows/s, files/s
and starscan's rows/s over pyarrow.dataset's (issue 39's target: 0.8).

    python bench/small_files.py                              # 50,000 files of 10 rows
    python bench/small_files.py --files 5000 --repeats 1 --no-append
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import common
import scan_throughput as st

SQL = "select id from small.t where v > 3"
HEADER = ["reader", "scanners", "files", "rows", "wall s (min / median)", "rows/s (best / median)",
          "files/s (best)", "over pyarrow.dataset (median rows/s)", "server Python peak GB", "JVM peak GB"]


def write_table(warehouse: Path, files: int, rows_per_file: int) -> Path:
    """``small.t``, unless it is there with this many files (a marker names its shape)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = warehouse / "small.db" / "t"
    marker = warehouse / f".small-{files}x{rows_per_file}"
    if marker.exists() and folder.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    for stale in warehouse.glob(".small-*"):
        stale.unlink()
    folder.mkdir(parents=True)
    for n in range(files):
        ids = pa.array(range(n * rows_per_file, (n + 1) * rows_per_file), pa.int64())
        pq.write_table(pa.table({"id": ids, "v": pa.compute.cast(pa.compute.remainder(ids, 10), pa.int32())}),
                       folder / f"part-{n:07d}.parquet")
    marker.touch()
    return folder


def read_with_dataset(folder: Path) -> dict:
    import pyarrow.dataset as ds

    started = time.perf_counter()
    table = ds.dataset(str(folder), format="parquet").to_table(columns=["id"], filter=ds.field("v") > 3)
    return {"wall_s": time.perf_counter() - started, "rows": table.num_rows}


def plan_seconds(server) -> float:
    import httpx

    started = time.perf_counter()
    r = httpx.post(f"http://127.0.0.1:{server.http_port}/api/small/t/_query_plan", json={"sql": SQL},
                   auth=("root", ""), timeout=600)
    r.raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--rows-per-file", type=int, default=10)
    ap.add_argument("--scanners", default="1,4", help="concurrent scanners of the query (default 1,4)")
    ap.add_argument("--repeats", type=int, default=2)
    common.scan_bench_arguments(ap, "/tmp/starscan-bench-small-wh")
    args = common.parse_scan_bench_arguments(ap)
    warehouse = Path(args.warehouse).resolve()
    warehouse.mkdir(parents=True, exist_ok=True)
    common.log(f"writing small.t ({args.files:,} files of {args.rows_per_file} rows) unless it is there")
    folder = write_table(warehouse, args.files, args.rows_per_file)
    env = common.environment()

    common.log("pyarrow.dataset: warm-up")
    read_with_dataset(folder)
    reference = [read_with_dataset(folder) for _ in range(args.repeats)]
    ref_median = common.best_median([r["rows"] / r["wall_s"] for r in reference])[1]
    rows = [["pyarrow.dataset (one process)", "", f"{args.files:,}", f"{reference[0]['rows']:,}",
             "{} / {}".format(*map(common.fmt, common.min_median([r["wall_s"] for r in reference]))),
             "{} / {}".format(*(f"{x:,.0f}" for x in common.best_median([r["rows"] / r["wall_s"] for r in reference]))),
             f"{args.files / min(r['wall_s'] for r in reference):,.0f}", "1.00", "", ""]]

    server, spark, settings = common.start_server(warehouse, driver_memory=args.driver_memory,
                                                  **common.read_slot_settings(args))
    try:
        first_plan = plan_seconds(server)
        second_plan = plan_seconds(server)
        readers = [(int(n), False) for n in args.scanners.split(",")] + [(1, True)]
        for scanners, ordered in readers:
            label = f"starscan ({server.settings.scan_engine} engine{', ordered' if ordered else ''})"
            common.log(f"{label}, {scanners} scanner(s): warm-up")
            st.measure_starscan(server, SQL, scanners, args, 4096, ordered)
            runs = []
            for i in range(args.repeats):
                common.log(f"{label}, {scanners} scanner(s): run {i + 1}/{args.repeats}")
                runs.append(st.measure_starscan(server, SQL, scanners, args, 4096, ordered))
            errors = sorted({e for r in runs for e in r["errors"]})
            if errors:
                rows.append([label, scanners, f"{args.files:,}", "error", errors[0][:120], "", "", "", "", ""])
                continue
            rates = [r["rows"] / r["wall_s"] for r in runs]
            median = common.best_median(rates)[1]
            rows.append([label, scanners, f"{args.files:,}",
                         f"{runs[0]['rows']:,}",
                         "{} / {}".format(*map(common.fmt, common.min_median([r["wall_s"] for r in runs]))),
                         "{} / {}".format(*(f"{x:,.0f}" for x in common.best_median(rates))),
                         f"{args.files / min(r['wall_s'] for r in runs):,.0f}",
                         f"{median / ref_median:.2f}" if ref_median else "",
                         common.gb(max(r["server_rss"] or 0 for r in runs)), common.gb(max(r["jvm_rss"] or 0 for r in runs))])
    finally:
        server.stop()
        spark.stop()
    table_md = common.markdown_table(HEADER, rows) + "\n"
    conditions = {
        "what": f"{SQL}: through starscan (the bundled client in a process of its own, batch_size 4096, one "
                "warm-up read first; as a StarRocks connector reads, no order asked, and 'ordered': as the bundled "
                "client reads by default, rows in a fixed order for its failover) against pyarrow.dataset's to_table "
                "with the same filter in one process (its own threads, one warm-up first)",
        "data": f"{args.files:,} Parquet files of {args.rows_per_file} rows (id bigint, v int), written by pyarrow",
        "plans": f"the FE's first _query_plan {first_plan:.2f} s, the next {second_plan * 1000:.0f} ms",
        "target": "starscan >= 0.8x pyarrow.dataset's rows/s (issue 39)",
        "server": f"scan_local_read_slots={settings.scan_local_read_slots if settings.scan_local_read_slots is not None else 'default (the machine cores)'}",
    }
    common.report("small_files: many small files, starscan against pyarrow.dataset", conditions, table_md, env,
                  not args.no_append)


if __name__ == "__main__":
    main()

"""The same table read from a local folder and from an S3 API server, side by side (issue 16).

Writes (or reuses) ``demo.lineitem`` at ``--scale`` in the local bench warehouse, starts moto's
standalone S3 server on 127.0.0.1, uploads the table's files into a bucket, and serves both
warehouses from one SparkSession: one server on the folder, one on ``s3://bench/wh``. Each
then answers the full scan and a filtered scan, read by the bundled client in a separate
process (plan over HTTP, open_scanner / get_next over Thrift), after one warm-up run each.

moto is a test server written in Python: what the S3 rows measure is starscan reading through
``pyarrow.fs`` from *an* S3 API on this machine, not what AWS or MinIO would deliver.

    python bench/object_storage.py                      # scale 1, 3 runs each
    python bench/object_storage.py --scale 0.1 --repeats 1 --no-append
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import common
import scan_throughput as st
from support import s3 as moto_s3  # after common: it puts tests/ on the path

HEADER = ["case", "source", "rows", "wall s (min / median)", "M rows/s (best / median)", "MB/s (best / median)",
          "first batch s", "server Python peak GB", "JVM peak GB"]


def upload(local: Path, creds: dict[str, str], bucket: str, prefix: str) -> float:
    import pyarrow.fs as pafs

    fs = moto_s3.filesystem(creds)
    fs.create_dir(bucket)
    t0 = time.perf_counter()
    for path in sorted(local.rglob("*.parquet")):
        pafs.copy_files(str(path), f"{bucket}/{prefix}/{path.relative_to(local).as_posix()}",
                        pafs.LocalFileSystem(), fs)
    return time.perf_counter() - t0


def row(case: str, source: str, runs: list[dict]) -> list:
    walls = [r["wall_s"] for r in runs]
    rows_s = [r["rows"] / r["wall_s"] / 1e6 for r in runs]
    mb_s = [r["bytes"] / r["wall_s"] / 1e6 for r in runs]
    first = [min(r["first_batch_s"]) for r in runs if r["first_batch_s"]]
    errors = sorted({e for r in runs for e in r["errors"]})
    if errors:
        return [case, source, "error", errors[0][:120], "", "", "", "", ""]
    return [case, source, f"{runs[0]['rows']:,}", "{} / {}".format(*map(common.fmt, common.min_median(walls))),
            "{} / {}".format(*(common.fmt(x, 2) for x in common.best_median(rows_s))),
            "{} / {}".format(*map(common.fmt, common.best_median(mb_s))),
            common.fmt(min(first), 2) if first else "",
            common.gb(max(r["server_rss"] or 0 for r in runs)), common.gb(max(r["jvm_rss"] or 0 for r in runs))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tablet-target-bytes", type=int, default=32 << 20)
    common.scan_bench_arguments(ap, "/tmp/starscan-bench-wh")  # the local warehouse, reused across runs
    args = common.parse_scan_bench_arguments(ap)
    env = common.environment()
    env["moto"] = common._version("moto")
    proc, endpoint, creds = moto_s3.start_moto()
    common.log(f"moto's S3 server at {endpoint}")
    server, spark, settings = common.start_server(Path(args.warehouse).resolve(), driver_memory=args.driver_memory,
                                                  **common.read_slot_settings(args))
    s3_server = None
    rows = []
    try:
        wrote, _ = st.ensure_lineitem(spark, server.warehouse, args.scale, args.tablet_target_bytes)
        local = server.warehouse.table_path(st.DB, st.TABLE)
        upload_s = upload(local, creds, "bench", f"wh/{st.DB}.db/{st.TABLE}")
        snap = server.warehouse.snapshot(st.DB, st.TABLE)
        parquet_bytes = sum(f.size for f in snap.files)
        common.log(f"uploaded {parquet_bytes / 1e6:,.1f} MB in {upload_s:.1f} s")
        from starscan.app.server import StarscanServer
        from starscan.settings.config import load_settings

        s3_settings = load_settings(**{**settings.model_dump(), "warehouse": "s3://bench/wh", "http_port": 0,
                                       "be_port": 0, "query_port": 0,
                                       "state_dir": str(Path(args.warehouse).resolve() / "_starscan-s3"), **creds})
        s3_server = StarscanServer(s3_settings, spark).start()
        for case, sql in (("full", st.FULL_SQL), ("4 columns + filter", st.FILTER_SQL)):
            for source, srv in (("local folder", server), ("moto S3 server", s3_server)):
                common.log(f"{case}, {source}: warm-up")
                st.measure_starscan(srv, sql, 1, args, 4096)
                runs = []
                for i in range(args.repeats):
                    common.log(f"{case}, {source}: run {i + 1}/{args.repeats}")
                    runs.append(st.measure_starscan(srv, sql, 1, args, 4096))
                rows.append(row(case, source, runs))
    finally:
        if s3_server is not None:
            s3_server.stop()
        server.stop()
        spark.stop()
        proc.terminate()
    table_md = common.markdown_table(HEADER, rows) + "\n"
    conditions = {
        "what": "one reader (the bundled client in a separate process), batch_size 4096, arrow engine (auto); "
                "rows/s and MB/s of Arrow delivered; one warm-up run per case and source first",
        "data": f"demo.lineitem scale {args.scale}: {len(snap.files)} Parquet files, {parquet_bytes / 1e6:,.1f} MB, "
                f"in the local warehouse ({'written' if wrote else 'reused'}) and uploaded to moto ({upload_s:.1f} s)",
        "S3": f"moto {env['moto']} standalone server on 127.0.0.1 (Python, in-memory), IAM auth on; starscan reads it "
              "through pyarrow.fs.S3FileSystem",
        "servers": "two StarscanServers on one SparkSession (local[2]); listing cache 5 s",
    }
    common.report(f"object_storage: lineitem scale {args.scale}, local folder vs moto S3", conditions, table_md, env,
                  not args.no_append)


if __name__ == "__main__":
    main()

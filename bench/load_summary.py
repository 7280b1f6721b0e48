"""The summary of a locust run for bench/RESULTS.md (used by bench/load.sh; not a test).

    load_summary.py snapshot PID          # JSON: peak RSS (VmHWM) and CPU s of the server and its JVM
    load_summary.py report --csv-dir DIR ...   # locust's CSV -> a RESULTS.md section
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import common
import psutil


def _hwm(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def snapshot(pid: int) -> dict:
    out = {"server_peak_rss": None, "jvm_peak_rss": None, "server_cpu_s": None, "jvm_cpu_s": None}
    try:
        proc = psutil.Process(pid)
        out["server_peak_rss"] = _hwm(pid)
        out["server_cpu_s"] = common.cpu_seconds([proc])
        jvm = next((c for c in proc.children(recursive=True) if c.name() == "java"), None)
        if jvm is not None:
            out["jvm_peak_rss"] = _hwm(jvm.pid)
            out["jvm_cpu_s"] = common.cpu_seconds([jvm])
    except psutil.Error:
        pass
    return out


def _num(row: dict, key: str) -> float | None:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None


def report(args) -> int:
    csv_dir = Path(args.csv_dir)
    stats_path = csv_dir / "locust_stats.csv"
    if not stats_path.exists():
        print(f"no {stats_path}: locust did not run (rc={args.locust_rc})", file=sys.stderr)
        return 1
    with open(stats_path, newline="") as fh:
        stats = list(csv.DictReader(fh))
    failures = []
    fpath = csv_dir / "locust_failures.csv"
    if fpath.exists():
        with open(fpath, newline="") as fh:
            failures = list(csv.DictReader(fh))
    server = json.loads((csv_dir / "server.json").read_text()) if (csv_dir / "server.json").exists() else {}

    header = ["type", "call", "requests", "failures", "req/s", "p50 ms", "p99 ms", "max ms", "avg bytes"]
    rows = []
    total_failures = 0
    for r in stats:
        fails = int(_num(r, "Failure Count") or 0)
        if r.get("Name") != "Aggregated":
            total_failures += fails
        rows.append([
            r.get("Type") or "", r.get("Name"), f"{int(_num(r, 'Request Count') or 0):,}", fails,
            common.fmt(_num(r, "Requests/s")), common.fmt(_num(r, "50%"), 0), common.fmt(_num(r, "99%"), 0),
            common.fmt(_num(r, "Max Response Time"), 0), common.fmt(_num(r, "Average Content Size"), 0),
        ])
    table = common.markdown_table(header, rows) + "\n"
    verdict = "**MET**" if total_failures == 0 and args.locust_rc == 0 else "**NOT MET**"
    table += f"\nZero failures: {verdict}, {total_failures} failed requests (locust exit code {args.locust_rc}).\n"
    if failures:
        table += "\nFailures:\n\n" + "\n".join(
            f"- {f.get('Method')} {f.get('Name')}: {f.get('Occurrences')}× {f.get('Error', '')[:300]}" for f in failures[:10]) + "\n"
    env = common.environment()
    env["load average at start"] = args.load_at_start
    conditions = {
        "what": "locust (headless) against an in-tree `starscan serve` on 127.0.0.1; bench/locustfile.py: "
                "ThriftScanUser (plan once, then open_scanner / get_next until eos / close_scanner, each call "
                "reported with its latency and bytes; `scan (open..close)` = one whole scan) and PlanUser "
                "(`_query_plan` over HTTP keep-alive), weights 1:1, no think time",
        "load": f"{args.users} users, spawn rate {args.spawn_rate}/s, {args.time} s",
        "server": f"starscan serve, local[2], defaults except STARSCAN_PLAN_RATE_PER_USER=0 (no per-user plan "
                  f"rate cap; the default 50/s would refuse this load, which comes from one user), "
                  f"STARSCAN_MAX_SCANNERS=256 and STARSCAN_MAX_SCANNERS_PER_USER=256; login lockout at its "
                  f"default (no failed logins here); demo tables at scale {args.scale}",
        "server resources": f"Python peak RSS {common.gb(server.get('server_peak_rss'))}, JVM peak RSS "
                            f"{common.gb(server.get('jvm_peak_rss'))} (VmHWM); CPU s since start: Python "
                            f"{common.fmt(server.get('server_cpu_s'))}, JVM {common.fmt(server.get('jvm_cpu_s'))}",
        "csv": f"`{csv_dir}` (locust_stats.csv, locust_failures.csv, locust_stats_history.csv)",
    }
    title = f"load: locust, {args.users} users, {args.time} s"
    common.report(title, conditions, table, env, append=not args.no_append)
    return 0 if total_failures == 0 and args.locust_rc == 0 else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("pid", type=int)
    r = sub.add_parser("report")
    r.add_argument("--csv-dir", required=True)
    r.add_argument("--users", type=int, required=True)
    r.add_argument("--time", type=int, required=True)
    r.add_argument("--spawn-rate", default="")
    r.add_argument("--scale", default="")
    r.add_argument("--load-at-start", default="")
    r.add_argument("--locust-rc", type=int, default=0)
    r.add_argument("--no-append", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "snapshot":
        print(json.dumps(snapshot(args.pid)))
        return 0
    return report(args)


if __name__ == "__main__":
    sys.exit(main())

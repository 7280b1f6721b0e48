"""bench/RESULTS.md, generated from the run records in bench/results/ (one JSON file per run,
written by ``common.report``): for each benchmark its latest run in full (versions, machine,
conditions, table) and the history of its runs with each run's headline figures (the trend). Analyses written by hand are in bench/notes/.

    python bench/results_page.py            # write bench/RESULTS.md
    python bench/results_page.py --check    # exit 1 when RESULTS.md is not what the records give,
                                            # or a benchmark's latest run shows no headline figure
    python bench/results_page.py --records DIR --notes DIR --out -   # the page of other records, printed
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
NOTES_DIR = BENCH_DIR / "notes"
PAGE = BENCH_DIR / "RESULTS.md"


def records(folder: Path = RESULTS_DIR) -> list[dict]:
    """Every run record, oldest first."""
    out = []
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["_file"] = path.name
        out.append(doc)
    return sorted(out, key=lambda d: (d["time"], d["_file"]))


# The figure each benchmark's history shows per run, so the trend reads down one column: for
# each benchmark, (label, the row: column -> start of its cell, the column). A run whose table
# has no such row shows a dash.
HEADLINES: dict[str, list[tuple[str, dict[str, str], str]]] = {
    "mysql_port": [
        ("whole table, mysqlclient", {"query": "whole table", "system": "starscan", "client": "mysqlclient"},
         "x MariaDB's rows/s (same client)"),
        ("PyMySQL", {"query": "whole table", "system": "starscan", "client": "pymysql"},
         "x MariaDB's rows/s (same client)"),
    ],
    "compare": [
        ("starscan warm full M rows/s", {"system": "starscan (thriftpy2", "scan": "full", "phase": "warm", "readers": "1"}, "M rows/s"),
        ("x Flight", {"system": "starscan (thriftpy2", "scan": "full", "phase": "warm", "readers": "1"}, "× Flight MB/s (rows/s)"),
        ("Flight SQL (BE) warm full M rows/s", {"system": "starscan over Arrow Flight SQL (ADBC client), endpoints read from",
                                                "scan": "full", "phase": "warm", "readers": "1"}, "M rows/s"),
    ],
    "call_latency": [
        ("8 readers: calls > 1 s", {"readers": "8", "phase": "warm"}, "calls > 1 s"),
        ("get_next ms p50/p99/max", {"readers": "8", "phase": "warm"}, "get_next ms p50 / p99 / max"),
        ("cold: calls > 1 s", {"phase": "cold"}, "calls > 1 s"),
    ],
    "plan_latency": [("cold p50 ms", {"phase": "cold"}, "p50 ms")],
    "scan_throughput": [("M rows/s", {"reader": "starscan", "scan": "full"}, "M rows/s median (aggregate)")],
    "soak": [("verdict", {}, "verdict"), ("wrong rows", {}, "wrong rows")],
    "flink_shape": [("exact runs", {"run": "all"}, "exact"), ("BE calls > 1 s", {"run": "all"}, "BE calls > 1 s"),
                    ("slowest get_next ms", {"run": "all"}, "slowest get_next ms")],
    "chaos": [("verdict", {}, "verdict"), ("exact", {}, "exact"), ("wrong", {}, "wrong")],
    "load": [("_query_plan p99 ms", {"call": "_query_plan"}, "p99 ms")],
    "object_storage": [("S3 full M rows/s", {"case": "full", "source": "moto"}, "M rows/s (best / median)")],
    "scale_out": [("2 BEs rows/s", {"configuration": "2 BEs"}, "rows/s (aggregate, best / median)")],
    "stages": [("full CPU s/M rows", {"scan": "full"}, "total CPU s/M rows")],
    "deletes": [("arrow vectors/compacted", {"engine": "arrow"}, "vectors / compacted (median rows/s)")],
    "small_files": [("x pyarrow.dataset, 1 scanner", {"scanners": "1"}, "over pyarrow.dataset (median rows/s)")],
    "hosts": [("relay × direct, hosts", {"topology": "separate hosts", "path": "Thrift relay", "scan": "full"},
               "× direct, same protocol (median)"),
              ("Flight proxy × direct, hosts", {"topology": "separate hosts", "path": "Flight SQL proxy", "scan": "full"},
               "× direct, same protocol (median)")],
    "be_start": [("--role be first row s", {"node": "--role be"}, "first row s"),
                 ("listening s", {"node": "--role be"}, "BE port listening s")],
}


# Columns older runs' tables lack, with the value their rows had (call_latency's runs were
# all warm before it measured a cold start).
IMPLIED = {"phase": "warm"}


def table_rows(markdown: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``markdown``, as column -> cell."""
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for line in markdown.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            if header is not None and rows:
                break
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        if header is None:
            header = cells
        elif all(set(c) <= set("-: ") for c in cells):
            continue
        else:
            rows.append(dict(zip(header, cells)))
    return rows


def headline(run: dict) -> str:
    """The run's headline figures (``HEADLINES``), or a dash."""
    parts = []
    rows = table_rows(run.get("table", ""))
    for label, where, column in HEADLINES.get(run["benchmark"], []):
        match = next((r for r in rows if all(r.get(k, IMPLIED.get(k, "")).startswith(v) for k, v in where.items())),
                     None)
        value = match.get(column) if match else None
        if value:
            parts.append(f"{label}: {value}")
    return "; ".join(parts) or "–"


def host_kind(run: dict) -> str:
    """The kind of host a run was measured on: its CPU model (and SIMD flags, where recorded).
    Figures of different kinds are kept apart: a ratio that holds on one may not on another."""
    env = run.get("environment", {})
    kind = env.get("cpu", "unknown")
    flags = env.get("cpu flags")
    return f"{kind} ({flags})" if flags else kind


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def page(runs: list[dict], notes: list[Path]) -> str:
    by_benchmark: dict[str, list[dict]] = {}
    for run in runs:
        by_benchmark.setdefault(run["benchmark"], []).append(run)
    lines = [
        "# starscan benchmark results",
        "",
        "Generated by `python bench/results_page.py` from the run records in `bench/results/`",
        "(one JSON file per run: commit, versions, machine, conditions, figures); do not edit by hand.",
        "Each benchmark's latest run is shown in full, then the history of its runs with their headline",
        "figures (the trend). MB = 10^6 bytes.",
        "Numbers from different machines or loads are not comparable. Analyses written by hand are",
        "dated notes in `bench/notes/`.",
        "",
        "| benchmark | runs | latest |",
        "|---|---|---|",
    ]
    for name, group in sorted(by_benchmark.items()):
        latest = group[-1]
        lines.append(f"| [{name}](#{name.replace('_', '-')}) | {len(group)} | {latest['time']} ({_cell(latest['commit'])}) |")
    for name, group in sorted(by_benchmark.items()):
        latest = group[-1]
        lines += ["", f"## {name}", "", f"### Latest: {latest['title']} ({latest['time']})", "",
                  "**Versions and machine**", ""]
        lines += [f"- {k}: {v}" for k, v in latest["environment"].items()]
        lines += ["", "**Conditions**", ""]
        lines += [f"- {k}: {v}" for k, v in latest["conditions"].items()]
        lines += ["", latest["table"].rstrip()]
        kinds: dict[str, dict] = {}
        for run in group:
            kinds[host_kind(run)] = run  # the latest of each kind
        if len(kinds) > 1:
            lines += ["", "### Latest on each host kind", "", "| host | time | commit | headline | record |",
                      "|---|---|---|---|---|"]
            for kind, run in sorted(kinds.items(), key=lambda item: item[1]["time"], reverse=True):
                lines.append(f"| {_cell(kind)} | {run['time']} | {_cell(run['commit'])} | {_cell(headline(run))} | "
                             f"[{run['_file']}](results/{run['_file']}) |")
        lines += ["", "### History", "", "| time | host | commit | run | headline | record |", "|---|---|---|---|---|---|"]
        for run in reversed(group):
            lines.append(f"| {run['time']} | {_cell(host_kind(run))} | {_cell(run['commit'])} | {_cell(run['title'])} | "
                         f"{_cell(headline(run))} | [{run['_file']}](results/{run['_file']}) |")
    if notes:
        lines += ["", "## Notes", "", "Analyses written by hand, newest first:", ""]
        for note in sorted(notes, reverse=True):
            first = note.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
            lines.append(f"- [{note.name}](notes/{note.name}): {first}")
    return "\n".join(lines) + "\n"


def write_page() -> Path:
    PAGE.write_text(page(records(), sorted(NOTES_DIR.glob("*.md"))), encoding="utf-8")
    return PAGE


def missing_headlines(runs: list[dict]) -> list[str]:
    """The benchmarks whose latest run shows no headline figure in its history (a benchmark
    without a ``HEADLINES`` entry, or a table that lost the named row or column)."""
    latest = {run["benchmark"]: run for run in runs}
    return sorted(name for name, run in latest.items() if name not in HEADLINES or headline(run) == "–")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare the page with the records instead of writing it")
    parser.add_argument("--records", type=Path, default=RESULTS_DIR, help="the run records' folder")
    parser.add_argument("--notes", type=Path, default=NOTES_DIR, help="the notes' folder")
    parser.add_argument("--out", default=str(PAGE), help="the page to write or check ('-': print it)")
    args = parser.parse_args(argv)
    if args.check and args.out == "-":
        parser.error("--check compares a page file with the records: give --out a file, not -")
    runs = records(args.records)
    expected = page(runs, sorted(args.notes.glob("*.md")))
    if args.out == "-":
        sys.stdout.write(expected)
        return 0
    out = Path(args.out)
    if args.check:
        missing = missing_headlines(runs)
        if missing:
            print(f"the latest run of {', '.join(missing)} shows no headline figure: add or fix its HEADLINES "
                  "entry in bench/results_page.py", file=sys.stderr)
            return 1
        if not out.exists() or out.read_text(encoding="utf-8") != expected:
            print(f"{out} is not what {args.records} gives: run python bench/results_page.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(expected, encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""bench/RESULTS.md is generated from the run records in bench/results/ (one JSON file per
run) and the notes in bench/notes/: never edited by hand, never out of date."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_results_page_is_what_the_records_give():
    out = subprocess.run([sys.executable, str(BENCH / "results_page.py"), "--check"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr


def test_every_record_names_its_commit_versions_machine_and_conditions():
    records = sorted((BENCH / "results").glob("*.json"))
    assert records
    for path in records:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert {"benchmark", "title", "time", "commit", "environment", "conditions", "table"} <= set(doc), path.name
        assert doc["environment"].get("python") and doc["environment"].get("nproc"), path.name
        assert path.name.endswith(f"-{doc['benchmark']}.json") or f"-{doc['benchmark']}-" in path.name


def test_every_benchmark_history_shows_its_headline_figure_for_the_latest_run():
    from support.bench import bench_module

    page = bench_module("results_page")
    latest: dict[str, dict] = {}
    for run in page.records():
        latest[run["benchmark"]] = run
    assert set(latest) <= set(page.HEADLINES), "a benchmark without a headline in bench/results_page.py"
    for name, run in latest.items():
        assert page.headline(run) != "–", f"{name}: the latest run's table has no headline figure"


def test_a_headline_is_read_from_the_named_row_and_column():
    from support.bench import bench_module

    page = bench_module("results_page")
    table = "| engine | rows | ratio |\n|---|---|---|\n| sql | 5 | 0.8 |\n| arrow (auto) | 5 | 0.9 |\n"
    run = {"benchmark": "deletes", "table": table.replace("ratio", "vectors / compacted (median rows/s)")}
    assert page.headline(run) == "arrow vectors/compacted: 0.9"
    assert page.headline({"benchmark": "deletes", "table": "no table"}) == "–"

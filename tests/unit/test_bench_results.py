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


def test_runs_of_each_host_kind_are_kept_apart():
    """A benchmark measured on two kinds of host shows the latest run of each, and its history
    names every run's host."""
    from support.bench import bench_module

    page = bench_module("results_page")

    def run(cpu: str, flags: str | None, time: str) -> dict:
        env = {"python": "3.11", "nproc": "2", "cpu": cpu} | ({"cpu flags": flags} if flags else {})
        return {"benchmark": "compare", "title": "compare", "time": time, "commit": "c", "environment": env,
                "conditions": {}, "table": "| a |\n|---|\n| 1 |\n", "_file": f"{time}-compare.json"}

    runs = [run("AMD EPYC", None, "1"), run("Intel Xeon", "avx2", "2"), run("Intel Xeon", "avx2 avx512f", "3"),
            run("AMD EPYC", None, "4")]
    text = page.page(runs, [])
    kinds = text.split("### Latest on each host kind")[1].split("### History")[0]
    assert [line.split(" | ")[1] for line in kinds.splitlines() if line.startswith("| ") and "[" in line] == ["4", "3", "2"]
    assert "Intel Xeon (avx2 avx512f)" in kinds and "Intel Xeon (avx2)" in kinds and "AMD EPYC |" in kinds
    history = text.split("### History")[1]
    assert history.count("| AMD EPYC |") == 2 and history.count("| Intel Xeon (avx2) |") == 1

"""bench/RESULTS.md is generated from the run records in bench/results/ (one JSON file per
run) and the notes in bench/notes/: never edited by hand, never out of date. The generator
(bench/results_page.py) is run here as a program, as a user runs it: the tests never import
the benchmarks (the benchmarks import the tests' support package)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def results_page(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "results_page.py"), *args], capture_output=True, text=True,
                          timeout=120)


def page_of(runs: list[dict], folder: Path) -> str:
    """The page bench/results_page.py makes of ``runs`` (written as records into ``folder``)."""
    records, notes = folder / "results", folder / "notes"
    records.mkdir()
    notes.mkdir()
    for run in runs:
        (records / run["_file"]).write_text(json.dumps({k: v for k, v in run.items() if k != "_file"}),
                                            encoding="utf-8")
    out = results_page("--records", str(records), "--notes", str(notes), "--out", "-")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_results_page_is_what_the_records_give_and_every_latest_run_has_its_headline():
    out = results_page("--check")
    assert out.returncode == 0, out.stderr


def test_every_record_names_its_commit_versions_machine_and_conditions():
    records = sorted((BENCH / "results").glob("*.json"))
    assert records
    for path in records:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert {"benchmark", "title", "time", "commit", "environment", "conditions", "table"} <= set(doc), path.name
        assert doc["environment"].get("python") and doc["environment"].get("nproc"), path.name
        assert path.name.endswith(f"-{doc['benchmark']}.json") or f"-{doc['benchmark']}-" in path.name


def run_of(benchmark: str, time: str, table: str, cpu: str = "AMD EPYC", flags: str | None = None) -> dict:
    env = {"python": "3.11", "nproc": "2", "cpu": cpu} | ({"cpu flags": flags} if flags else {})
    return {"benchmark": benchmark, "title": benchmark, "time": time, "commit": "c", "environment": env,
            "conditions": {}, "table": table, "_file": f"{time}-{benchmark}.json"}


def test_a_headline_is_read_from_the_named_row_and_column(tmp_path):
    table = "| engine | rows | vectors / compacted (median rows/s) |\n|---|---|---|\n| sql | 5 | 0.8 |\n" \
            "| arrow (auto) | 5 | 0.9 |\n"
    text = page_of([run_of("deletes", "1", "no table"), run_of("deletes", "2", table)], tmp_path)
    history = text.split("### History")[1]
    assert "| arrow vectors/compacted: 0.9 | [2-deletes.json]" in history  # the arrow row, not the sql one
    assert "| – | [1-deletes.json]" in history  # a run whose table has no such row shows a dash


def test_a_latest_run_without_its_headline_fails_the_check(tmp_path):
    records, notes = tmp_path / "results", tmp_path / "notes"
    records.mkdir()
    notes.mkdir()
    (records / "1-deletes.json").write_text(json.dumps(run_of("deletes", "1", "| a |\n|---|\n| 1 |\n")))
    written = results_page("--records", str(records), "--notes", str(notes), "--out", str(tmp_path / "page.md"))
    assert written.returncode == 0, written.stderr
    checked = results_page("--check", "--records", str(records), "--notes", str(notes), "--out", str(tmp_path / "page.md"))
    assert checked.returncode == 1 and "deletes" in checked.stderr and "headline" in checked.stderr


def test_runs_of_each_host_kind_are_kept_apart(tmp_path):
    """A benchmark measured on two kinds of host shows the latest run of each, and its history
    names every run's host."""
    table = "| a |\n|---|\n| 1 |\n"
    runs = [run_of("compare", "1", table, "AMD EPYC"), run_of("compare", "2", table, "Intel Xeon", "avx2"),
            run_of("compare", "3", table, "Intel Xeon", "avx2 avx512f"), run_of("compare", "4", table, "AMD EPYC")]
    text = page_of(runs, tmp_path)
    kinds = text.split("### Latest on each host kind")[1].split("### History")[0]
    assert [line.split(" | ")[1] for line in kinds.splitlines() if line.startswith("| ") and "[" in line] == ["4", "3", "2"]
    assert "Intel Xeon (avx2 avx512f)" in kinds and "Intel Xeon (avx2)" in kinds and "AMD EPYC |" in kinds
    history = text.split("### History")[1]
    assert history.count("| AMD EPYC |") == 2 and history.count("| Intel Xeon (avx2) |") == 1

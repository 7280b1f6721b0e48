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

"""The benchmarks as libraries: a test that runs a benchmark's workload briefly (the soak)
imports its module through here, so the test does not depend on another test having put
``bench/`` on ``sys.path`` first."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (the folder goes on the path: its modules import ``common``)."""
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    return importlib.import_module(name)

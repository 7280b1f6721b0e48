"""Shared knobs of the fuzz targets: CI runs them briefly (the defaults); `bench/fuzz.py`
runs them for minutes by raising FUZZ_EXAMPLES."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))

fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("FUZZ_RANDOM", "") == "",  # CI: the same examples every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    database=None,
)

"""The chaos soak (tests/support/chaos.py; bench/chaos.py runs it for minutes), bounded: an FE and two BEs behind one address, mixed readers (the
bundled client, Spark-connector-like and Flink-like Thrift readers, the MySQL port), while a
Python worker, a BE's JVM, a whole BE and the FE are each killed in turn. No read may return a
wrong, lost or repeated row, every failed read must have failed with an error a reader can
simply retry, and no reader may hang. (How many reads complete without a retry is the
benchmark's figure: bench/RESULTS.md.)"""

from __future__ import annotations

import argparse

import pytest
from support import chaos

pytestmark = pytest.mark.slow  # three `starscan serve` processes of its own


def test_a_short_chaos_soak_loses_no_row_and_fails_only_retryably():
    # Each kind of fault, then a BE's JVM and a whole BE again (healed nodes must heal again),
    # about 7 s apart, in 45 s.
    args = argparse.Namespace(minutes=0.75, readers=4, fault_every=7.0, be_down_s=4.0, seed=3,
                              faults=["worker", "jvm", "be", "fe", "jvm", "be"])
    summary, result, _start_s = chaos.run(args)
    print(summary)
    assert result["hung"] == 0, summary
    assert summary["wrong"] == 0, summary
    assert summary["failed_unclassified"] == 0, summary
    assert summary["ok"] > 0
    assert {"jvm", "be", "fe"} <= set(summary["faults"]), summary["faults"]

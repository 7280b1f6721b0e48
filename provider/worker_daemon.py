"""Spark's Python daemon (``spark.python.daemon.module``), with what a scan task runs
imported before it forks a worker for each task.

Spark starts one daemon per executor and forks a Python worker from it whenever a task
needs one (several scanners at once need several). A plain daemon forks workers that then
import pyarrow, PySpark's worker and starscan's task code themselves: about a second on a
busy 2-core machine, which the first reply of every new concurrent scanner waited for
(bench/RESULTS.md, issue 22). Forked from this daemon, a worker has all of it already.
"""

import gc

import pyarrow  # noqa: F401
import pyarrow.ipc  # noqa: F401
import pyspark.worker  # noqa: F401
from pyspark.daemon import manager

try:  # PySpark's worker imports pandas on its own when it is installed: do it once, here
    import pandas  # noqa: F401
except ImportError:
    pass

import pyarrow.dataset  # noqa: F401  (row-group statistics: the arrow engine loads it on first use)

import starscan.arrow.read  # noqa: F401  (pyarrow.parquet: the arrow engine's reads)
import starscan.arrow.wire  # noqa: F401
import starscan.provider.push.task  # noqa: F401
import starscan.provider.push.wire  # noqa: F401

if __name__ == "__main__":
    # Everything imported above is moved out of the collector's reach before the forks: a
    # worker's full collections otherwise walk every object pandas, PySpark and pyarrow made
    # (7 % of a scan task's CPU in a profile), and touching them unshares the fork's pages.
    gc.freeze()
    manager()

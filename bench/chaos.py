"""Chaos soak (issue 56; not a test): mixed readers against an FE and two BEs behind one
address, while a seeded driver kills Spark's Python workers, a BE's JVM, a whole BE and the
FE. Every completed read is checked against the table's known rows.

The workload is tests/support/chaos.py (the chaos test runs it for a minute). The cluster is
what a user deploys (tests/support/nodes.py): `starscan serve --role fe` and
two `--role be` nodes sharing a warehouse, state folder and plan secret, the FE's
``be_endpoints`` one address (a TCP balancer, tests/support/balancer.py) in front of both BEs,
as a Kubernetes Service would be. The table is written here with pyarrow, so the expected
rows are known without any engine.

Readers (threads), each read one of:

- ``client``: the bundled ``StarscanClient.read`` (its own retries and failover);
- ``connector``: the StarRocks Spark connector's shape: every call retried 3 times on a new
  connection to the same address, and the whole read (a Spark task) tried up to 4 times
  (``spark.task.maxFailures``);
- ``flink``: the StarRocks Flink connector at its defaults: 1 s socket timeout, no retries;
- ``mysql``: a SELECT on the FE's MySQL port.

Faults, one every ``--fault-every`` seconds (seeded): ``worker`` (SIGKILL a Spark Python
worker of a BE), ``jvm`` (SIGKILL a BE's JVM: the BE starts a new SparkSession), ``be``
(SIGKILL one BE, started again ``--be-down-s`` later), ``fe`` (SIGKILL the FE, started again
at once).

A read is ``ok`` (every row exactly once), ``failed`` (an error, classified: retryable when a
reader could simply read again: a transport error, SERVICE_UNAVAILABLE, a lost context, the
client's NetworkError) or ``wrong`` (rows lost, duplicated or foreign: never acceptable).

    python bench/chaos.py --minutes 10                 # the issue's soak
    python bench/chaos.py --minutes 1 --no-append      # a short look
"""

from __future__ import annotations

import argparse
import sys

import common
from support.chaos import FAULTS, KIND_WEIGHTS, KINDS, MAX_MINUTES, run  # after common: it puts tests/ on the path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--readers", type=int, default=6)
    ap.add_argument("--fault-every", type=float, default=20.0, help="mean seconds between two faults")
    ap.add_argument("--be-down-s", type=float, default=5.0, help="seconds a killed BE stays down")
    ap.add_argument("--faults", type=lambda text: text.split(","), default=None,
                    help=f"faults in this order, repeated (of {','.join(FAULTS)}); default: drawn by weight")
    ap.add_argument("--root", help="an empty folder for the cluster (kept, with the nodes' logs); default: a temporary one")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-append", action="store_true", help="print only; do not touch RESULTS.md")
    args = ap.parse_args(argv)
    if not 0 < args.minutes <= MAX_MINUTES:
        ap.error(f"--minutes must be in (0, {MAX_MINUTES:g}]")
    env = common.environment()
    s, result, start_s = run(args)
    completed = s["ok"] / s["reads"] if s["reads"] else 0.0
    ok = s["wrong"] == 0 and s["failed_unclassified"] == 0 and result["hung"] == 0 and completed >= 0.95
    header = ["minutes", "readers", "reads", "exact", "failed (retryable / not)", "wrong", "hung",
              "by reader kind (ok / failed / wrong)", "faults injected", "verdict"]
    kinds = "; ".join(f"{k} {v.get('ok', 0)}/{v.get('failed', 0)}/{v.get('wrong', 0)}" for k, v in s["by_kind"].items())
    faults = ", ".join(f"{k} {v}" for k, v in sorted(s["faults"].items()))
    row = [f"{result['wall'] / 60:.1f}", args.readers, s["reads"], f"{s['ok']} ({completed:.1%})",
           f"{s['failed'] - s['failed_unclassified']} / {s['failed_unclassified']}", s["wrong"], result["hung"], kinds,
           faults, "PASS" if ok else "FAIL"]
    conditions = {
        "what": "reads of a 320,000-row table (8 files, tablets of 256 KiB) checked row by row against the rows "
                "written; faults: SIGKILL of a Spark Python worker of a BE, of a BE's JVM, of a BE (down "
                f"{args.be_down_s:g} s), of the FE (started again at once)",
        "cluster": "`starscan serve --role fe` and two `--role be` (local[2] each), resumable scans on, the FE's "
                   f"be_endpoints one balancer address in front of both BEs; start {start_s:.0f} s",
        "readers": f"{args.readers} threads; kinds {dict(zip(KINDS, KIND_WEIGHTS, strict=True))} (client: the bundled "
                   "client; connector: 3 call retries and 4 task attempts; flink: 1 s timeout, no retry; mysql: the "
                   "MySQL port); a fault every ~" f"{args.fault_every:g} s; seed {args.seed}",
        "targets": "0 rows wrong; every failure classified retryable; >= 95 % of reads exact with no action",
    }
    if s["errors"]:
        conditions["errors"] = "; ".join(f"{n}x {e}" for e, n in s["errors"].most_common(6))
    common.report("chaos soak: Spark, BE and FE failures under mixed readers (issue 56)", conditions,
                  common.markdown_table(header, [row]), env, not args.no_append)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

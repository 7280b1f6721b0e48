"""The StarRocks Flink connector's deployment shape for bench/call_latency.py ``--shape cluster``
(issue 56; not a test): an FE and two ``--role be`` nodes, a table of 40 tablets, and each run
one Flink job of parallelism 8 reading it.

The connector plans once, spreads the tablets over the BEs of their routings (the BE with the
fewest tablets so far: 20 and 20), and gives each of its subtasks one scanner of the tablets
of one BE (4 subtasks per BE, 5 tablets each); every Thrift call has a 1 s socket timeout and
no retry. The readers here do exactly that, each in its own process, with a thriftpy2 client
whose read timeout is the connector's; or, with ``--flink-run``, the real connector (built
from its public source) runs the job and the BEs' own metrics time its calls.

Runs, in order (10 by default, as the issue counts them):

- ``cold``: the first job after the nodes start, as soon as they answer health (the BEs'
  Spark may still be starting);
- ``warm``: full scans;
- ``filter``: the first run of each selective filter (one stats can prune, one they cannot);
- ``loaded``: full scans and a filter while ``--load`` busy processes (a second job) load the
  machine.

A run is ``exact`` when every reader finished and the rows' count and sum of ``id`` are the
table's for its filter. Reported per run: exact or the errors, the slowest ``open_scanner``
and ``get_next`` (whole calls: a reply begun early takes longer than 1 s without failing a
reader, docs/protocol.md 3.1), calls over 1 s, replies the BEs began early, and the load.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import common
import httpx
from support.nodes import Node, write_id_table
from support.waits import free_port

DB, TABLE = "flink", "events"
TABLETS, ROWS_PER_TABLET = 40, 60_000
PARALLELISM = 8
SECRET = "flink-shape-plan-secret-0123456789abcdef"
FLINK = {"batch_size": 1000, "keep_alive_min": 10, "query_timeout": 600, "mem_limit": 1 << 30}
FILTERS = {
    # the last tablet's rows: Parquet statistics skip the other 39 files
    "id >= 2390000": lambda i: i >= 2_390_000,
    # one row in 9,973 of every tablet: nothing to prune, every file read
    "id % 9973 = 0": lambda i: i % 9973 == 0,
}


def expected(where: str | None) -> tuple[int, int]:
    keep = FILTERS[where] if where else (lambda i: True)
    ids = [i for i in range(TABLETS * ROWS_PER_TABLET) if keep(i)]
    return len(ids), sum(ids)


class FlinkCluster:
    """An FE and two BEs on 127.0.0.1; the FE's routings name both BEs."""

    def __init__(self, root: Path, settings: dict[str, str]):
        self.root = root
        self.be_ports = [free_port(), free_port()]
        self.be_http = [free_port(), free_port()]
        self.fe_http, self.fe_query = free_port(), free_port()
        env = {"STARSCAN_PLAN_SECRET": SECRET, "STARSCAN_TABLET_TARGET_BYTES": str(64 << 20),
               "STARSCAN_TABLET_OPEN_COST_BYTES": str(64 << 20)}
        env.update({f"STARSCAN_{k.upper()}": v for k, v in settings.items()})
        self.bes = [Node(root, f"be{i}", "--role", "be", "--be-port", str(self.be_ports[i]), "--be-http-port",
                         str(self.be_http[i]), env=env) for i in range(2)]
        endpoints = ",".join(f"127.0.0.1:{p}" for p in self.be_ports)
        self.fe = Node(root, "fe", "--role", "fe", "--http-port", str(self.fe_http), "--query-port",
                       str(self.fe_query), "--be-endpoints", endpoints, env=env)

    def start_bes(self) -> float:
        """Start both BEs; seconds until both answer health (their Spark may still be starting)."""
        t0 = time.monotonic()
        for node in self.bes:
            node.start()
        for node, port in zip(self.bes, self.be_http, strict=True):
            node.wait_healthy(port)
        return time.monotonic() - t0

    def restart_bes(self) -> float:
        for node in self.bes:
            node.kill()
        return self.start_bes()

    def wait_routed(self, timeout_s: float = 120) -> None:
        """Until the FE's plans route tablets to both BEs (its probes found them)."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = plan(f"http://127.0.0.1:{self.fe_http}", None)
            if len({be for part in body["partitions"].values() for be in part["routings"]}) == 2:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the FE routes to fewer than two BEs: {body['partitions']}"[:300])
            time.sleep(0.5)

    def start_fe(self) -> None:
        self.fe.start()
        self.fe.wait_healthy(self.fe_http)

    def stop(self) -> None:
        for node in (self.fe, *self.bes):
            node.kill()

    def begun_and_slow(self) -> tuple[int, dict[str, int]]:
        """Replies the BEs began early, and BE calls that took over 1 s by method, so far."""
        begun, slow = 0, {"open_scanner": 0, "get_next": 0, "close_scanner": 0}
        for port in self.be_http:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            for line in text.splitlines():
                if line.startswith("starscan_be_replies_begun_early_total"):
                    begun += int(float(line.split()[-1]))
                for method in slow:
                    if f'method="{method}"' not in line:
                        continue
                    if line.startswith("starscan_rpc_duration_seconds_count{"):
                        slow[method] += int(float(line.split()[-1]))
                    elif line.startswith("starscan_rpc_duration_seconds_bucket{") and 'le="1.0"' in line:
                        slow[method] -= int(float(line.split()[-1]))
        return begun, slow


def plan(fe_url: str, where: str | None, timeout_s: float = 600) -> dict:
    sql = f"select id, v from `{DB}`.`{TABLE}`" + (f" where {where}" if where else "")
    r = httpx.post(f"{fe_url}/api/{DB}/{TABLE}/_query_plan", json={"sql": sql}, auth=("root", ""), timeout=timeout_s)
    r.raise_for_status()
    return r.json()


def assign(body: dict, parallelism: int) -> list[tuple[str, list[int]]]:
    """The connector's split of a plan's tablets: each to the BE of its routings with the
    fewest so far, then each BE's tablets cut into parallelism / BEs scanners."""
    per_be: dict[str, list[int]] = {}
    for tablet, part in sorted(body["partitions"].items(), key=lambda kv: int(kv[0])):
        routings = part["routings"]
        for be in routings:
            per_be.setdefault(be, [])
        best = min(routings, key=lambda be: len(per_be[be]))
        per_be[best].append(int(tablet))
    readers = []
    each = max(1, parallelism // max(1, len(per_be)))
    for be, tablets in per_be.items():
        size = -(-len(tablets) // each)
        readers += [(be, tablets[i:i + size]) for i in range(0, len(tablets), size)]
    return readers


def timed_scan(conn, params, on_table) -> tuple[float, list[float], int]:
    """A Flink subtask's scan on one connection: open_scanner with ``params``, get_next until
    eos (``on_table(table, seconds since the open answered)`` for each reply's rows),
    close_scanner. Returns the open's seconds, each get_next's seconds and the rows read;
    raises on a status other than OK and on an empty batch before eos (a Flink reader would
    stop there and lose the rows after it)."""
    import pyarrow as pa

    from starscan.core.thrift_defs import wire

    t0 = time.perf_counter()
    opened = conn.open_scanner(params)
    opened_at = time.perf_counter()
    if opened.status.status_code != wire.TStatusCode.OK:
        raise RuntimeError(f"open_scanner: {opened.status}")
    nexts: list[float] = []
    offset = 0
    while True:
        t1 = time.perf_counter()
        res = conn.get_next(wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
        nexts.append(time.perf_counter() - t1)
        if res.status.status_code != wire.TStatusCode.OK:
            raise RuntimeError(f"get_next: {res.status}")
        if res.eos:
            break
        table = pa.ipc.open_stream(res.rows).read_all()
        if table.num_rows == 0:
            raise RuntimeError("an empty batch before eos: a Flink reader would stop here, rows lost")
        on_table(table, time.perf_counter() - opened_at)
        offset += table.num_rows
    conn.close_scanner(wire.TScanCloseParams(context_id=opened.context_id))
    return opened_at - t0, nexts, offset


def reader(be: str, tablets: list[int], opaqued: str, timeout_s: float, out, ready, go) -> None:
    """One subtask: open_scanner, get_next until eos, close; every call timed. The subtasks
    start reading together once each has imported what it reads with (``ready``, ``go``):
    eight interpreters importing pyarrow beside the BEs are not the BEs' slowness."""
    import pyarrow.compute as pc

    from starscan.client import thrift_client
    from starscan.core.thrift_defs import wire

    ready.release()
    go.wait(600)
    result = {"open": 0.0, "next": [], "rows": 0, "sum": 0, "error": None}
    host, port = be.split(":")

    def add(table, _seconds: float) -> None:
        result["sum"] += pc.sum(table.column("id")).as_py() or 0

    try:
        conn = thrift_client(host, int(port), timeout_s=timeout_s)
        try:
            result["open"], result["next"], result["rows"] = timed_scan(conn, wire.TScanOpenParams(
                cluster="default_cluster", database=DB, table=TABLE, tablet_ids=tablets, opaqued_query_plan=opaqued,
                user="root", passwd="", **FLINK), add)
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001 - reported: a timeout is what the run looks for
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    out.put(result)


def python_job(fe_url: str, where: str | None, timeout_s: float) -> dict:
    """One job of the connector's shape, its subtasks as processes."""
    started = time.monotonic()
    body = plan(fe_url, where)
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=reader, args=(be, tablets, body["opaqued_query_plan"], timeout_s, out, ready, go))
             for be, tablets in assign(body, PARALLELISM)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire(timeout=600)
    go.set()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r["error"] for r in results if r["error"]]
    return {"rows": sum(r["rows"] for r in results), "sum": sum(r["sum"] for r in results), "errors": errors,
            "max_open_s": max(r["open"] for r in results), "max_next_s": max((x for r in results for x in r["next"]),
                                                                             default=0.0),
            "over_1s": sum(1 for r in results for x in [r["open"], *r["next"]] if x > 1.0),
            "scanners": len(results), "seconds": time.monotonic() - started}


def real_job(runner: str, cluster: FlinkCluster, where: str | None) -> dict:
    """One job of the real StarRocks Flink connector (``runner``: its run script)."""
    started = time.monotonic()
    cmd = [runner, "--scan-url", f"127.0.0.1:{cluster.fe_http}", "--jdbc", f"127.0.0.1:{cluster.fe_query}",
           "--db", DB, "--table", TABLE, "--columns", "id BIGINT,v STRING", "--sum-column", "id",
           "--parallelism", str(PARALLELISM)] + (["--where", where] if where else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), "")
    try:
        got = json.loads(line)
    except json.JSONDecodeError:
        got = {"ok": False, "error": (proc.stderr or proc.stdout)[-300:]}
    return {"rows": int(got.get("rows") or 0), "sum": int(Decimal(str(got.get("sum") or 0))),
            "errors": [] if got.get("ok") else [str(got.get("error"))[:300]],
            "max_open_s": None, "max_next_s": None, "over_1s": None, "scanners": PARALLELISM,
            "seconds": time.monotonic() - started}


class Load:
    """``n`` busy processes (a second job on the machine) while the context is open."""

    def __init__(self, n: int):
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Load:
        spin = "import time\nend = time.time() + 1800\nwhile time.time() < end:\n    sum(range(10000))\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(self.n)]
        time.sleep(5 if self.n else 0)  # the load average climbs
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait(30)


def runs(warm: int, loaded: int) -> list[tuple[str, str | None]]:
    """(phase, filter) of each run after the cold one."""
    filters = list(FILTERS)
    return ([("warm", None)] * warm + [("filter (first run)", f) for f in filters]
            + [("loaded", None)] * max(0, loaded - 1) + ([("loaded", filters[1])] if loaded else []))


def run(args) -> tuple[list[list], dict]:
    """Every run of the shape: the table rows and the conditions for the report."""
    settings = dict(item.split("=", 1) for item in args.set)
    root = Path(tempfile.mkdtemp(prefix="starscan-flink-shape-"))
    write_id_table(root / "wh" / f"{DB}.db" / TABLE, TABLETS, ROWS_PER_TABLET)
    cluster = FlinkCluster(root, settings)
    job = ((lambda where: real_job(args.flink_run, cluster, where)) if args.flink_run
           else (lambda where: python_job(f"http://127.0.0.1:{cluster.fe_http}", where, args.timeout)))
    rows: list[list] = []

    def one(phase: str, where: str | None, load: int = 0) -> None:
        begun0, slow0 = cluster.begun_and_slow()
        load_avg = os.getloadavg()[0]
        with Load(load):
            load_avg = max(load_avg, os.getloadavg()[0])
            got = job(where)
            load_avg = max(load_avg, os.getloadavg()[0])
        begun, slow = cluster.begun_and_slow()
        want = expected(where)
        exact = not got["errors"] and (got["rows"], got["sum"]) == want
        over = {m: slow[m] - slow0[m] for m in slow}
        rows.append([len(rows) + 1, phase, where or "none", "yes" if exact else "NO", got["scanners"],
                     _s(got["max_open_s"]), _s(got["max_next_s"]), sum(over.values()),
                     ", ".join(f"{m} {n}" for m, n in over.items() if n) or "–", begun - begun0,
                     common.fmt(load_avg, 1), common.fmt(got["seconds"], 1),
                     "; ".join(sorted(set(got["errors"])))[:200] or (
                         "" if exact else f"rows {got['rows']} sum {got['sum']}, expected {want[0]} / {want[1]}")])
        common.log(f"run {rows[-1][0]} {phase} {where or ''}: exact={rows[-1][3]} {rows[-1][5:]}")

    try:
        common.log("starting the FE (its first plan waits for its Spark: the table's schema)")
        cluster.start_fe()
        up = cluster.start_bes()
        common.log(f"BEs answer health {up:.1f} s after their start")
        cluster.wait_routed()  # the FE knows the table and both BEs; then the BEs start again, cold
        for _ in range(args.cold_starts):
            cluster.restart_bes()
            cluster.wait_routed()
            one("cold (first job after the BEs start)", None)
        for phase, where in runs(args.warm_runs, args.loaded_runs):
            one(phase, where, args.load if phase == "loaded" else 0)
    finally:
        cluster.stop()
    exact = sum(1 for r in rows if r[3] == "yes")
    rows.append(["all", "", "", f"{exact}/{len(rows)}", "", max((r[5] for r in rows), key=_ms, default="–"),
                 max((r[6] for r in rows), key=_ms, default="–"), sum(r[7] for r in rows), "",
                 sum(r[9] for r in rows), "", "", ""])
    conditions = {
        "what": "the StarRocks Flink connector's shape: parallelism 8 over a table of 40 tablets on two BEs (20 and 20, "
                "4 scanners of 5 tablets per BE), Thrift calls with a "
                f"{args.timeout:g} s socket timeout and no retry, batch_size 1000; "
                + ("the real connector (" + args.flink_run + ")" if args.flink_run else
                   "each subtask a process with a thriftpy2 client"),
        "cluster": f"`starscan serve --role fe` and two `--role be` on 127.0.0.1, local[*] Spark each, settings "
                   f"{settings or 'default'}; cold: the first job right after the BEs answer health",
        "data": f"{DB}.{TABLE}: {TABLETS} Parquet files of {ROWS_PER_TABLET:,} rows (id bigint, v string), one tablet "
                "each; filters: " + ", ".join(FILTERS),
        "load": f"'loaded' runs: {args.load} busy Python processes beside the cluster (a second job)",
        "columns": "slowest calls are whole calls (a reply begun early, docs/protocol.md 3.1, may take longer than the "
                   "timeout without failing the reader); 'calls > 1 s' and 'begun early' from the BEs' metrics",
    }
    return rows, conditions


def _ms(cell: str) -> float:
    return float(cell.replace(",", "")) if cell not in ("–", "") else -1.0


def _s(x: float | None) -> str:
    return "–" if x is None else common.fmt(x * 1000, 0)


HEADER = ["run", "phase", "filter", "exact", "scanners", "slowest open_scanner ms", "slowest get_next ms",
          "BE calls > 1 s", "which", "replies begun early", "load avg", "job s", "errors"]

"""Aggregate scan throughput of 4 readers against one BE, two BEs, and a BE on a local Spark
standalone cluster (issue 18's benchmark; not a test).

Every node is a `starscan serve --role ...` process of its own, as deployed: one FE
(`--role fe --be-endpoints ...`) and one or two BEs on local Spark (`local[2]` each), or one
BE whose Spark is a standalone master and worker started from pyspark's own jars
(`spark-class ...deploy.master.Master` / `...deploy.worker.Worker`, 2 cores, 2 GiB). The
readers are 4 separate client processes (starscan.client), each reading the whole of
`select * from demo.lineitem`, started together; aggregate rows/s = all rows ÷ wall time.
Each configuration gets the same warm-up (one full read by one reader), then ``--repeats``
measured runs. Peak RSS is sampled per process (each node's Python and JVM).

    python bench/scale_out.py                 # lineitem scale 1 (reused from bench/scan_throughput.py's warehouse)
    python bench/scale_out.py --scale 0.1 --repeats 1 --no-append
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import common
import httpx
import psutil
from support.waits import free_port

REPO = Path(__file__).resolve().parents[1]
SQL = "select * from demo.lineitem"
HEADER = ["configuration", "readers", "runs", "rows/s (aggregate, best / median)", "MB/s (Arrow, best / median)",
          "wall s (median)", "failovers", "CPU s per M rows (BE Python / Spark: JVMs and Python workers / FE / readers)",
          "peak RSS per node (Python / JVM)"]


class Nodes:
    """The processes of one configuration; stopped together."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: dict[str, subprocess.Popen] = {}

    def spark_class(self, name: str, *args: str) -> None:
        import pyspark

        home = Path(pyspark.__file__).parent
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STARSCAN_", "PYSPARK_"))}
        env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(self.root / "spark-work"),
                   SPARK_LOG_DIR=str(self.root / "spark-logs"), PYSPARK_PYTHON=sys.executable)
        log = (self.root / f"{name}.log").open("w")
        self.procs[name] = subprocess.Popen([str(home / "bin" / "spark-class"), *args], cwd=self.root, env=env,
                                            stdout=log, stderr=subprocess.STDOUT)

    def serve(self, name: str, warehouse: Path, *args: str, env_extra: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
        env.update(SPARK_LOCAL_IP="127.0.0.1", STARSCAN_FLIGHT_SQL_PORT="0", STARSCAN_BE_FLIGHT_PORT="0", STARSCAN_PLAN_SECRET="bench-scale-out-secret-0123456789",
                   STARSCAN_STATE_DIR=str(self.root / "state"), **(env_extra or {}))
        log = (self.root / f"{name}.log").open("w")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "starscan", "serve", "--warehouse", str(warehouse), "--bind-host", "127.0.0.1",
             "--demo-scale", "0", *args], cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT)

    def wait_http(self, name: str, port: int, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited: {(self.root / f'{name}.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{name} did not start within {timeout_s:.0f} s")

    def wait_log(self, name: str, text: str, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in (self.root / f"{name}.log").read_text(errors="replace"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"{name}: no {text!r} within {timeout_s:.0f} s")

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


class NodeMemory:
    """Peak RSS of each node's Python process and of its JVM (the largest `java` child)."""

    def __init__(self, nodes: Nodes):
        self.nodes = nodes
        self.peaks: dict[str, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for name, proc in self.nodes.procs.items():
                try:
                    p = psutil.Process(proc.pid)
                    java = [c for c in p.children(recursive=True) if "java" in c.name()]
                    py = 0 if "java" in p.name() else p.memory_info().rss
                    jvm = max((c.memory_info().rss for c in java), default=p.memory_info().rss if "java" in p.name() else 0)
                except psutil.Error:
                    continue
                peak = self.peaks.setdefault(name, [0, 0])
                peak[0], peak[1] = max(peak[0], py), max(peak[1], jvm)

    def __enter__(self) -> NodeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def text(self) -> str:
        return "; ".join(f"{n} {common.gb(py) if py else '-'} / {common.gb(jvm) if jvm else '-'}"
                         for n, (py, jvm) in self.peaks.items() if not n.startswith("spark-"))


def tree_cpu_s(pid: int, own: bool | None = None) -> float:
    """CPU seconds used so far by a process and every process below it (Spark's JVM, its
    Python workers); ``own``: True, the process alone; False, only what is below it."""
    try:
        root = psutil.Process(pid)
        below = root.children(recursive=True)
    except psutil.Error:
        return 0.0
    return common.cpu_seconds([root] if own else below if own is False else [root, *below])


def read_all(fe: str, readers: int, timeout_s: float) -> dict:
    """``readers`` client processes, each reading the whole query; the aggregate."""
    spec = json.dumps({"fe": fe})
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--reader", spec],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(readers)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"reader failed: {err[-2000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    return {"wall_s": wall, "rows": sum(o["rows"] for o in outs), "bytes": sum(o["bytes"] for o in outs),
            "failovers": sum(o["failovers"] for o in outs), "reader_cpu_s": sum(o["cpu_s"] for o in outs)}


def reader(spec: dict) -> None:
    from starscan.client import ScanStats, StarscanClient

    client = StarscanClient(spec["fe"], "root", "", timeout_s=600.0)
    stats = ScanStats()
    start = time.time()
    for _batch in client.batches("demo", "lineitem", SQL, 4096, stats=stats):
        pass
    times = os.times()
    print(json.dumps({"start": start, "end": time.time(), "rows": stats.rows, "bytes": stats.bytes,
                      "failovers": stats.failovers, "cpu_s": times.user + times.system}))


def run_configuration(name: str, root: Path, warehouse: Path, bes: int, cluster: bool, args) -> list:
    nodes = Nodes(root / name.replace(" ", "-"))
    nodes.root.mkdir(parents=True, exist_ok=True)
    try:
        be_args: list[list[str]] = []
        extra: dict[str, str] = {"STARSCAN_WARMUP_ROWS": "0"}
        if cluster:
            master_port = free_port()
            nodes.spark_class("spark-master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", str(master_port), "--webui-port", str(free_port()))
            nodes.spark_class("spark-worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                              "--cores", "2", "--memory", "2g", "--webui-port", str(free_port()),
                              f"spark://127.0.0.1:{master_port}")
            nodes.wait_log("spark-worker", "Successfully registered with master")
            extra["STARSCAN_SPARK_CONF"] = "spark.executor.memory=1g; spark.cores.max=2"
            master = f"spark://127.0.0.1:{master_port}"
        else:
            master = "local[2]"
        ports = [(free_port(), free_port()) for _ in range(bes)]
        for i, (be_port, http_port) in enumerate(ports):
            nodes.serve(f"be{i + 1}", warehouse, "--role", "be", "--be-port", str(be_port), "--be-http-port",
                        str(http_port), "--spark-master", master, env_extra=extra)
            be_args.append([f"127.0.0.1:{be_port}"])
        fe_http = free_port()
        nodes.serve("fe", warehouse, "--role", "fe", "--http-port", str(fe_http), "--query-port", str(free_port()),
                    "--be-endpoints", ",".join(a[0] for a in be_args))
        for i, (_, http_port) in enumerate(ports):
            nodes.wait_http(f"be{i + 1}", http_port)
        nodes.wait_http("fe", fe_http)
        time.sleep(2 * 1.0 + 0.5)  # two probe rounds: every BE is in the routings
        fe = f"127.0.0.1:{fe_http}"
        plan = httpx.post(f"http://{fe}/api/demo/lineitem/_query_plan", json={"sql": SQL}, auth=("root", ""),
                          timeout=60).json()
        firsts = sorted({p["routings"][0] for p in plan["partitions"].values()})
        common.log(f"{name}: {len(plan['partitions'])} tablets, first routings {firsts}")
        with NodeMemory(nodes) as memory:
            common.log(f"{name}: warm-up (1 reader)")
            read_all(fe, 1, args.timeout)
            runs = []
            def cpu() -> dict[str, float]:
                out = {"be": 0.0, "spark": 0.0, "fe": 0.0}
                for n, p in nodes.procs.items():
                    if n.startswith("be"):
                        out["be"] += tree_cpu_s(p.pid, own=True)
                        out["spark"] += tree_cpu_s(p.pid, own=False)
                    elif n.startswith("spark-"):
                        out["spark"] += tree_cpu_s(p.pid)
                    else:
                        out["fe"] += tree_cpu_s(p.pid)
                return out

            for i in range(args.repeats):
                common.log(f"{name}: {args.readers} readers, run {i + 1}/{args.repeats}")
                before = cpu()
                run = read_all(fe, args.readers, args.timeout)
                after = cpu()
                run.update({f"{k}_cpu_s": after[k] - before[k] for k in after})
                runs.append(run)
        rows_s = [r["rows"] / r["wall_s"] for r in runs]
        mb_s = [r["bytes"] / r["wall_s"] / 1e6 for r in runs]
        best_r, med_r = common.best_median(rows_s)
        best_m, med_m = common.best_median(mb_s)
        _, wall = common.min_median([r["wall_s"] for r in runs])
        mrows = sum(r["rows"] for r in runs) / 1e6
        cpu = " / ".join(f"{sum(r[k] for r in runs) / mrows:.2f}" for k in ("be_cpu_s", "spark_cpu_s", "fe_cpu_s", "reader_cpu_s"))
        return [name, args.readers, len(runs), f"{best_r / 1e6:.2f} M / {med_r / 1e6:.2f} M",
                f"{best_m:.0f} / {med_m:.0f}", f"{wall:.1f}", sum(r["failovers"] for r in runs), cpu, memory.text()]
    finally:
        nodes.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale of demo.lineitem (default 1.0)")
    ap.add_argument("--warehouse", default="/tmp/starscan-bench-wh", help="warehouse dir, reused across runs")
    ap.add_argument("--tablet-target-bytes", type=int, default=32 << 20, help="Parquet bytes per lineitem file")
    ap.add_argument("--readers", type=int, default=4, help="reader processes (default 4)")
    ap.add_argument("--repeats", type=int, default=2, help="measured runs per configuration (default 2)")
    ap.add_argument("--configurations", default="1 BE,2 BEs,1 BE on a standalone cluster",
                    help="which to run (comma-separated, of the default list)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    ap.add_argument("--reader", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reader:
        reader(json.loads(args.reader))
        return 0

    env = common.environment()
    warehouse = Path(args.warehouse).resolve()
    sys.path.insert(0, str(Path(__file__).parent))
    from scan_throughput import lineitem_in

    files, nbytes = lineitem_in(warehouse, args.scale, args.tablet_target_bytes)
    configurations = {"1 BE": (1, False), "2 BEs": (2, False), "1 BE on a standalone cluster": (1, True)}
    wanted = [c.strip() for c in args.configurations.split(",") if c.strip()]
    rows = []
    root = Path(f"/tmp/starscan-scale-out-{os.getpid()}")
    for name in wanted:
        bes, cluster = configurations[name]
        rows.append(run_configuration(name, root, warehouse, bes, cluster, args))
    conditions = {
        "what": f"{args.readers} reader processes started together, each reading the whole result through the FE's "
                "plan and the BEs its routings name (StarscanClient defaults: failovers=3, so each scanner reads its "
                "splits one at a time in order); aggregate rows/s and Arrow MB/s = all rows or bytes ÷ wall time "
                "from the first reader's start to the last reader's end; best / median over the runs",
        "data": f"demo.lineitem scale {args.scale}: {files} Parquet files, {nbytes / 1e6:,.1f} MB, page cache warm",
        "nodes": "separate `starscan serve --role fe|be` processes on 127.0.0.1; BEs on local[2] Spark, or one BE whose "
                 "Spark is a standalone master + one worker (2 cores, 2 GiB; executor 1 GiB) from pyspark's jars; "
                 "warmup_rows=0 and one warm-up read by one reader per configuration",
        "limit": "this machine has 2 cores: every BE, its Spark, the FE and the 4 readers share them, so more BEs "
                 "here measure the overhead of scale-out, not its gain (docs/scaling.md)",
    }
    common.report(f"scale_out: {args.readers} readers, one BE vs two vs a standalone cluster, lineitem scale {args.scale}",
                  conditions, common.markdown_table(HEADER, rows) + "\n", env, not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())

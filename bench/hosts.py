"""What the paths through the FE cost across hosts (issue 70's benchmark; not a test): the full
and the filtered scan of lineitem from a reader host through the direct routings (the
bundled client reading the BEs), the FE's Flight SQL proxy (ADBC) and the FE's Thrift relay
(the bundled client reading the relay's ports), beside the same scans with every node on
127.0.0.1.

The hosts are network namespaces (tests/support/netns.py; root only): two BE hosts (`serve
--role be`, local[2] Spark each), an FE host running the direct FE (its Flight SQL proxy on)
and the relaying FE, and a reader host. Each reader is a process of its own on the reader
host (tests/support/host_reader.py), timed from its first call to its last row (its imports
before the clock). Each path gets one warm-up read (the BEs' page cache warm), then
``--repeats`` measured reads. CPU is each process's user + system time over the reads.

    sudo python bench/hosts.py                  # lineitem scale 1, reused from bench/scan_throughput.py's warehouse
    sudo python bench/hosts.py --scale 0.1 --repeats 1 --no-append
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import common
import psutil
from support.netns import Network, why_not_available
from support.nodes import Node
from support.waits import free_port

REPO = Path(__file__).resolve().parents[1]
READER = REPO / "tests" / "support" / "host_reader.py"
SECRET = "bench-hosts-secret-0123456789abcdef"
QUERIES = {"full": "select * from demo.lineitem",
           "filtered": "select l_orderkey, l_quantity, l_extendedprice, l_shipdate from demo.lineitem "
                       "where l_shipdate >= '1998-06-01'"}
#: Each path, and the direct path of its protocol it is set beside.
PATHS = {"Thrift, direct routings": None, "Thrift relay at the FE": "Thrift, direct routings",
         "Flight SQL, endpoints from the BEs": None, "Flight SQL proxy at the FE": "Flight SQL, endpoints from the BEs"}
HEADER = ["topology", "path", "scan", "rows", "rows/s (best / median)", "MB/s (Arrow, best / median)",
          "× direct, same protocol (median)", "CPU ms per M rows: FE (the FE serving the path) / BEs / reader"]


class Deployment:
    """Two BEs, the direct FE and the relaying FE, on test hosts or on 127.0.0.1."""

    def __init__(self, root: Path, warehouse: Path, on_hosts: bool):
        self.root, self.on_hosts = root, on_hosts
        root.mkdir(parents=True, exist_ok=True)
        if not (root / "wh").exists():
            (root / "wh").symlink_to(warehouse)
        self.net = Network(f"sb{os.getpid() % 10000}", 9) if on_hosts else None
        hosts = {n: self.net.host(n) for n in ("be1", "be2", "fe", "reader")} if self.net else {}
        self.reader_host = hosts.get("reader")
        env = {"STARSCAN_PLAN_SECRET": SECRET, "STARSCAN_BE_PROBE_INTERVAL_S": "1", "STARSCAN_WARMUP_ROWS": "0"}

        def ports() -> dict[str, int]:
            names = ("be_port", "be_http_port", "be_flight_port", "http_port", "query_port", "flight_sql_port")
            if on_hosts:
                return dict(zip(names, (9060, 8040, 9419, 8030, 9030, 9408), strict=True))
            return {n: free_port() for n in names}

        self.bes = []
        self.be_ports = []
        for name in ("be1", "be2"):
            p = ports()
            self.be_ports.append(p)
            self.bes.append(Node(root, name, "--role", "be", "--be-port", str(p["be_port"]), "--be-http-port",
                                 str(p["be_http_port"]), "--spark-master", "local[2]", host=hosts.get(name),
                                 env={**env, "STARSCAN_BE_FLIGHT_PORT": str(p["be_flight_port"])}))
        addresses = [be.address for be in self.bes]
        thrift = ",".join(f"{a}:{p['be_port']}" for a, p in zip(addresses, self.be_ports, strict=True))
        flight = ",".join(f"{a}:{p['be_flight_port']}" for a, p in zip(addresses, self.be_ports, strict=True))
        self.fe_ports, self.gate_ports = ports(), ports()
        if on_hosts:
            self.gate_ports.update(http_port=8031, query_port=9031, flight_sql_port=9409)
        self.fe = Node(root, "fe", "--role", "fe", "--be-endpoints", thrift, "--http-port", str(self.fe_ports["http_port"]),
                       "--query-port", str(self.fe_ports["query_port"]), host=hosts.get("fe"),
                       env={**env, "STARSCAN_BE_FLIGHT_ENDPOINTS": flight,
                            "STARSCAN_FLIGHT_SQL_PORT": str(self.fe_ports["flight_sql_port"])})
        self.gate = Node(root, "gateway", "--role", "fe", "--be-endpoints", thrift, "--http-port",
                         str(self.gate_ports["http_port"]), "--query-port", str(self.gate_ports["query_port"]),
                         host=hosts.get("fe"),
                         env={**env, "STARSCAN_BE_FLIGHT_ENDPOINTS": flight, "STARSCAN_FLIGHT_SQL_PORT": "-1",
                              "STARSCAN_THRIFT_RELAY_PORT": "9070" if on_hosts else "0"})
        self.nodes = [*self.bes, self.fe, self.gate]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        for node, port in zip(self.nodes, [p["be_http_port"] for p in self.be_ports] +
                              [self.fe_ports["http_port"], self.gate_ports["http_port"]], strict=True):
            node.wait_healthy(port, timeout_s=600)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.net is not None:
            self.net.close()

    def job(self, path: str, sql: str) -> tuple[str, dict, Node]:
        """The reader's mode and job for ``path``, and the FE node that serves it (its
        flight_proxy set for the path)."""
        base = {"db": "demo", "table": "lineitem", "sql": sql, "count_only": True, "timeout_s": 120}
        fe_url = f"http://{self.fe.address}:{self.fe_ports['http_port']}"
        if path.startswith("Flight"):
            self.set_flight_proxy(fe_url, "proxy" in path)
            return "flight_sql", {**base, "uri": f"grpc://{self.fe.address}:{self.fe_ports['flight_sql_port']}"}, self.fe
        if "relay" in path:
            return "client", {**base, "fe": f"http://{self.gate.address}:{self.gate_ports['http_port']}"}, self.gate
        return "client", {**base, "fe": fe_url}, self.fe

    def set_flight_proxy(self, fe_url: str, on: bool) -> None:
        import httpx
        from support.servers import basic

        def post() -> httpx.Response:
            return httpx.post(f"{fe_url}/api/update_config", params={"flight_proxy": str(on).lower()},
                              headers={"Authorization": basic("root", "")}, timeout=30)

        fe_host = self.net.hosts["fe"] if self.net is not None else None
        r = fe_host.run_here(post) if fe_host is not None else post()
        r.raise_for_status()

    def read(self, mode: str, job: dict) -> dict:
        argv = [sys.executable, str(READER), mode, json.dumps(job)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
        proc = subprocess.run(self.reader_host.command(*argv) if self.reader_host else argv, env=env,
                              capture_output=True, text=True, timeout=1800)
        last = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
        if proc.returncode != 0 or "error" in last:
            raise RuntimeError(f"{mode} read failed: {last} {proc.stderr[-2000:]}")
        return last


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def measure(dep: Deployment, topology: str, repeats: int) -> list[list]:
    rows = []
    medians: dict[tuple[str, str], float] = {}
    for scan, sql in QUERIES.items():
        for path, beside in PATHS.items():
            mode, job, serving = dep.job(path, sql)
            dep.read(mode, job)  # warm-up: the page cache, the FE's and the BEs' first calls
            rates, mbs, fe_cpu, be_cpu, reader_cpu, n_rows = [], [], [], [], [], 0
            for _ in range(repeats):
                fe0, be0 = _cpu_s([serving.proc.pid]), _cpu_s([b.proc.pid for b in dep.bes])
                reader0 = os.times()
                got = dep.read(mode, job)
                reader1 = os.times()
                fe_cpu.append(_cpu_s([serving.proc.pid]) - fe0)
                be_cpu.append(_cpu_s([b.proc.pid for b in dep.bes]) - be0)
                reader_cpu.append((reader1.children_user - reader0.children_user) +
                                  (reader1.children_system - reader0.children_system))
                n_rows = got["rows"]
                rates.append(got["rows"] / got["seconds"])
                mbs.append(got["bytes"] / got["seconds"] / 1e6)
            best, median = common.best_median(rates)
            mb_best, mb_median = common.best_median(mbs)
            medians[scan, path] = median
            per_m = 1e9 / max(n_rows, 1)  # ms per million rows, from seconds per read
            rows.append([topology, path, scan, f"{n_rows:,}", f"{best / 1e6:.2f} / {median / 1e6:.2f} M",
                         f"{mb_best:,.0f} / {mb_median:,.0f}", f"{median / medians[scan, beside]:.2f}×" if beside else "1.00×",
                         f"{sorted(fe_cpu)[len(fe_cpu) // 2] * per_m:,.0f} / {sorted(be_cpu)[len(be_cpu) // 2] * per_m:,.0f}"
                         f" / {sorted(reader_cpu)[len(reader_cpu) // 2] * per_m:,.0f}"])
            common.log(" | ".join(rows[-1]))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor of demo.lineitem")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tablet-target-bytes", type=int, default=32 << 20)
    ap.add_argument("--warehouse", default="/tmp/starscan-bench-wh", help="warehouse dir, reused across runs")
    ap.add_argument("--topologies", default="hosts,loopback")
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    args = ap.parse_args(argv)
    topologies = [t.strip() for t in args.topologies.split(",") if t.strip()]
    if "hosts" in topologies and (why := why_not_available()) is not None:
        print(f"bench/hosts.py needs test hosts: {why}", file=sys.stderr)
        return 2
    missing = common.missing_modules(["adbc_driver_flightsql", "psutil"])
    if missing:
        print(f"bench/hosts.py needs {', '.join(missing)}: pip install -e '.[test]'", file=sys.stderr)
        return 2
    env = common.environment()
    warehouse = Path(args.warehouse).resolve()
    sys.path.insert(0, str(Path(__file__).parent))
    from scan_throughput import lineitem_in

    files, nbytes = lineitem_in(warehouse, args.scale, args.tablet_target_bytes)
    rows = []
    for topology in topologies:
        root = Path(f"/tmp/starscan-bench-hosts-{os.getpid()}-{topology}")
        dep = Deployment(root, warehouse, topology == "hosts")
        try:
            common.log(f"starting the {topology} deployment")
            dep.start()
            time.sleep(2)  # the FEs' probes find both BEs
            rows += measure(dep, "separate hosts" if topology == "hosts" else "127.0.0.1", args.repeats)
        finally:
            dep.stop()
    conditions = {
        "what": "one reader process at a time on the reader host, each reading the whole result; rows/s and Arrow "
                "MB/s from the reader's first call to its last row; best / median of the runs after one warm-up "
                "read per path; × direct: the path's median over the direct routings' median for the same scan",
        "data": f"demo.lineitem scale {args.scale}: {files} Parquet files, {nbytes / 1e6:,.1f} MB, page cache warm",
        "nodes": "two `serve --role be` (local[2] Spark each), the direct FE (flight_proxy on) and the relaying FE "
                 "(thrift_relay_port), each a process of its own; 'separate hosts': each BE, the FEs and the reader "
                 "on a network namespace of its own joined by a bridge (veth; the same kernel and 2 cores)",
        "readers": "the bundled client (StarscanClient: tablets per first routing, scanners in parallel) for the "
                   "direct routings and the relay; ADBC's Flight SQL driver for the proxy",
    }
    common.report(f"hosts: direct routings, the FE's Flight SQL proxy and its Thrift relay, lineitem scale {args.scale}",
                  conditions, common.markdown_table(HEADER, rows) + "\n", env, not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())

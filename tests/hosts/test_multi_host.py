"""starscan across hosts: every process on a test host of its own (Linux network namespaces,
tests/support/netns.py), as a deployment puts them on machines.

    master   the Spark standalone master
    be1, be2 a BE each (`serve --role be`, on the cluster) and a Spark worker each
    fe       the FE readers inside reach (direct routings), and the gateway FE (its Thrift
             relay and Flight SQL proxy) on a second link, to
    outside  a reader host that reaches the fe host only (as a reader outside a Kubernetes
             cluster reaches its ingress): no route to any other host
    reader   a reader host that reaches every host

Every node keeps its settings' default ports (each host has its own), binds and advertises
its host's address, and shares the warehouse, the state folder and the plan secret with the
others (one filesystem). The readers run on their hosts as processes of their own
(tests/support/host_reader.py) and read an id table (each id once): exact means every id
once. A BE host "cut off" has its link taken down at the bridge: its processes run on,
unreachable, as when a machine's network fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.netns import Network, why_not_available
from support.nodes import Node, spark_daemon, write_id_table
from support.waits import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.hosts]

FILES, ROWS_PER_FILE = 8, 100_000
ROWS = FILES * ROWS_PER_FILE
SECRET = "multi-host-test-secret-0123456789abcdef"
READER = Path(__file__).resolve().parents[1] / "support" / "host_reader.py"
SQL = "select id, v from big.ids"
# Spark finds an executor on a cut-off host lost within seconds, not its default two minutes,
# so the other BE's tasks there are run again elsewhere (their scans go on meanwhile). The
# drivers' RPC connections keep their own timeout (as long as the default's): a BE cut off
# from the master for longer than that has its application removed by the master, and its
# driver then waits for the master for good, with no executors (docs/scaling.md).
SPARK_TIMEOUTS = ("spark.network.timeout=10s; spark.network.timeoutInterval=5s; spark.executor.heartbeatInterval=1s; "
                  "spark.rpc.io.connectionTimeout=120s; "
                  "spark.executor.memory=512m; spark.executor.cores=1; spark.cores.max=2")


def _unavailable() -> str | None:
    why = why_not_available()
    if why is not None and (os.environ.get("STARSCAN_HOSTS_TIER") == "required" or os.environ.get("CI")):
        pytest.fail(f"the multi-host tier must run here (CI, STARSCAN_HOSTS_TIER=required) but cannot: {why}")
    return why


def _spark_class(host, root: Path, name: str, *args: str) -> subprocess.Popen:
    """The master or a worker on ``host``; a lost worker is noticed within 10 s."""
    return spark_daemon(root, name, *args, host=host, work_dir=root / f"work-{name}",
                        daemon_opts="-Dspark.worker.timeout=10")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, worker_id):
    why = _unavailable()
    if why is not None:
        pytest.skip(f"the multi-host tier needs test hosts: {why}")
    root = tmp_path_factory.mktemp("hosts")
    write_id_table(root / "wh" / "big.db" / "ids", FILES, ROWS_PER_FILE)
    index = int(worker_id[2:]) if worker_id.startswith("gw") else 0
    net = Network(f"ss{os.getpid() % 10000}", index)
    procs: list[subprocess.Popen] = []
    nodes: list[Node] = []
    try:
        master, be1, be2, fe, reader = (net.host(n) for n in ("master", "be1", "be2", "fe", "reader"))
        outside = net.lone_host("outside")
        gate_address, _ = net.private_link(fe, outside)
        procs.append(_spark_class(master, root, "master", "org.apache.spark.deploy.master.Master", "--host",
                                  master.address, "--port", "7077", "--webui-port", "8080"))
        for be in (be1, be2):
            procs.append(_spark_class(be, root, f"worker-{be.name}", "org.apache.spark.deploy.worker.Worker",
                                      "--host", be.address, "--cores", "2", "--memory", "2g", "--webui-port", "8081",
                                      f"spark://{master.address}:7077"))
        for be in (be1, be2):
            wait_until(lambda be=be: "Successfully registered with master" in (root / f"worker-{be.name}.log").read_text(),
                       timeout_s=180, interval_s=0.5, what=f"the Spark worker on {be.name} to register")
        env = {"STARSCAN_PLAN_SECRET": SECRET, "STARSCAN_TABLET_TARGET_BYTES": str(256 << 10),
               "STARSCAN_BE_PROBE_INTERVAL_S": "1"}
        bes = [Node(root, be.name, "--role", "be", "--spark-master", f"spark://{master.address}:7077", host=be,
                    env={**env, "STARSCAN_SCAN_LOCAL_READS": "false", "STARSCAN_SCAN_LOCAL_READ_SLOTS": "0",
                         "STARSCAN_SPARK_CONF": SPARK_TIMEOUTS})
               for be in (be1, be2)]
        thrift = ",".join(f"{be.address}:9060" for be in (be1, be2))
        flight = ",".join(f"{be.address}:9419" for be in (be1, be2))
        direct = Node(root, "fe", "--role", "fe", "--be-endpoints", thrift, host=fe,
                      env={**env, "STARSCAN_BE_FLIGHT_ENDPOINTS": flight})
        gateway = Node(root, "gateway", "--role", "fe", "--be-endpoints", thrift, "--http-port", "8031",
                       "--query-port", "9031", host=fe, address=gate_address,
                       env={**env, "STARSCAN_BE_FLIGHT_ENDPOINTS": flight, "STARSCAN_FLIGHT_SQL_PORT": "9409",
                            "STARSCAN_THRIFT_RELAY_PORT": "9070", "STARSCAN_THRIFT_RELAY_TIMEOUT_S": "3"})
        nodes = [*bes, direct, gateway]
        for node in nodes:
            node.start()
        for node, port in zip(nodes, [8040, 8040, 8030, 8031], strict=True):
            node.wait_healthy(port)
        yield {"net": net, "root": root, "bes": bes, "be_hosts": [be1, be2], "fe": fe, "reader": reader,
               "outside": outside, "master": master, "direct": direct, "gateway": gateway,
               "fe_url": f"http://{fe.address}:8030", "gate_url": f"http://{gate_address}:8031",
               "gate": gate_address, "be_endpoints": thrift.split(",")}
    finally:
        for node in nodes:
            node.kill()
        for proc in procs:
            proc.kill()
            proc.wait(60)
        net.close()


def _read(host, mode: str, job: dict, on_batch=None, timeout_s: float = 300) -> dict:
    """Run a reader on ``host``; ``on_batch(n)`` as it reports batch n. Its last line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    proc = subprocess.Popen(host.command(sys.executable, str(READER), mode, json.dumps(job)), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    last: dict = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            last = json.loads(line)
            if "batch" in last and on_batch is not None:
                on_batch(last["batch"])
        proc.wait()
    finally:
        timer.cancel()
    assert proc.returncode == 0 and "error" not in last, f"{mode} on {host.name}: {last} {proc.stderr.read()[-3000:]}"
    return last


def _exact(result: dict) -> None:
    assert (result["rows"], result["distinct"], result["sum"]) == (ROWS, ROWS, ROWS * (ROWS - 1) // 2), result


def _job(**more) -> dict:
    return {"db": "big", "table": "ids", "sql": SQL, **more}


def _both_bes_up(hosts) -> None:
    for node, host in zip(hosts["bes"], hosts["be_hosts"], strict=True):
        hosts["net"].mend(host)
        if not node.alive():
            node.start()
            node.wait_healthy(8040)

    def routed() -> bool:
        plan = _read(hosts["reader"], "plan", _job(fe=hosts["fe_url"]))
        return plan["routings"] == sorted(hosts["be_endpoints"])

    wait_until(routed, timeout_s=120, interval_s=1, what="both BEs in the routings")


def test_nodes_advertise_their_hosts_addresses_and_bind_where_their_settings_say(hosts):
    direct = _read(hosts["reader"], "plan", _job(fe=hosts["fe_url"]))
    assert direct["routings"] == sorted(hosts["be_endpoints"])
    relayed = _read(hosts["outside"], "plan", _job(fe=hosts["gate_url"]))
    assert relayed["routings"] == [f"{hosts['gate']}:9070", f"{hosts['gate']}:9071"]
    for node, host in [*zip(hosts["bes"], hosts["be_hosts"], strict=True), (hosts["direct"], hosts["fe"]),
                       (hosts["gateway"], hosts["fe"])]:
        mine = [(address, port) for address, port, pid in host.listeners() if pid == node.proc.pid]
        assert mine and all(address == node.address for address, _ in mine if address not in ("127.0.0.1", "::1")), \
            (node.name, mine)
        assert not [a for a, _ in mine if a in ("0.0.0.0", "*", "::")], (node.name, mine)


def test_the_executors_on_the_worker_hosts_push_every_row_to_the_bes_across_the_network(hosts):
    """The BEs read nothing themselves (scan_local_reads off): every row comes from an
    executor, and each BE has executors on both worker hosts, so rows cross hosts."""
    _both_bes_up(hosts)
    _exact(_read(hosts["reader"], "client", _job(fe=hosts["fe_url"])))
    drivers_served: dict[str, set[str]] = {}
    for be in hosts["be_hosts"]:
        for stderr in (hosts["root"] / f"work-worker-{be.name}").glob("app-*/*/stderr"):
            text = stderr.read_text(errors="replace")
            if "Executor: Running task" in text:
                driver = next((b.address for b in hosts["be_hosts"] if f"@{b.address}:" in text), None)
                drivers_served.setdefault(be.name, set()).add(str(driver))
    crossed = [(worker, driver) for worker, drivers in drivers_served.items() for driver in drivers
               if driver != next(b.address for b in hosts["be_hosts"] if b.name == worker)]
    assert crossed, drivers_served
    for node in hosts["bes"]:  # the push listener, started with the first scan, where the tasks reach it
        assert f"(tasks connect to {node.address})" in (hosts["root"] / f"{node.name}.log").read_text()


def _set(host, url: str, **values: str) -> None:
    import httpx
    from support.servers import basic

    r = host.run_here(lambda: httpx.post(f"{url}/api/update_config", params=values,
                                         headers={"Authorization": basic("root", "")}, timeout=30))
    assert r.status_code == 200, r.text


def _tasks_run(hosts) -> dict[str, int]:
    """Spark tasks each worker host's executors have started, of every BE."""
    return {be.name: sum(p.read_text(errors="replace").count("Executor: Running task")
                         for p in (hosts["root"] / f"work-worker-{be.name}").glob("app-*/*/stderr"))
            for be in hosts["be_hosts"]}


def test_the_sql_engines_tasks_run_on_the_worker_hosts_and_push_every_row(hosts):
    _both_bes_up(hosts)
    for be in hosts["be_hosts"]:
        _set(hosts["reader"], f"http://{be.address}:8040", scan_engine="sql")
    try:
        before = _tasks_run(hosts)
        _exact(_read(hosts["reader"], "client", _job(fe=hosts["fe_url"])))
        wait_until(lambda: all(_tasks_run(hosts)[h] > before[h] for h in before), timeout_s=60, interval_s=1,
                   what="tasks on both worker hosts (their executors copy their logs a moment later)")
    finally:
        for be in hosts["be_hosts"]:
            _set(hosts["reader"], f"http://{be.address}:8040", scan_engine="auto")


def test_without_the_flight_proxy_each_endpoint_names_its_bes_flight_address(hosts):
    """flight_proxy off: ADBC reads each endpoint from the BE location it names, on the
    BE hosts' addresses (their Flight ports), not the FE's."""
    _both_bes_up(hosts)
    _set(hosts["reader"], hosts["fe_url"], flight_proxy="false")
    try:
        _exact(_read(hosts["reader"], "flight_sql", _job(uri=f"grpc://{hosts['fe'].address}:9408")))
        locations = _read(hosts["reader"], "flight_locations", _job(uri=f"grpc://{hosts['fe'].address}:9408"))
        assert set(locations["locations"]) == {f"grpc://{be.address}:9419" for be in hosts["be_hosts"]}, locations
    finally:
        _set(hosts["reader"], hosts["fe_url"], flight_proxy="true")


@pytest.mark.parametrize("mode, job", [
    ("client", {}),
    ("thrift", {"retries": 3, "timeout_s": 60}),   # the Spark connector's shape
    ("thrift", {"retries": 0, "timeout_s": 1}),    # the Flink connector's: one try, 1 s
    ("mysql", {}),
    ("flight_sql", {}),
])
def test_readers_on_a_host_that_reaches_every_host_read_exactly(hosts, mode, job):
    _both_bes_up(hosts)
    if mode == "mysql":
        job = {**job, "address": f"{hosts['fe'].address}:9030"}
    if mode == "flight_sql":
        job = {**job, "uri": f"grpc://{hosts['fe'].address}:9408"}
    result = _read(hosts["reader"], mode, _job(fe=hosts["fe_url"], **job))
    _exact(result)
    if mode == "thrift":
        assert result["routings"] == sorted(hosts["be_endpoints"])


def test_the_host_that_reaches_only_the_fe_reads_through_its_relay_and_its_flight_proxy(hosts):
    _both_bes_up(hosts)
    with pytest.raises(AssertionError, match="cannot be reached|ConnectError|timed out|unreachable"):
        _read(hosts["outside"], "client", _job(fe=hosts["fe_url"], timeout_s=3), timeout_s=60)  # no route to the FE's inside address
    _exact(_read(hosts["outside"], "flight_sql", _job(uri=f"grpc://{hosts['gate']}:9409")))
    _exact(_read(hosts["outside"], "client", _job(fe=hosts["gate_url"])))
    flink_like = _read(hosts["outside"], "thrift", _job(fe=hosts["gate_url"], retries=0, timeout_s=1))
    _exact(flink_like)
    assert flink_like["routings"] == [f"{hosts['gate']}:9070", f"{hosts['gate']}:9071"]


def test_a_be_host_cut_off_mid_scan_is_a_lost_be_and_rejoins_when_its_link_is_back(hosts):
    """The bundled client on direct routings moves its scanner to the next routing; the
    BE comes back into the routings when its link does."""
    _both_bes_up(hosts)
    net, victim = hosts["net"], hosts["be_hosts"][0]

    def cut(n: int) -> None:
        if n == 3:
            net.cut(victim)

    result = _read(hosts["reader"], "client", _job(fe=hosts["fe_url"], timeout_s=5), on_batch=cut)
    _exact(result)
    assert result["failovers"] >= 1, result
    wait_until(lambda: _read(hosts["reader"], "plan", _job(fe=hosts["fe_url"]))["routings"]
               == [hosts["be_endpoints"][1]], timeout_s=60, interval_s=1, what="the cut BE to leave the routings")
    net.mend(victim)
    _both_bes_up(hosts)


@pytest.mark.parametrize("how", ["cut", "kill"])
def test_through_the_relay_a_single_try_reader_loses_nothing_when_its_be_is_lost(hosts, how):
    """The Flink connector's shape (one try per call, a 1 s timeout, its first routing only)
    through the FE's relay: the BE behind its relay port is cut off, or SIGKILLed, mid-scan;
    the relay resumes the scanner on the other BE at the reader's offset."""
    _both_bes_up(hosts)
    victim = 0

    def lose(n: int) -> None:
        if n == 3:
            if how == "cut":
                hosts["net"].cut(hosts["be_hosts"][victim])
            else:
                hosts["bes"][victim].kill()

    started = time.monotonic()
    result = _read(hosts["outside"], "thrift", _job(fe=hosts["gate_url"], retries=0, timeout_s=1), on_batch=lose)
    _exact(result)
    assert result["reconnects"] == 0, result
    log = hosts["gateway"].log()
    assert "goes on on the BE" in log, log
    print(f"read through the relay with its BE {how}: {time.monotonic() - started:.1f} s")
    _both_bes_up(hosts)

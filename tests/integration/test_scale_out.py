"""Separate FE and BE processes (`starscan serve --role fe|be`), as a user deploys them: one
FE and two BEs on 127.0.0.1 sharing a warehouse, the users file and the plan secret. Plans
route tablets over both BEs; a BE killed with SIGKILL in the middle of a scan costs the
bundled client nothing (it goes on on the other BE, without a duplicate row); the dead BE
leaves the routings and comes back when started again, and serves plans made before."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from support.nodes import Node, write_id_table
from support.servers import basic
from support.waits import free_port, wait_until

pytestmark = pytest.mark.slow  # starts `starscan serve` processes of its own

FILES, ROWS_PER_FILE = 6, 40_000
SECRET = "scale-out-test-secret-0123456789abcdef"
# A table whose streams outlast what gRPC buffers between a BE, the FE's proxy and a client
# that has read one batch (files, rows per file: ~50 MB of Arrow).
LONGER = (8, 400_000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale_out")
    write_id_table(root / "wh" / "big.db" / "events", FILES, ROWS_PER_FILE)
    write_id_table(root / "wh" / "big.db" / "longer", *LONGER)
    be_ports = [free_port(), free_port()]
    be_http = [free_port(), free_port()]
    be_flight = [free_port(), free_port()]
    fe_http, fe_query, fe_flight = free_port(), free_port(), free_port()
    env = {"STARSCAN_PLAN_SECRET": SECRET,
           "STARSCAN_TABLET_TARGET_BYTES": str(256 << 10)}  # a tablet per file or so: both BEs get some
    # be1 leaves transparent huge pages as the machine has them; be0 turns them off (the default).
    bes = [Node(root, f"be{i}", "--role", "be", "--be-port", str(be_ports[i]), "--be-http-port", str(be_http[i]),
                "--spark-master", "local[2]", env={**env, "STARSCAN_BE_FLIGHT_PORT": str(be_flight[i]),
                                                   **({"STARSCAN_BE_TRANSPARENT_HUGE_PAGES": "true"} if i else {})})
           for i in range(2)]
    endpoints = ",".join(f"127.0.0.1:{p}" for p in be_ports)
    fe = Node(root, "fe", "--role", "fe", "--http-port", str(fe_http), "--query-port", str(fe_query),
              "--be-endpoints", endpoints,
              env={**env, "STARSCAN_FLIGHT_SQL_PORT": str(fe_flight),
                   "STARSCAN_BE_FLIGHT_ENDPOINTS": ",".join(f"127.0.0.1:{p}" for p in be_flight)})
    # A second FE relays the BEs' Thrift scans (thrift_relay_port 0: a free port per BE).
    relay_http = free_port()
    relay_fe = Node(root, "relay_fe", "--role", "fe", "--http-port", str(relay_http), "--query-port", str(free_port()),
                    "--be-endpoints", endpoints,
                    env={**env, "STARSCAN_FLIGHT_SQL_PORT": "-1", "STARSCAN_THRIFT_RELAY_PORT": "0"})
    nodes = [*bes, fe, relay_fe]
    for node in nodes:
        node.start()
    try:
        for node, port in zip(nodes, [*be_http, fe_http, relay_http], strict=True):
            node.wait_healthy(port)
        yield {"root": root, "fe": fe, "bes": bes, "fe_url": f"http://127.0.0.1:{fe_http}",
               "relay_url": f"http://127.0.0.1:{relay_http}", "relay_fe": relay_fe,
               "be_endpoints": [f"127.0.0.1:{p}" for p in be_ports], "be_http": be_http,
               "flight_uri": f"grpc://127.0.0.1:{fe_flight}", "be_flight": [f"grpc://127.0.0.1:{p}" for p in be_flight]}
    finally:
        for node in nodes:
            node.kill()


def _expected() -> Counter:
    return Counter((i, str(i)) for i in range(FILES * ROWS_PER_FILE))


def _plan(cluster, fe: str = "fe_url") -> dict:
    r = httpx.post(f"{cluster[fe]}/api/big/events/_query_plan", json={"sql": "select id, v from big.events"},
                   headers={"Authorization": basic("root", "")}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_tablets_are_routed_over_both_bes_and_a_full_read_equals_spark(cluster, spark):
    from starscan.client import StarscanClient

    plan = _plan(cluster)
    firsts = Counter(info["routings"][0] for info in plan["partitions"].values())
    assert set(firsts) == set(cluster["be_endpoints"]), firsts  # each BE is first for some tablets
    assert all(sorted(info["routings"]) == sorted(cluster["be_endpoints"]) for info in plan["partitions"].values())
    got = StarscanClient(cluster["fe_url"]).read("big", "events", "select id, v from big.events", plan=plan)
    want = spark.read.parquet(str(cluster["root"] / "wh" / "big.db" / "events")).collect()
    assert Counter(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) == \
        Counter((r["id"], r["v"]) for r in want) == _expected()
    for port in cluster["be_http"]:  # a BE node answers metrics on its own HTTP port
        assert "starrocks_be_active_scan_context_count" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text


def test_an_fe_only_node_answers_a_mysql_select_with_every_row_from_the_bes(cluster):
    """The FE of its own (no BE in its process) reads a plain SELECT's tablets from both BEs'
    Flight ports and streams them to the MySQL client: every row, once; a query it answers on
    Spark SQL agrees."""
    import pymysql

    port = int(cluster["fe"].args[cluster["fe"].args.index("--query-port") + 1])
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", read_timeout=300) as conn, \
            conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute("select id, v from big.events")
        assert Counter(cur.fetchall()) == _expected()
        cur.execute("select count(*), count(distinct v) from big.events")
        assert list(cur.fetchall()) == [(FILES * ROWS_PER_FILE, FILES * ROWS_PER_FILE)]


def test_a_be_killed_mid_scan_costs_the_client_nothing_and_comes_back(cluster, caplog):
    from starscan.client import ScanStats, StarscanClient

    client = StarscanClient(cluster["fe_url"], timeout_s=30)
    plan = _plan(cluster)
    first = next(iter(plan["partitions"].values()))["routings"][0]  # the BE the client reads first
    victim = cluster["bes"][cluster["be_endpoints"].index(first)]
    stats = ScanStats()
    seen: Counter = Counter()
    for n, batch in enumerate(client.batches("big", "events", "select id, v from big.events", batch_size=2048,
                                             stats=stats, plan=plan)):
        seen.update(zip(batch.column("id").to_pylist(), batch.column("v").to_pylist()))
        if n == 2:
            victim.kill()  # in the middle of its scanner: rows sent, more to come
    assert stats.failovers >= 1
    assert seen == _expected()  # every row, none twice
    told = [r.getMessage() for r in caplog.records if r.name.startswith("starscan.client") and r.levelname == "WARNING"
            and "opened again on the next routing" in r.getMessage()]
    assert len(told) == stats.failovers, told  # each failover says why the read paused

    # the dead BE leaves the routings within seconds ...
    def routed_to_survivor_only() -> bool:
        return all(info["routings"] == [e for e in cluster["be_endpoints"] if e != first]
                   for info in _plan(cluster)["partitions"].values())

    wait_until(routed_to_survivor_only, timeout_s=30, interval_s=0.5, what="the dead BE to leave the routings")
    # ... and comes back when it answers again; started with the same plan secret, it serves
    # the plan made before it died
    victim.start()
    victim.wait_healthy(cluster["be_http"][cluster["bes"].index(victim)])
    wait_until(lambda: any(info["routings"][0] == first for info in _plan(cluster)["partitions"].values()),
               timeout_s=30, interval_s=0.5, what="the restarted BE to be routed to again")
    old = {t: {**info, "routings": [first]} for t, info in plan["partitions"].items()}
    again = client.read("big", "events", "select id, v from big.events", plan={**plan, "partitions": old})
    assert Counter(zip(again.column("id").to_pylist(), again.column("v").to_pylist())) == _expected()


def test_the_parallel_reader_loses_nothing_when_a_be_dies_mid_read(cluster):
    """starscan.client.connect reads tablets on both BEs at once; one BE killed mid-read."""
    from starscan.client import connect

    wait_until(lambda: {i["routings"][0] for i in _plan(cluster)["partitions"].values()} == set(cluster["be_endpoints"]),
               timeout_s=30, interval_s=0.5, what="both BEs in the routings")
    conn = connect(cluster["fe_url"], max_workers=2, request_tablet_size=1, batch_size=2048)
    seen: Counter = Counter()
    victim = cluster["bes"][1]
    for n, batch in enumerate(conn.read_batches("big.events", columns=["id", "v"])):
        seen.update(zip(batch.column("id").to_pylist(), batch.column("v").to_pylist()))
        if n == 3:
            victim.kill()
    assert seen == _expected()  # every row, none twice
    assert conn.failovers >= 1  # the victim was serving this read when it died
    victim.start()
    victim.wait_healthy(cluster["be_http"][1])


class ConnectorLikeReader:
    """A reader with the Spark connector's shape: one BE address (here the balancer's), each
    call retried up to ``retries`` times after a transport failure, get_next with the same
    offset, never another address; but, unlike the released connector (which retries on its
    closed socket: docs/scaling.md), each retry on a new connection."""

    def __init__(self, address: tuple[str, int], retries: int = 3, timeout_s: float = 60):
        self.address, self.retries, self.timeout_s = address, retries, timeout_s
        self.client = None
        self.reconnects = 0

    def call(self, name: str, params):
        from starscan.client import thrift_client

        failure: Exception | None = None
        for _ in range(self.retries + 1):
            if self.client is None:
                self.client = thrift_client(*self.address, timeout_s=self.timeout_s)
            try:
                return getattr(self.client, name)(params)
            except Exception as exc:  # noqa: BLE001 - a transport failure: a new connection, the same call
                failure = exc
                self.client.close()
                self.client = None
                self.reconnects += 1
        raise AssertionError(f"{name} failed {self.retries + 1} times: {failure!r}")


def _read_through(reader_call, plan: dict, tablets: list[int], on_batch=None) -> Counter:
    """open_scanner on ``tablets`` (user and password sent, as the connector does), get_next
    until eos, close; ``on_batch(n)`` after each batch."""
    from starscan.core.thrift_defs import wire

    opened = reader_call("open_scanner", wire.TScanOpenParams(
        cluster="default_cluster", database="big", table="events", tablet_ids=tablets, batch_size=4096,
        opaqued_query_plan=plan["opaqued_query_plan"], user="root", passwd=""))
    assert opened.status.status_code == wire.TStatusCode.OK, opened.status
    seen: Counter = Counter()
    offset, n = 0, 0
    while True:
        res = reader_call("get_next", wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
        assert res.status.status_code == wire.TStatusCode.OK, res.status
        if res.eos:
            break
        batch = pa.ipc.open_stream(res.rows).read_all()
        seen.update(zip(batch.column("id").to_pylist(), batch.column("v").to_pylist()))
        offset += batch.num_rows
        n += 1
        if on_batch is not None:
            on_batch(n)
    reader_call("close_scanner", wire.TScanCloseParams(context_id=opened.context_id))
    return seen


def _both_routed(cluster) -> None:
    for be, port in zip(cluster["bes"], cluster["be_http"]):
        if be.proc is None or be.proc.poll() is not None:
            be.start()
            be.wait_healthy(port)
    wait_until(lambda: {i["routings"][0] for i in _plan(cluster)["partitions"].values()} == set(cluster["be_endpoints"]),
               timeout_s=60, interval_s=0.5, what="both BEs in the routings")


def test_behind_one_address_a_reconnecting_read_survives_its_be_killed(cluster):
    """Routings name one address (a balancer) in front of both BEs. The BE serving the scan is
    SIGKILLed mid-scan; the reader retries get_next on a new connection, which reaches the
    other BE; that BE resumes the scan from its record at the reader's offset: every row
    exactly once. Without resumable scans the retry answers 'context_id not found'."""
    from support.balancer import TcpBalancer

    _both_routed(cluster)
    balancer = TcpBalancer([("127.0.0.1", int(e.rpartition(":")[2])) for e in cluster["be_endpoints"]])
    try:
        plan = _plan(cluster)
        tablets = [int(t) for t in plan["partitions"]]
        reader = ConnectorLikeReader(balancer.address)

        def kill_serving_be(n: int) -> None:
            if n == 3:
                serving = balancer.routed[-1]  # the reader's one connection so far
                cluster["bes"][serving].kill()

        seen = _read_through(reader.call, plan, tablets, on_batch=kill_serving_be)
        assert reader.reconnects >= 1  # its BE died under it
        assert len(set(balancer.routed)) == 2  # the retry reached the other BE
        assert seen == _expected()  # every row, none twice
    finally:
        balancer.close()


def test_behind_one_address_a_flink_like_read_completes_after_its_task_restart(cluster):
    """The Flink connector makes each call once; its task fails when the BE dies, and the
    restarted task reads the split again from the start, through the same address."""
    from support.balancer import TcpBalancer

    _both_routed(cluster)
    balancer = TcpBalancer([("127.0.0.1", int(e.rpartition(":")[2])) for e in cluster["be_endpoints"]])
    try:
        plan = _plan(cluster)
        tablets = [int(t) for t in plan["partitions"]]
        attempts = 0
        seen: Counter = Counter()
        while attempts < 3:
            attempts += 1
            once = ConnectorLikeReader(balancer.address, retries=0)

            def kill_serving_be(n: int, first: bool = attempts == 1) -> None:
                if n == 3 and first:
                    cluster["bes"][balancer.routed[-1]].kill()

            try:
                seen = _read_through(once.call, plan, tablets, on_batch=kill_serving_be)
                break
            except AssertionError:
                continue  # the task failed: Flink restarts it, its rows so far are rolled back
        assert attempts == 2
        assert seen == _expected()
    finally:
        balancer.close()


def _relay_ports(plan: dict) -> list[str]:
    """The relay's addresses in BE order: tablet t's first routing is BE t % 2's port."""
    firsts = {int(t) % 2: info["routings"][0] for t, info in plan["partitions"].items()}
    return [firsts[0], firsts[1]]


def test_through_the_fe_relay_routings_name_the_fe_and_a_read_equals_spark(cluster, spark):
    """thrift_relay_port: the FE's plans route every tablet to the FE's relay ports, one per
    BE (so readers still read both BEs' tablets in parallel), and the rows are the BEs'."""
    from starscan.client import StarscanClient

    _both_routed(cluster)
    plan = _plan(cluster, "relay_url")
    relays = _relay_ports(plan)
    assert len(set(relays)) == 2 and not set(relays) & set(cluster["be_endpoints"]), relays
    assert all(sorted(info["routings"]) == sorted(relays) for info in plan["partitions"].values())
    got = StarscanClient(cluster["relay_url"]).read("big", "events", "select id, v from big.events", plan=plan)
    assert Counter(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) == _expected()


def test_through_the_fe_relay_a_be_killed_mid_read_costs_a_single_try_reader_nothing(cluster):
    """The Flink connector's shape (each call once, a 1 s read timeout, one address): its
    relay port's BE is SIGKILLed mid-scan; the relay resumes the scanner on the other BE at
    the reader's offset, and the reader, which never reconnects, reads every row once."""
    _both_routed(cluster)
    plan = _plan(cluster, "relay_url")
    relays = _relay_ports(plan)
    host, _, port = relays[0].rpartition(":")
    reader = ConnectorLikeReader((host, int(port)), retries=0, timeout_s=1)
    tablets = [int(t) for t in plan["partitions"]]  # one scanner, on the port's BE (be0)

    def kill_its_be(n: int) -> None:
        if n == 3:
            cluster["bes"][0].kill()

    seen = _read_through(reader.call, plan, tablets, on_batch=kill_its_be)
    assert reader.reconnects == 0
    assert seen == _expected()
    assert "goes on on the BE" in cluster["relay_fe"].log()


def _set_flight_proxy(cluster, on: bool) -> None:
    r = httpx.post(f"{cluster['fe_url']}/api/update_config", params={"flight_proxy": str(on).lower()},
                   headers={"Authorization": basic("root", "")}, timeout=30)
    assert r.status_code == 200, r.text


def test_a_flight_sql_endpoint_is_read_from_its_next_be_when_the_first_is_killed(cluster):
    """Without the FE's proxy each endpoint lists both BEs; its first BE SIGKILLed, a client
    reads it from the next location: every row once. Through the proxy (ADBC), the FE relays
    the tablets from the BE that is alive."""
    import adbc_driver_flightsql.dbapi as flight_sql
    import pyarrow.flight as flight
    from google.protobuf import any_pb2

    from starscan.flight import flight_sql_pb2 as sql_pb2

    _both_routed(cluster)
    _set_flight_proxy(cluster, False)
    try:
        client = flight.connect(cluster["flight_uri"])
        options = flight.FlightCallOptions(headers=[client.authenticate_basic_token("root", "")])
        command = any_pb2.Any()
        command.Pack(sql_pb2.CommandStatementQuery(query="select id, v from big.events"))
        info = client.get_flight_info(flight.FlightDescriptor.for_command(command.SerializeToString()), options)
        assert len(info.endpoints) > 1
        assert all(sorted(loc.uri.decode() for loc in e.locations) == sorted(cluster["be_flight"])
                   for e in info.endpoints)
        first = info.endpoints[0].locations[0].uri.decode()
        victim = cluster["bes"][cluster["be_flight"].index(first)]
        victim.kill()
        seen: Counter = Counter()
        tried_next = 0
        for endpoint in info.endpoints:
            for location in endpoint.locations:
                try:
                    table = flight.connect(location).do_get(endpoint.ticket).read_all()
                except flight.FlightError:
                    tried_next += 1
                    continue
                seen.update(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))
                break
        assert tried_next >= 1
        assert seen == _expected()
    finally:
        _set_flight_proxy(cluster, True)
    with flight_sql.connect(cluster["flight_uri"], db_kwargs={"username": "root", "password": ""},
                            autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("select id, v from big.events")
        table = cur.fetch_arrow_table()
    assert Counter(zip(table.column("id").to_pylist(), table.column("v").to_pylist())) == _expected()
    _both_routed(cluster)


def _scanners_opened(cluster) -> list[float]:
    out = []
    for port in cluster["be_http"]:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        except httpx.HTTPError:
            out.append(-1.0)
            continue
        out.append(sum(float(line.split()[-1]) for line in text.splitlines()
                       if line.startswith("starscan_scanners_opened_total")))
    return out


def _proxied_statement(cluster, sql: str):
    """Both BEs routed, the FE's proxy on, and the statement's FlightInfo: (client, call
    options, info)."""
    import pyarrow.flight as flight
    from google.protobuf import any_pb2

    from starscan.flight import flight_sql_pb2 as sql_pb2

    _both_routed(cluster)
    _set_flight_proxy(cluster, True)
    client = flight.connect(cluster["flight_uri"])
    options = flight.FlightCallOptions(headers=[client.authenticate_basic_token("root", "")])
    command = any_pb2.Any()
    command.Pack(sql_pb2.CommandStatementQuery(query=sql))
    return client, options, client.get_flight_info(flight.FlightDescriptor.for_command(command.SerializeToString()),
                                                   options)


def test_the_proxy_goes_on_from_the_next_be_when_its_be_is_lost_mid_stream(cluster):
    """Through the FE's proxy, the BE streaming an endpoint is SIGKILLed after the client's
    first batch: the FE redeems the ticket at the other BE, skips the rows it already sent,
    and the client's one stream holds every row of the table once."""
    client, options, info = _proxied_statement(cluster, "select id, v from big.longer")
    before = _scanners_opened(cluster)
    reader = client.do_get(info.endpoints[0].ticket, options)
    first = reader.read_chunk().data
    opened = [after - was for after, was in zip(_scanners_opened(cluster), before, strict=True)]
    assert sorted(opened) == [0, 1], opened  # one BE streams the endpoint
    victim = cluster["bes"][opened.index(1)]
    victim.kill()
    seen: Counter = Counter(zip(first.column("id").to_pylist(), first.column("v").to_pylist()))
    try:
        rest = reader.read_all()
    finally:
        _both_routed(cluster)  # the next tests want both BEs, whatever happens here
    seen.update(zip(rest.column("id").to_pylist(), rest.column("v").to_pylist()))
    for endpoint in info.endpoints[1:]:
        table = client.do_get(endpoint.ticket, options).read_all()
        seen.update(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))
    files, rows = LONGER
    assert len(seen) == files * rows and set(seen.values()) == {1}
    assert seen == Counter((i, str(i)) for i in range(files * rows))
    fe_log = (cluster["root"] / "fe.log").read_text()
    _both_routed(cluster)
    assert "the BE of a stream was lost after" in fe_log  # it was lost mid-stream, not before


def test_through_the_proxy_the_endpoints_are_read_from_the_bes_the_plan_routed_them_to(cluster):
    """With the FE's proxy on, each endpoint is relayed from the BE the plan routed its
    tablets to: a statement's endpoints spread over both BEs, as its tablets do."""
    client, options, info = _proxied_statement(cluster, "select id, v from big.events")
    before = _scanners_opened(cluster)
    seen: Counter = Counter()
    for endpoint in info.endpoints:
        table = client.do_get(endpoint.ticket, options).read_all()
        seen.update(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))
    assert seen == _expected()
    opened = [after - was for after, was in zip(_scanners_opened(cluster), before, strict=True)]
    assert all(n >= 1 for n in opened), opened  # both BEs streamed some
    assert sum(opened) == len(info.endpoints)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux process flag")
def test_a_be_turns_transparent_huge_pages_off_for_its_process_unless_set(cluster):
    """prctl(PR_SET_THP_DISABLE) as /proc shows it: off in a BE at its defaults, on where
    be_transparent_huge_pages is set (whatever the test process passed down)."""
    def thp_enabled(node) -> str:
        status = Path(f"/proc/{node.proc.pid}/status").read_text()
        return status.split("THP_enabled:")[1].split()[0] if "THP_enabled:" in status else "unknown"

    states = [thp_enabled(be) for be in cluster["bes"]]
    if states[0] == "unknown":
        pytest.skip("this kernel's /proc does not show THP_enabled")
    assert states == ["0", "1"]


def test_with_no_live_be_a_plan_is_a_clear_503(cluster):
    for be in cluster["bes"]:
        be.kill()

    def refused() -> bool:
        r = httpx.post(f"{cluster['fe_url']}/api/big/events/_query_plan", json={"sql": "select id from big.events"},
                       headers={"Authorization": basic("root", "")}, timeout=60)
        return r.status_code == 503 and "no BE answers" in r.json()["exception"]

    wait_until(refused, timeout_s=30, interval_s=0.5, what="plans to be refused with no BE")
    assert httpx.get(f"{cluster['fe_url']}/api/health", timeout=30).status_code == 200  # the FE itself is fine

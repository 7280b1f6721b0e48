"""Arrow Flight SQL (docs/flight-sql.md) with real clients over real sockets: ADBC's Flight SQL
driver through its DB-API, polars over ADBC and pyarrow's own Flight client, against the
shared server's FE (flight_sql_port) and BE (be_flight_port). Every answer is compared with
Spark SQL's on the same files."""

from __future__ import annotations

import concurrent.futures

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from adbc_driver_manager import DatabaseError, ProgrammingError
from google.protobuf import any_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.servers import new_user
from support.waits import wait_until

from starscan.flight import flight_sql_pb2 as sql_pb2


@pytest.fixture(scope="module")
def uri(server) -> str:
    assert server.flight_sql_port
    return f"grpc://127.0.0.1:{server.flight_sql_port}"


def connect(uri: str, user: str = "root", password: str = ""):
    # autocommit: starscan reads only, it has no transactions to turn off
    return flight_sql.connect(uri, db_kwargs={"username": user, "password": password}, autocommit=True)


def spark_rows(server, sql: str) -> pa.Table:
    """Spark SQL's answer over the warehouse's files (views named as the tables)."""
    spark = server.spark.newSession()
    for db, table in (("demo", "lineitem"), ("db1", "t1"), ("db1", "sales")):
        snap = server.warehouse.snapshot(db, table)
        spark.read.parquet(str(snap.location)).createOrReplaceTempView(f"{db}_{table}")
    return spark.sql(sql).toArrow()


def same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.num_rows == want.num_rows
    assert got.column_names == want.column_names
    keys = [(name, "ascending") for name in got.column_names
            if not pa.types.is_nested(got.schema.field(name).type)]
    got_rows = got.sort_by(keys).to_pylist()
    want_rows = want.sort_by(keys).to_pylist()
    for g, w in zip(got_rows, want_rows):
        assert g.keys() == w.keys()
        for k in g:
            gv, wv = g[k], w[k]
            if isinstance(gv, float) and isinstance(wv, float) and gv != gv:
                assert wv != wv, (k, g, w)
            elif getattr(gv, "tzinfo", None) is not None and wv is not None:
                assert gv == wv, (k, g, w)  # the same instant, whatever zone each names (year 1 too)
            else:
                assert gv == wv, (k, g, w)


def test_adbc_reads_a_table_tablet_parallel_with_spark_values(server, uri):
    with connect(uri) as conn, conn.cursor() as cur:
        cur.execute("select * from demo.lineitem")
        got = cur.fetch_arrow_table()
    want = spark_rows(server, "select * from demo_lineitem")
    assert pa.types.is_date32(got.schema.field("l_shipdate").type)
    assert pa.types.is_decimal(got.schema.field("l_extendedprice").type)
    same_rows(got, want)


def test_a_flight_scan_is_counted_in_the_bes_metrics(server, uri):
    """Scanners a BE opens for Flight and the rows it streams count in starscan_scanners_opened
    and starscan_rows_sent, as open_scanner's and get_next's do."""
    from support.readers import scrape, value

    sql = "select l_orderkey, l_shipdate from demo.lineitem where l_quantity > 40"
    fe = f"http://127.0.0.1:{server.http_port}"
    before = value(scrape(fe), "starscan_rows_sent_total")
    opened = value(scrape(fe), "starscan_scanners_opened_total")
    with connect(uri) as conn, conn.cursor() as cur:
        cur.execute(sql)
        got = cur.fetch_arrow_table()
    assert got.num_rows > 0
    # other tests of the module may scan at the same time: at least this scan's rows
    wait_until(lambda: value(scrape(fe), "starscan_rows_sent_total") - before >= got.num_rows, 30,
               what="starscan_rows_sent to count the Flight scan's rows")
    assert value(scrape(fe), "starscan_scanners_opened_total") > opened


def test_adbc_filtered_scan_and_pandas(server, uri):
    sql = "select l_orderkey, l_shipdate, l_quantity from demo.lineitem where l_quantity > 45 and l_shipmode = 'AIR'"
    with connect(uri) as conn, conn.cursor() as cur:
        cur.execute(sql)
        got = cur.fetch_arrow_table()
        cur.execute(sql)
        frame = cur.fetch_df()
    want = spark_rows(server, sql.replace("demo.lineitem", "demo_lineitem"))
    assert got.num_rows > 0
    same_rows(got, want)
    assert len(frame) == want.num_rows


@pytest.mark.parametrize("sql", [
    "select count(*) as n from {li}",
    "select l_returnflag, l_linestatus, count(*) as n, sum(l_quantity) as q, min(l_shipdate) as d, "
    "avg(l_extendedprice) as p from {li} group by l_returnflag, l_linestatus having count(*) > 1 order by 1, 2",
    "select distinct l_shipmode from {li} order by l_shipmode limit 3",
    "with big as (select l_orderkey, l_quantity from {li} where l_quantity > 40) "
    "select a.l_orderkey, count(*) as n from big a join {li} b on a.l_orderkey = b.l_orderkey group by a.l_orderkey",
    "select l_orderkey, l_linenumber, row_number() over (partition by l_orderkey order by l_linenumber desc) as r "
    "from {li} where l_orderkey < 100",
    "select t.k1, s.amount from {t1} t join {sales} s on t.k1 = s.id",
])
def test_queries_answer_spark_sql_rows_on_flight_sql_and_mysql(server, uri, sql):
    import pymysql

    ours = sql.format(li="demo.lineitem", t1="db1.t1", sales="db1.sales")
    want = spark_rows(server, sql.format(li="demo_lineitem", t1="db1_t1", sales="db1_sales"))
    with connect(uri) as conn, conn.cursor() as cur:
        cur.execute(ours)
        got = cur.fetch_arrow_table()
    same_rows(got, want)
    with pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="") as conn:
        with conn.cursor() as mcur:
            mcur.execute(ours)
            rows = mcur.fetchall()
    assert len(rows) == want.num_rows


def test_metadata_commands_browse_what_the_user_may_see(server, uri):
    with connect(uri) as conn:
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        catalogs = {o["catalog_name"] for o in objects}
        assert catalogs == {"default_catalog"}
        schemas = {s["db_schema_name"]: {t["table_name"] for t in s["db_schema_tables"]}
                   for o in objects for s in o["catalog_db_schemas"]}
        assert {"lineitem"} <= schemas["demo"] and {"t1", "sales"} <= schemas["db1"]
        schema = conn.adbc_get_table_schema("lineitem", db_schema_filter="demo")
        assert "l_orderkey" in schema.names and pa.types.is_date32(schema.field("l_shipdate").type)
        assert conn.adbc_get_table_types() == ["TABLE"]
        with conn.cursor() as cur:
            cur.execute("show tables from db1")
            assert {"t1", "sales"} <= set(cur.fetch_arrow_table().column(0).to_pylist())
            cur.execute("desc demo.lineitem")
            assert "l_orderkey" in cur.fetch_arrow_table().column("Field").to_pylist()


def test_grants_and_bad_statements_are_grpc_statuses(server, uri):
    user = new_user(server, "pw1", "db1.t1")
    with connect(uri, user, "pw1") as conn, conn.cursor() as cur:
        cur.execute("select k1 from db1.t1")
        assert cur.fetch_arrow_table().num_rows > 0
        with pytest.raises(DatabaseError, match="SELECT privilege"):
            cur.execute("select * from demo.lineitem")
        with pytest.raises(DatabaseError, match="SELECT privilege"):
            cur.execute("select count(*) from db1.t1 a join demo.lineitem b on a.k1 = b.l_orderkey")
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        tables = {t["table_name"] for o in objects for s in o["catalog_db_schemas"] for t in s["db_schema_tables"]}
        assert tables == {"t1"}
    with connect(uri) as conn, conn.cursor() as cur:
        for sql in ("drop table db1.t1", "insert into db1.t1 values (1)", "select reflect('java.lang.System', 'exit', 0)"
                    " from db1.t1"):
            with pytest.raises((DatabaseError, ProgrammingError)):
                cur.execute(sql)
        with pytest.raises(DatabaseError, match="nope"):
            cur.execute("select * from db1.nope")
        cur.execute("select k1 from db1.t1 where k1 = 1")  # the connection still answers
        assert cur.fetch_arrow_table().column(0).to_pylist() == [1]
    with pytest.raises(DatabaseError, match="(?i)unauthenticated|access denied"):
        with connect(uri, "root", "wrong") as conn, conn.cursor() as cur:
            cur.execute("select k1 from db1.t1")


def test_polars_reads_through_adbc(server, uri):
    import polars as pl

    with connect(uri) as conn:
        frame = pl.read_database("select l_orderkey, l_quantity from demo.lineitem where l_orderkey < 50", conn)
    want = spark_rows(server, "select l_orderkey, l_quantity from demo_lineitem where l_orderkey < 50")
    assert frame.height == want.num_rows
    assert sorted(frame["l_orderkey"].to_list()) == sorted(want.column("l_orderkey").to_pylist())


@pytest.mark.parametrize("table", ["lineitem", "all_types"])
def test_every_demo_table_reads_with_spark_sqls_values_over_adbc_and_polars(server, uri, table):
    """Each demo table read whole through ADBC's DB-API and polars equals Spark's own Arrow
    of the same files: every type of all_types (dates before 1582, timestamps with and
    without a zone, decimals, binary, CHAR, arrays, maps, structs)."""
    import polars as pl

    snap = server.warehouse.snapshot("demo", table)
    want = server.spark.read.parquet(str(snap.location)).toArrow()
    assert want.num_rows > 0
    with connect(uri) as conn, conn.cursor() as cur:
        cur.execute(f"select * from demo.{table}")
        got = cur.fetch_arrow_table()
        frame = pl.read_database(f"select * from demo.{table}", conn)
    assert [f.type for f in got.schema] == [f.type for f in want.schema]
    same_rows(got, want)
    key = "id" if table == "all_types" else ["l_orderkey", "l_linenumber"]
    assert frame.sort(key).equals(pl.from_arrow(want).sort(key))


def _raw_client(uri: str) -> flight.FlightClient:
    client = flight.connect(uri)
    token = client.authenticate_basic_token("root", "")
    return client, flight.FlightCallOptions(headers=[token])


def _statement(sql: str) -> flight.FlightDescriptor:
    command = any_pb2.Any()
    command.Pack(sql_pb2.CommandStatementQuery(query=sql))
    return flight.FlightDescriptor.for_command(command.SerializeToString())


@pytest.mark.parametrize("via", ["proxy-local", "proxy-relay", "be"])
def test_raw_flight_client_reads_endpoints_in_parallel(server, uri, via, monkeypatch):
    """Several endpoints fetched at once, from the FE (proxy) or from the BE each names. The
    shared server is its FE's BE too: the FE reads that BE's tablets in its own process
    (proxy-local), or relays them from the BE's Flight port when its own BE is not among the
    routings (proxy-relay)."""
    proxy = via != "be"
    reads = server.statements.reads
    streams = []
    if via == "proxy-relay":
        monkeypatch.setattr(reads, "local_be", lambda: None)
    else:
        local = reads.local_batches
        monkeypatch.setattr(reads, "local_batches", lambda ticket, peer: streams.append(peer) or local(ticket, peer))
    before = server.live_settings.current
    server.live_settings.bound(flight_proxy=proxy, flight_endpoints_per_be=4)
    try:
        client, options = _raw_client(uri)
        info = client.get_flight_info(_statement("select l_orderkey, l_linenumber from demo.lineitem"), options)
        assert len(info.endpoints) > 1
        want_port = server.flight_sql_port if proxy else server.be_flight_port
        assert {loc.uri.decode().rsplit(":", 1)[1] for e in info.endpoints for loc in e.locations} == {str(want_port)}

        def fetch(endpoint) -> pa.Table:
            reader = flight.connect(endpoint.locations[0]) if not proxy else client
            return reader.do_get(endpoint.ticket, options).read_all()

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            parts = list(pool.map(fetch, info.endpoints))
        assert len(streams) == (len(info.endpoints) if via == "proxy-local" else 0)
        got = pa.concat_tables(parts)
        want = spark_rows(server, "select l_orderkey, l_linenumber from demo_lineitem")
        same_rows(got, want)
    finally:
        server.live_settings.bound(flight_proxy=before.flight_proxy, flight_endpoints_per_be=before.flight_endpoints_per_be)


def test_a_client_that_goes_away_frees_its_scanner(server, uri):
    """The reader stops after one batch and closes: the BE's scanner is closed with it, as a
    close_scanner would; the next reads are unaffected."""
    client, options = _raw_client(uri)
    info = client.get_flight_info(_statement("select * from demo.lineitem"), options)
    before = len(server.contexts)
    reader = client.do_get(info.endpoints[0].ticket, options)
    chunk = reader.read_chunk()
    assert chunk.data.num_rows > 0
    reader.cancel()
    client.close()
    wait_until(lambda: len(server.contexts) <= before, timeout_s=60, interval_s=0.2,
               what="the scanner of the abandoned stream to close")
    with connect(uri) as conn, conn.cursor() as cur:
        cur.execute("select count(*) as n from demo.lineitem")
        assert cur.fetch_arrow_table().column("n").to_pylist() == [spark_rows(server, "select * from demo_lineitem").num_rows]


# ---- property: random aggregates over a filter, Flight SQL against Spark SQL ---------------
GROUPABLE = ["l_returnflag", "l_linestatus", "l_shipmode", "l_shipdate", "l_linenumber"]
NUMERIC = ["l_quantity", "l_extendedprice", "l_discount", "l_orderkey"]
AGGREGATES = [f"{f}({c})" for f in ("sum", "min", "max", "count", "avg") for c in NUMERIC] + [
    "count(*)", "count(distinct l_shipmode)"]


@pytest.fixture(scope="module")
def lineitem_info(spark, server):
    from support.random_queries import TableInfo

    return TableInfo(spark, server, "demo", "lineitem", 0.002)


@pytest.fixture(scope="module")
def adbc(uri):
    with connect(uri) as conn:
        yield conn


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_aggregates_answer_spark_sqls_rows(lineitem_info, adbc, data):
    """GROUP BY over 0-2 columns, 1-3 aggregates, a random WHERE (the predicate generator the
    scan properties use) and maybe a HAVING: the rows ADBC gets equal Spark SQL's."""
    from support.random_queries import arrow_counts, differ, predicate, spark_counts

    info = lineitem_info
    group = data.draw(st.lists(st.sampled_from(GROUPABLE), max_size=2, unique=True), label="group")
    aggs = data.draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True), label="aggregates")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    having = data.draw(st.booleans(), label="having") and group
    items = group + [f"{a} as a{i}" for i, a in enumerate(aggs)]
    template = (f"select {', '.join(items)} from {{table}} where {where}"
                + (f" group by {', '.join(group)}" if group else "") + (" having count(*) > 1" if having else ""))
    df = info.reference.sql(template.format(table=info.source))
    want = spark_counts(df.collect(), df.schema.fields, info.zone)
    with adbc.cursor() as cur:
        cur.execute(template.format(table="demo.lineitem"))
        got_table = cur.fetch_arrow_table()
    got = arrow_counts(got_table.to_batches(), got_table.schema.types)
    assert differ(want, got) is None, template

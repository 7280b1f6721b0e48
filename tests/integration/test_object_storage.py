"""A warehouse in object storage (starscan.storage.stores), against a real S3 API: moto's standalone
server, started here on 127.0.0.1 with IAM authentication on, so wrong keys are refused as
AWS refuses them.

The tables are written by Spark into a local folder and uploaded (as any Spark job writing to
S3 leaves them), or loaded with ``starscan load``'s loader; every value read through the
server is compared with what Spark SQL reads from the local copy of the same files.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from support.s3 import moto_bucket, upload_folder
from support.servers import basic, plan, running_server

BUCKET = "lake"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server (tests/support/s3.py) with a bucket."""
    with moto_bucket(tmp_path_factory.mktemp("moto") / "moto.log", BUCKET, reader=False) as store:
        yield store


ROWS = [(i, ["oslo", "lima", "paris"][i % 3], Decimal(i) / 4, dt.date(2024, 1, 1) + dt.timedelta(days=i % 40),
         None if i % 7 == 0 else f"note {i}", i * 0.5) for i in range(3000)]


@pytest.fixture(scope="module")
def orders(spark, s3, tmp_path_factory):
    """sales.orders in the bucket, partitioned by city, and its local copy (Spark's answers)."""
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("id", T.IntegerType(), False), T.StructField("city", T.StringType()),
        T.StructField("amount", T.DecimalType(10, 2)), T.StructField("day", T.DateType()),
        T.StructField("note", T.StringType()), T.StructField("score", T.DoubleType())])
    local = tmp_path_factory.mktemp("orders") / "orders"
    spark.createDataFrame(ROWS, schema).repartition(3).write.partitionBy("city").parquet(str(local))
    upload_folder(s3["fs"], local, f"{BUCKET}/wh/sales.db/orders")
    spark.read.parquet(str(local)).createOrReplaceTempView("orders_local")
    return local


@pytest.fixture(scope="module")
def s3_server(spark, s3, orders, base_settings, tmp_path_factory):
    settings = base_settings.model_copy(update={
        "warehouse": f"s3://{BUCKET}/wh", "state_dir": tmp_path_factory.mktemp("s3-state"), **s3["creds"]})
    settings = type(settings).model_validate(settings.model_dump())
    with running_server(spark, settings) as srv:
        yield srv


def _fe(srv) -> str:
    return f"http://127.0.0.1:{srv.http_port}"


def _read(srv, sql: str, db: str = "sales", table: str = "orders"):
    from starscan.client import StarscanClient

    return StarscanClient(_fe(srv), "root", "").read(db, table, sql)


def _wire(value):
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


@pytest.mark.parametrize("where", [
    "",
    " where city = 'oslo'",
    " where amount > 100 and city in ('lima', 'paris')",
    " where note is null or day between '2024-01-05' and '2024-01-09'",
    " where note like 'note 1%' and id >= 200",
    # the sql engine's (Spark SQL over starscan's reader: this Spark has no S3 filesystem)
    " where score > 700.25 or score < 3",
    " where upper(city) = 'OSLO' and id % 7 = 3",
    " where cast(day as timestamp) >= timestamp'2024-02-05 00:00:00'",
])
def test_scans_of_a_table_in_s3_equal_spark(s3_server, spark, where):
    sql = "select id, city, amount, day, note, score from sales.orders" + where
    got = _read(s3_server, sql)
    expected = spark.sql(sql.replace("sales.orders", "orders_local")).collect()
    assert got.num_rows == len(expected)
    key = lambda r: r[0]  # noqa: E731
    assert sorted((tuple(r.values()) for r in got.to_pylist()), key=key) == \
        sorted((tuple(_wire(v) for v in row) for row in expected), key=key)


def test_sparks_s3a_client_gets_the_same_store(s3_server, spark, s3):
    hadoop = spark._jsc.hadoopConfiguration()
    assert hadoop.get("fs.s3a.endpoint") == s3["endpoint"] and hadoop.get("fs.s3a.path.style.access") == "true"
    assert hadoop.get("fs.s3a.access.key") == s3["creds"]["s3_access_key_id"]


def test_the_catalog_lists_s3_tables_and_prunes_partitions(s3_server):
    wh = s3_server.warehouse
    assert wh.databases() == ["sales"] and wh.tables("sales") == ["orders"]
    snap = wh.snapshot("sales", "orders")
    assert snap.location == f"s3://{BUCKET}/wh/sales.db/orders" and snap.partition_columns == ("city",)
    body = httpx.post(f"{_fe(s3_server)}/api/sales/orders/_query_plan", headers={"Authorization": basic("root", "")},
                      content=json.dumps({"sql": "select id from sales.orders where city = 'oslo'"}), timeout=60).json()
    planned = {int(t) for t in body["partitions"]}
    oslo = {t.tablet_id for t in snap.tablets if t.partition["city"] == "oslo"}
    assert planned == oslo and len(planned) < len(snap.tablets)
    assert "s3_secret" not in json.dumps(body) and s3_server.settings.s3_secret_access_key.get_secret_value() \
        not in json.dumps(body)


def test_a_file_rewritten_under_a_plan_is_version_gone(s3_server, s3, spark):
    from support.readers import Reader, plan_for

    from starscan.client import StarscanClient

    client = StarscanClient(_fe(s3_server), "root", "")
    opaque, tablets = plan_for(client, "sales", "orders", "select id from sales.orders where city = 'lima'")
    snap = s3_server.warehouse.snapshot("sales", "orders")
    victim = snap.by_id[tablets[0]].files[0]
    target = f"{BUCKET}/wh/sales.db/orders/{victim.path}"
    with s3["fs"].open_input_file(target) as fh:
        original = fh.read()
    try:
        with s3["fs"].open_output_stream(target) as out:
            out.write(original + b"x")  # another size: a different version of the file
        reader = Reader(("127.0.0.1", s3_server.be_port))
        try:
            opened = reader.open("sales", "orders", opaque, tablets)
            assert opened.status.status_code != 0
            assert "version" in opened.status.error_msgs[0] and "is gone" in opened.status.error_msgs[0]
            assert victim.path in opened.status.error_msgs[0]
        finally:
            reader.close()
    finally:
        with s3["fs"].open_output_stream(target) as out:
            out.write(original)
    assert _read(s3_server, "select id from sales.orders where city = 'lima'").num_rows == 1000


def test_plans_the_arrow_engine_cannot_read_run_on_spark_sql_without_a_hadoop_s3_connector(s3_server, spark):
    """Spark here has no S3 filesystem (Hadoop's S3A connector is not installed): the sql
    engine's scans read the bucket through starscan's reader (pyarrow's S3 client) and
    Spark SQL evaluates the rest."""
    from support.readers import engine_counts

    with pytest.raises(Exception, match="ClassNotFoundException"):
        spark._jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem")
    before = engine_counts(s3_server).get("sql", 0)
    sql = "select id from sales.orders where upper(city) = 'OSLO' and score * 2 > 100"
    got = sorted(_read(s3_server, sql).column("id").to_pylist())
    assert got == sorted(r[0] for r in spark.sql(sql.replace("sales.orders", "orders_local")).collect())
    assert engine_counts(s3_server).get("sql", 0) == before + 1


def test_load_into_s3_and_read_it_back(s3_server, spark, tmp_path):
    import csv

    from starscan.app.loader import load_table

    src = tmp_path / "visits.csv"
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "site"])
        for i in range(500):
            w.writerow([i, ["a", "b"][i % 2]])
    wh = s3_server.warehouse
    result = load_table(spark, wh, "web", "visits", str(src), partition_by=["site"], progress=False)
    assert result["rows"] == 500 and result["files"] >= 2
    assert sorted(r["id"] for r in _read(s3_server, "select id from web.visits where site = 'b'", "web", "visits")
                  .to_pylist()) == list(range(1, 500, 2))
    again = load_table(spark, wh, "web", "visits", str(src), partition_by=["site"], mode="append", progress=False)
    assert again["rows"] == 500
    assert _read(s3_server, "select id from web.visits", "web", "visits").num_rows == 1000
    load_table(spark, wh, "web", "visits", str(src), partition_by=["site"], progress=False)  # overwrite
    assert _read(s3_server, "select id from web.visits", "web", "visits").num_rows == 500


def test_wrong_credentials_are_a_clear_403_and_never_shown(spark, s3, orders, base_settings, tmp_path):
    creds = {**s3["creds"], "s3_secret_access_key": "not-the-secret-at-all"}
    settings = base_settings.model_copy(update={"warehouse": f"s3://{BUCKET}/wh", "state_dir": tmp_path, **creds})
    settings = type(settings).model_validate(settings.model_dump())
    with running_server(spark, settings) as srv:
        r = plan(_fe(srv), "sales", "orders", "select id from sales.orders", basic("root", ""))
        assert r.status_code == 403, r.text
        body = r.json()
        assert "refused starscan's credentials" in body["exception"] and "not-the-secret" not in r.text
        assert "Traceback" not in r.text
        varz = httpx.get(f"{_fe(srv)}/varz", headers={"Authorization": basic("root", "")}, timeout=30).text
        assert "not-the-secret" not in varz
        assert httpx.get(f"{_fe(srv)}/api/health", timeout=30).status_code == 200


def test_a_bucket_that_is_gone_is_said_so(spark, s3, base_settings, tmp_path):
    fs = s3["fs"]
    fs.create_dir("brief")
    upload_folder(fs, _small_table(spark, tmp_path), "brief/wh/d.db/t")
    settings = base_settings.model_copy(update={"warehouse": "s3://brief/wh", "state_dir": tmp_path / "state",
                                                **s3["creds"]})
    settings = type(settings).model_validate(settings.model_dump())
    with running_server(spark, settings) as srv:
        assert _read(srv, "select a from d.t", "d", "t").num_rows == 3
        fs.delete_dir("brief")
        r = plan(_fe(srv), "d", "t", "select a from d.t", basic("root", ""))
        assert r.status_code == 503, r.text
        assert "brief/wh" in r.json()["exception"] and "gone" in r.json()["exception"]
        time.sleep(0)  # the server keeps serving: health still answers
        assert httpx.get(f"{_fe(srv)}/api/health", timeout=30).status_code == 200


def _small_table(spark, tmp_path: Path) -> Path:
    path = tmp_path / "small"
    spark.createDataFrame([(1,), (2,), (3,)], "a int").coalesce(1).write.parquet(str(path))
    return path


def test_the_schema_of_an_s3_table_is_sparks(s3_server, s3, spark, tmp_path):
    """Data columns from the footer, partition columns typed by Spark's own inference."""
    local = tmp_path / "events"
    spark.createDataFrame([(i, f"e{i}", 2023 + i % 2, f"2024-01-0{1 + i % 3}", i % 2 == 0) for i in range(12)],
                          "id long, name string, year int, day string, flag boolean") \
        .write.partitionBy("year", "day", "flag").parquet(str(local))
    upload_folder(s3["fs"], local, f"{BUCKET}/wh/sales.db/events")
    want = spark.read.parquet(str(local)).schema
    snap = s3_server.warehouse.snapshot("sales", "events")
    got = s3_server.planner.schemas.schema(snap)
    assert [(f.name, f.dataType, f.nullable) for f in got.fields] == \
        [(f.name, f.dataType, f.nullable) for f in want.fields]
    rows = _read(s3_server, "select id, day from sales.events where year = 2024 and day = '2024-01-02'", "sales", "events")
    expected = spark.read.parquet(str(local)).where("year = 2024 and day = '2024-01-02'").select("id", "day").collect()
    assert sorted((r["id"], r["day"]) for r in rows.to_pylist()) == sorted((r[0], r[1].isoformat()) for r in expected)


def test_a_delta_table_in_s3_serves_its_current_version(s3_server, s3):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    creds = s3["creds"]
    options = {"AWS_ENDPOINT_URL": creds["s3_endpoint"], "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": creds["s3_access_key_id"], "AWS_SECRET_ACCESS_KEY": creds["s3_secret_access_key"],
               "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}
    uri = f"s3://{BUCKET}/wh/sales.db/deltas"
    table = pa.table({"id": pa.array(range(100), pa.int64()), "k": pa.array([i % 4 for i in range(100)], pa.int32())})
    write_deltalake(uri, table, partition_by=["k"], storage_options=options)
    write_deltalake(uri, table.slice(0, 10), partition_by=["k"], mode="overwrite", storage_options=options)
    assert DeltaTable(uri, storage_options=options).version() == 1
    got = _read(s3_server, "select id, k from sales.deltas where k < 2", "sales", "deltas")
    assert sorted((r["id"], r["k"]) for r in got.to_pylist()) == [(i, i % 4) for i in range(10) if i % 4 < 2]
    assert s3_server.warehouse.snapshot("sales", "deltas").version == 1


def test_the_endpoint_comes_from_the_aws_sdk_variable_when_s3_endpoint_is_unset(spark, s3, orders, base_settings,
                                                                                 tmp_path, monkeypatch):
    """AWS_ENDPOINT_URL (the AWS SDKs' and CLI's variable) instead of s3_endpoint: the same store."""
    creds = dict(s3["creds"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", creds.pop("s3_endpoint"))
    settings = base_settings.model_copy(update={"warehouse": f"s3://{BUCKET}/wh", "state_dir": tmp_path / "state",
                                                **creds, "s3_endpoint": None})
    settings = type(settings).model_validate(settings.model_dump())
    with running_server(spark, settings) as srv:
        assert _read(srv, "select id from sales.orders where id < 100").num_rows == 100

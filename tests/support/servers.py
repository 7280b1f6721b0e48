"""Servers with settings of their own, on the session's one SparkSession.

The shared ``server`` fixture runs with limits relaxed (conftest); the security, limit and
TLS tests each start one of these with the settings they check, in a warehouse of their own
when they change users, grants or the plan secret."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import httpx

from starscan.tables.catalog import Warehouse
from support.waits import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running_server(spark, settings):
    from starscan.app.server import StarscanServer

    srv = StarscanServer(settings, spark).start()
    try:
        yield srv
    finally:
        srv.stop()


def own_warehouse(spark, path: Path) -> Path:
    """A warehouse with db1.t1 (3 rows, 2 tablets) and db2.t2 (the same rows)."""
    from conftest import write_vector_table

    warehouse = Warehouse(path, 0)
    write_vector_table(spark, warehouse)
    t2 = warehouse.table_path("db2", "t2")
    t2.parent.mkdir(parents=True, exist_ok=True)
    spark.read.parquet(str(warehouse.table_path("db1", "t1"))).coalesce(1).write.parquet(str(t2))
    return path


def add_users(warehouse: Path, users: dict[str, tuple[str, tuple[str, ...]]]) -> None:
    """Users in a warehouse's user store before its server starts: name -> (password, grants)."""
    from starscan.security.users import UserStore

    store = UserStore(warehouse / "_starscan" / "users.json")
    for name, (password, grants) in users.items():
        store.set_password(name, password, create=True)
        for grant in grants:
            store.grant(name, grant)


def new_user(server, password: str, *grants: str, prefix: str = "u") -> str:
    """A user with a fresh name on a running server, with these grants."""
    import uuid

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    server.users.set_password(name, password, create=True)
    for grant in grants:
        server.users.grant(name, grant)
    return name


def plan(fe_url: str, db: str, table: str, sql: str, auth: str, client: httpx.Client | None = None,
         **kwargs) -> httpx.Response:
    body = json.dumps({"sql": sql})
    headers = {"Authorization": auth}
    if client is not None:
        return client.post(f"{fe_url}/api/{db}/{table}/_query_plan", content=body, headers=headers)
    return httpx.post(f"{fe_url}/api/{db}/{table}/_query_plan", content=body, headers=headers, timeout=60, **kwargs)


def basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def start_serve(tmp_path, demo_scale: str = "0.002", spark_master: str | None = "local[1]", warmup_rows: str = "0",
                demo_from: Path | None = None, user_jvm: bool = False, **settings: str):
    """`starscan serve` as a user runs it (own process, own JVM; by default a small demo, one
    task slot, no warm-up; ``spark_master=None``: starscan's default), waited for until
    /api/health answers; ``settings``: more keys, as environment variables. ``demo_from``: a
    warehouse whose demo database is copied in first (the session server's: Spark's files of
    the demo, which serve then does not write again, half of its start). ``user_jvm``: its
    JVM with the JIT users get, not the suite's C1 only (tests/conftest.py). Returns
    (process, http_port, be_port, log file)."""
    import shutil

    import httpx

    if demo_from is not None:
        shutil.copytree(Path(demo_from) / "demo.db", tmp_path / "wh" / "demo.db")
    http_port, be_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    if user_jvm:
        env.pop("JDK_JAVA_OPTIONS", None)
    env.update(SPARK_LOCAL_IP="127.0.0.1", STARSCAN_FLIGHT_SQL_PORT="0", STARSCAN_BE_FLIGHT_PORT="0", STARSCAN_WARMUP_ROWS=warmup_rows, STARSCAN_QUERY_PORT=str(free_port()),
               **{f"STARSCAN_{key.upper()}": value for key, value in settings.items()})
    log = (tmp_path / "serve.log").open("w")
    master = ["--spark-master", spark_master] if spark_master else []
    proc = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "starscan"), "serve", "--http-port", str(http_port), "--be-port", str(be_port),
         "--warehouse", str(tmp_path / "wh"), "--demo-scale", demo_scale, *master, "--bind-host", "127.0.0.1"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)

    def ready():
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
        try:
            return httpx.get(f"http://127.0.0.1:{http_port}/api/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, timeout_s=300, interval_s=0.5, what="starscan serve to start")
    except BaseException:
        proc.kill()
        proc.wait(30)
        log.close()
        raise
    return proc, http_port, be_port, log

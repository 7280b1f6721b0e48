"""The `starscan` command line."""

from __future__ import annotations

import getpass
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from starscan import __version__
from starscan.config import Settings, load_settings
from starscan.errors import StarscanError

app = typer.Typer(add_completion=False, help="Serve Spark tables to StarRocks readers.", no_args_is_help=True)
user_app = typer.Typer(help="Manage users and grants in the users file.", no_args_is_help=True)
app.add_typer(user_app, name="user")

ConfOpt = typer.Option(None, "--conf", help="starscan.conf file (key = value)")
WarehouseOpt = typer.Option(None, "--warehouse", help="warehouse directory")


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _settings(conf: Optional[Path], **overrides) -> Settings:
    try:
        return load_settings(conf, **overrides)
    except StarscanError as exc:
        _fail(exc.message)
        raise  # unreachable


def _logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _spark(settings: Settings):
    from starscan.spark import build_session

    try:
        return build_session(settings)
    except StarscanError as exc:
        _fail(exc.message, 3)


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"starscan {__version__}")


@app.command()
def serve(
    conf: Optional[Path] = ConfOpt,
    http_port: Optional[int] = typer.Option(None, "--http-port", help="FE HTTP port (default 8030)"),
    be_port: Optional[int] = typer.Option(None, "--be-port", help="BE Thrift port (default 9060)"),
    warehouse: Optional[Path] = WarehouseOpt,
    spark_master: Optional[str] = typer.Option(None, "--spark-master", help="Spark master URL (default local[*])"),
    demo_scale: Optional[float] = typer.Option(None, "--demo-scale", help="scale factor of the demo lineitem (0: no demo)"),
    bind_host: Optional[str] = typer.Option(None, "--bind-host", help="address to listen on"),
    advertise_host: Optional[str] = typer.Option(None, "--advertise-host", help="host put in routings"),
) -> None:
    """Start FE (HTTP) and BE (Thrift) on one SparkSession; create the demo database in an empty warehouse."""
    settings = _settings(conf, http_port=http_port, be_port=be_port, warehouse=warehouse, spark_master=spark_master,
                         demo_scale=demo_scale, bind_host=bind_host, advertise_host=advertise_host)
    _logging()
    log = logging.getLogger("starscan")
    spark = _spark(settings)
    from starscan.server import StarscanServer

    server = StarscanServer(settings, spark)
    if settings.demo_scale > 0 and not any(server.warehouse.tables(db) for db in server.warehouse.databases()):
        from starscan.demo import create_demo

        started = time.monotonic()
        created = create_demo(spark, server.warehouse, settings.demo_scale, settings.tablet_target_bytes)
        log.info("created demo tables %s in %.1f s", ", ".join(created), time.monotonic() - started)
    try:
        server.start()
    except OSError as exc:
        _fail(f"cannot listen: {exc}", 4)
    log.info("starscan %s ready: FE http://%s:%d  BE %s:%d  warehouse %s", __version__, settings.bind_host,
             server.http_port, settings.bind_host, server.be_port, settings.warehouse.resolve())
    stop = {"now": False}

    def _on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    while not stop["now"]:
        time.sleep(0.2)
    log.info("stopping")
    server.stop()
    spark.stop()


@app.command()
def tables(conf: Optional[Path] = ConfOpt, warehouse: Optional[Path] = WarehouseOpt) -> None:
    """List databases and tables in the warehouse, with tablets and versions."""
    from rich.console import Console
    from rich.table import Table

    from starscan.catalog import Warehouse

    settings = _settings(conf, warehouse=warehouse)
    wh = Warehouse(settings.warehouse, 0)
    out = Table("database", "table", "tablets", "bytes", "version", "partitioned by")
    for db in wh.databases():
        for name in wh.tables(db):
            snap = wh.snapshot(db, name)
            size = sum(f.size for t in snap.tablets for f in t.files)
            out.add_row(db, name, str(len(snap.tablets)), f"{size:,}", str(snap.version), ", ".join(snap.partition_columns))
    Console().print(out)


@app.command()
def load(
    source: str = typer.Argument(..., help="file or directory to import"),
    db: str = typer.Option(..., "--db", help="database"),
    table: str = typer.Option(..., "--table", help="table"),
    fmt: Optional[str] = typer.Option(None, "--format", help="csv | parquet | json (default: from the file name)"),
    partition_by: Optional[list[str]] = typer.Option(None, "--partition-by", help="partition column (repeatable)"),
    mode: str = typer.Option("overwrite", "--mode", help="overwrite | append"),
    conf: Optional[Path] = ConfOpt,
    warehouse: Optional[Path] = WarehouseOpt,
) -> None:
    """Import CSV/Parquet/JSON through Spark into a warehouse table, in tablets of bounded size."""
    settings = _settings(conf, warehouse=warehouse, spark_master=None)
    if fmt is not None and fmt not in ("csv", "parquet", "json"):
        _fail(f"--format must be csv, parquet or json, not {fmt!r}")
    spark = _spark(settings)
    from starscan.catalog import Warehouse
    from starscan.loader import load_table

    wh = Warehouse(settings.warehouse, 0)
    try:
        result = load_table(spark, wh, db, table, source, fmt=fmt, partition_by=list(partition_by or []),
                            tablet_target_bytes=settings.tablet_target_bytes, mode=mode)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    typer.echo(f"loaded {result['rows']:,} rows into {db}.{table}: {result['files']} tablets, "
               f"{result['bytes']:,} bytes in {result['seconds']:.1f} s")


@app.command()
def scan(
    table: str = typer.Argument(..., help="db.table"),
    columns: str = typer.Option("*", "--columns", help="comma-separated columns"),
    where: Optional[str] = typer.Option(None, "--where", help="WHERE predicate"),
    fe: str = typer.Option("127.0.0.1:8030", "--fe", help="FE host:port"),
    user: str = typer.Option("root", "--user"),
    password: str = typer.Option("", "--password"),
    batch_size: int = typer.Option(4096, "--batch-size"),
) -> None:
    """Read a table through a running server like a StarRocks connector; print rows, bytes, MB/s."""
    from starscan.provider.client import PlanError, ScanError, ScanStats, StarscanClient

    db, _, name = table.partition(".")
    if not name:
        _fail("table must be db.table")
    cols = ", ".join(f"`{c.strip()}`" if c.strip() != "*" else "*" for c in columns.split(","))
    sql = f"select {cols} from `{db}`.`{name}`" + (f" where {where}" if where else "")
    stats = ScanStats()
    started = time.perf_counter()
    try:
        for _ in StarscanClient(fe, user, password).batches(db, name, sql, batch_size, stats=stats):
            pass
    except (PlanError, ScanError) as exc:
        _fail(str(exc), 1)
    except OSError as exc:
        _fail(f"cannot reach starscan at {fe}: {exc}", 1)
    seconds = time.perf_counter() - started
    mb = stats.bytes / 1e6
    first = f"{stats.first_batch_s:.3f} s" if stats.first_batch_s is not None else "-"
    typer.echo(f"rows={stats.rows:,} batches={stats.batches} arrow_bytes={stats.bytes:,} scanners={stats.scanners} "
               f"seconds={seconds:.3f} throughput={mb / seconds if seconds else 0:.1f} MB/s first_batch={first}")


def _users(conf: Optional[Path], warehouse: Optional[Path]):
    from starscan.users import UserStore

    settings = _settings(conf, warehouse=warehouse)
    return UserStore(settings.effective_users_file)


def _ask_password(password: Optional[str]) -> str:
    if password is not None:
        return password
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    return getpass.getpass("password: ")


@user_app.command("add")
def user_add(name: str, password: Optional[str] = typer.Option(None, "--password", help="(read from stdin/prompt if omitted)"),
             grant: Optional[list[str]] = typer.Option(None, "--grant", help="db.table, db.* or *.* (repeatable)"),
             conf: Optional[Path] = ConfOpt, warehouse: Optional[Path] = WarehouseOpt) -> None:
    """Add a user."""
    store = _users(conf, warehouse)
    try:
        store.set_password(name, _ask_password(password), create=True)
        for g in grant or []:
            store.grant(name, g)
    except ValueError as exc:
        _fail(str(exc))
    typer.echo(f"user {name} added")


@user_app.command("passwd")
def user_passwd(name: str, password: Optional[str] = typer.Option(None, "--password"),
                conf: Optional[Path] = ConfOpt, warehouse: Optional[Path] = WarehouseOpt) -> None:
    """Change a user's password."""
    try:
        _users(conf, warehouse).set_password(name, _ask_password(password))
    except KeyError:
        _fail(f"no user {name!r}")
    typer.echo(f"password of {name} changed")


@user_app.command("grant")
def user_grant(name: str, grant: str = typer.Argument(..., help="db.table, db.* or *.*"),
               revoke: bool = typer.Option(False, "--revoke", help="remove the grant instead"),
               conf: Optional[Path] = ConfOpt, warehouse: Optional[Path] = WarehouseOpt) -> None:
    """Grant (or --revoke) SELECT on db.table, db.* or *.*."""
    try:
        _users(conf, warehouse).grant(name, grant, revoke=revoke)
    except KeyError:
        _fail(f"no user {name!r}")
    except ValueError as exc:
        _fail(str(exc))
    typer.echo(f"{'revoked' if revoke else 'granted'} SELECT on {grant} {'from' if revoke else 'to'} {name}")


@user_app.command("list")
def user_list(conf: Optional[Path] = ConfOpt, warehouse: Optional[Path] = WarehouseOpt) -> None:
    """List users and their grants."""
    for name, grants in sorted(_users(conf, warehouse).users().items()):
        typer.echo(f"{name}\t{', '.join(grants)}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()

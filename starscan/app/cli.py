"""The `starscan` command line."""

from __future__ import annotations

import time
from pathlib import Path

try:
    import typer
except ModuleNotFoundError as missing:  # `pip install starscan` alone: the reading side, no server
    raise SystemExit(f"the starscan command needs the server's packages ({missing.name} is not installed): "
                     "pip install 'starscan[server]'") from None

from starscan import __version__
from starscan.app.cli_admin import config_app, scanners_app
from starscan.app.cli_common import (
    EXIT_JAVA,
    EXIT_PORT,
    EXIT_USAGE,
    CaOpt,
    ConfOpt,
    FeOpt,
    PasswordOpt,
    UserOpt,
    WarehouseOpt,
    client_errors,
    client_of,
    domain_errors,
    exit_code,
    fail,
    settings_of,
)
from starscan.app.cli_users import secret_app, user_app
from starscan.core.errors import JavaMissingError, StarscanError
from starscan.settings.config import Settings

app = typer.Typer(add_completion=False, help="Serve Spark tables to StarRocks readers.", no_args_is_help=True,
                  rich_markup_mode="markdown")  # `code` in help renders as code, not backticks
app.add_typer(user_app, name="user")
app.add_typer(secret_app, name="secret")
app.add_typer(scanners_app, name="scanners")
app.add_typer(config_app, name="config")


def _logging(fmt: str = "human", level: str = "INFO") -> None:
    from starscan.core.logs import setup_logging

    setup_logging(fmt, level)


def _spark(settings: Settings):
    from starscan.spark.session import build_session

    try:
        return build_session(settings)
    except StarscanError as exc:
        fail(exc.message, EXIT_JAVA)



@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"starscan {__version__}")


LogFormatOpt = typer.Option(None, "--log-format", help="human (default) or json: one JSON object per log line")
ROLES = ("all", "fe", "be")


def _run_server(fe: bool, be: bool, conf, log_format, **overrides) -> None:
    """A node until SIGTERM/SIGINT (starscan.app.node); its failures as the documented exit codes."""
    from starscan.app.node import run_node
    from starscan.app.ports import CannotListen

    settings = settings_of(conf, log_format=log_format, **overrides)
    _logging(settings.log_format, settings.log_level)
    try:
        run_node(settings, fe=fe, be=be)
    except JavaMissingError as exc:
        fail(exc.message, EXIT_JAVA)
    except StarscanError as exc:
        fail(exc.message, exit_code(exc))
    except CannotListen as exc:
        fail(str(exc), EXIT_PORT)


@app.command()
def serve(
    conf: Path | None = ConfOpt,
    http_port: int | None = typer.Option(None, "--http-port", help="FE HTTP port (default 8030)"),
    be_port: int | None = typer.Option(None, "--be-port", help="BE Thrift port (default 9060)"),
    query_port: int | None = typer.Option(None, "--query-port", help="FE MySQL protocol port (default 9030)"),
    warehouse: str | None = WarehouseOpt,
    spark_master: str | None = typer.Option(None, "--spark-master", help="Spark master URL (default local[16]: 16 task slots)"),
    demo_scale: float | None = typer.Option(None, "--demo-scale", help="scale factor of the demo lineitem (0: no demo)"),
    bind_host: str | None = typer.Option(None, "--bind-host", help="address to listen on"),
    advertise_host: str | None = typer.Option(None, "--advertise-host", help="host put in routings"),
    role: str = typer.Option("all", "--role", help="all (FE and BE in one process), fe (plans, schemas, MySQL port) "
                             "or be (Thrift scanners, health and metrics on --be-http-port)"),
    be_endpoints: str | None = typer.Option(None, "--be-endpoints", help="every BE as host:port, host:port: the FE "
                                            "probes them and routes tablets to those that answer"),
    be_http_port: int | None = typer.Option(None, "--be-http-port", help="a BE node's HTTP port (default 8040)"),
    log_format: str | None = LogFormatOpt,
) -> None:
    """Start FE (HTTP + MySQL) and BE (Thrift) on one SparkSession, or one role; create the demo database in an empty warehouse."""
    if role not in ROLES:
        fail(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    fe, be = role in ("all", "fe"), role in ("all", "be")
    overrides = dict(http_port=http_port, be_port=be_port, query_port=query_port, warehouse=warehouse,
                     spark_master=spark_master, demo_scale=demo_scale, bind_host=bind_host,
                     advertise_host=advertise_host, be_endpoints=be_endpoints, be_http_port=be_http_port)
    _run_server(fe, be, conf, log_format, **overrides)


@app.command()
def fe(
    conf: Path | None = ConfOpt,
    http_port: int | None = typer.Option(None, "--http-port", help="FE HTTP port (default 8030)"),
    query_port: int | None = typer.Option(None, "--query-port", help="FE MySQL protocol port (default 9030)"),
    warehouse: str | None = WarehouseOpt,
    demo_scale: float | None = typer.Option(None, "--demo-scale", help="scale factor of the demo lineitem (0: no demo)"),
    bind_host: str | None = typer.Option(None, "--bind-host", help="address to listen on"),
    be_endpoints: str | None = typer.Option(None, "--be-endpoints", help="the BEs as host:port, host:port (routings)"),
    log_format: str | None = LogFormatOpt,
) -> None:
    """Start only the FE (HTTP + MySQL), as serve --role fe: plans point at the live --be-endpoints; share the warehouse and plan secret with the BEs."""
    _run_server(True, False, conf, log_format, http_port=http_port, query_port=query_port, warehouse=warehouse,
                demo_scale=demo_scale, bind_host=bind_host, be_endpoints=be_endpoints)


@app.command()
def be(
    conf: Path | None = ConfOpt,
    be_port: int | None = typer.Option(None, "--be-port", help="BE Thrift port (default 9060)"),
    warehouse: str | None = WarehouseOpt,
    spark_master: str | None = typer.Option(None, "--spark-master", help="Spark master URL (default local[16]: 16 task slots)"),
    bind_host: str | None = typer.Option(None, "--bind-host", help="address to listen on"),
    be_http_port: int | None = typer.Option(None, "--be-http-port", help="HTTP port for health and metrics (default 8040)"),
    log_format: str | None = LogFormatOpt,
) -> None:
    """Start only a BE (Thrift scanners on Spark), as serve --role be; it verifies plans with the shared plan secret."""
    _run_server(False, True, conf, log_format, be_port=be_port, warehouse=warehouse, spark_master=spark_master,
                bind_host=bind_host, be_http_port=be_http_port)


@app.command()
def tables(conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """List databases and tables in the warehouse, with tablets and versions."""
    from rich.console import Console
    from rich.table import Table

    from starscan.tables.catalog import Warehouse

    settings = settings_of(conf, warehouse=warehouse)
    wh = Warehouse.of(settings, listing_ttl_s=0)
    out = Table("database", "table", "tablets", "bytes", "version", "partitioned by")
    problems = []
    for db in wh.databases():
        for name in wh.tables(db):
            try:
                snap = wh.snapshot(db, name)
            except StarscanError as exc:  # one table that cannot be served does not hide the others
                out.add_row(db, name, "-", "-", "-", "(cannot be served: see below)")
                problems.append(f"{db}.{name}: {exc.message}")
                continue
            size = sum(f.size for f in snap.files)
            out.add_row(db, name, str(len(snap.tablets)), f"{size:,}", str(snap.version), ", ".join(snap.partition_columns))
    console = Console()
    console.print(out)
    for problem in problems:
        console.print(problem, markup=False)


@app.command()
def load(
    source: str = typer.Argument(..., help="file or directory to import"),
    db: str = typer.Option(..., "--db", help="database"),
    table: str = typer.Option(..., "--table", help="table"),
    fmt: str | None = typer.Option(None, "--format", help="csv | parquet | json (default: from the file name)"),
    partition_by: list[str] | None = typer.Option(None, "--partition-by", help="partition column (repeatable)"),
    mode: str = typer.Option("overwrite", "--mode", help="overwrite | append"),
    conf: Path | None = ConfOpt,
    warehouse: str | None = WarehouseOpt,
) -> None:
    """Import CSV/Parquet/JSON through Spark into a warehouse table, in tablets of bounded size."""
    settings = settings_of(conf, warehouse=warehouse, spark_master=None)
    if fmt is not None and fmt not in ("csv", "parquet", "json"):
        fail(f"--format must be csv, parquet or json, not {fmt!r}")
    spark = _spark(settings)
    from starscan.app.loader import load_table
    from starscan.tables.catalog import Warehouse

    wh = Warehouse.of(settings, listing_ttl_s=0)
    with domain_errors():
        result = load_table(spark, wh, db, table, source, fmt=fmt, partition_by=list(partition_by or []),
                            tablet_target_bytes=settings.tablet_target_bytes, mode=mode)
    typer.echo(f"loaded {result['rows']:,} rows into {db}.{table}: {result['files']} files, "
               f"{result['bytes']:,} bytes in {result['seconds']:.1f} s")


@app.command()
def scan(
    table: str = typer.Argument(..., help="db.table"),
    columns: str = typer.Option("*", "--columns", help="comma-separated columns"),
    where: str | None = typer.Option(None, "--where", help="WHERE predicate"),
    fe: str = FeOpt, user: str = UserOpt, password: str = PasswordOpt, cacert: Path | None = CaOpt,
    batch_size: int = typer.Option(4096, "--batch-size"),
) -> None:
    """Read a table through a running server like a StarRocks connector; print rows, bytes, MB/s."""
    from starscan.client import ScanStats

    db, name, sql = _select(table, columns, where)
    client = client_of(fe, user, password, cacert)
    stats = ScanStats()
    started = time.perf_counter()
    with client_errors():
        for _ in client.batches(db, name, sql, batch_size, stats=stats):
            pass
    seconds = time.perf_counter() - started
    mb = stats.bytes / 1e6
    first = f"{stats.first_batch_s:.3f} s" if stats.first_batch_s is not None else "-"
    typer.echo(f"rows={stats.rows:,} batches={stats.batches} arrow_bytes={stats.bytes:,} scanners={stats.scanners} "
               f"seconds={seconds:.3f} throughput={mb / seconds if seconds else 0:.1f} MB/s first_batch={first}")


def _select(table: str, columns: str, where: str | None) -> tuple[str, str, str]:
    """(db, table, the SELECT of ``columns`` and ``where``) for a `db.table` argument, with
    names quoted as the client quotes them (a backtick in a name is doubled)."""
    from starscan.client.reader import select_sql

    db, _, name = table.partition(".")
    if not db or not name:
        fail("table must be db.table", EXIT_USAGE)
    names = [c.strip() for c in columns.split(",") if c.strip()]
    return db, name, select_sql(db, name, None if names in ([], ["*"]) else names, where)


@app.command()
def plan(
    table: str = typer.Argument(..., help="db.table"),
    columns: str = typer.Option("*", "--columns", help="comma-separated columns"),
    where: str | None = typer.Option(None, "--where", help="WHERE predicate"),
    sql: str | None = typer.Option(None, "--sql", help="the whole SELECT instead of --columns/--where"),
    fe: str = FeOpt, user: str = UserOpt, password: str = PasswordOpt, cacert: Path | None = CaOpt,
) -> None:
    """Ask the FE for a scan plan (_query_plan) and print its JSON answer: the opaque plan and the tablets with their routings."""
    import json

    db, name, selected = _select(table, columns, where)
    sql = sql if sql is not None else selected
    with client_errors():
        answer = client_of(fe, user, password, cacert).plan(db, name, sql)
    typer.echo(json.dumps(answer))


@app.command()
def follow(
    table: str = typer.Argument(..., help="db.table"),
    consumer: str = typer.Option(..., "--consumer", help="the consumer's name: the server keeps its position"),
    into: Path = typer.Option(..., "--into", help="folder for one Parquet file per step, named SINCE-VERSION.parquet"),
    columns: str = typer.Option("*", "--columns", help="comma-separated columns"),
    where: str | None = typer.Option(None, "--where", help="WHERE predicate"),
    fe: str = FeOpt, user: str = UserOpt, password: str = PasswordOpt, cacert: Path | None = CaOpt,
    poll_s: float = typer.Option(5.0, "--poll-s", help="seconds between polls while nothing is new"),
    stop_when_idle: bool = typer.Option(False, "--stop-when-idle", help="exit at the first poll with nothing new"),
) -> None:
    """Write what is appended to a table into Parquet files, exactly once across crashes.

    Each step's rows go to a file renamed into place (SINCE-VERSION.parquet, `start` for
    the first read), then the position is committed. After a crash, a file whose range starts
    at the committed position is the step that was written but not committed: its version is
    committed first, so no row is written twice or lost."""
    from starscan.client.export import follow_into

    db, name, sql = _select(table, columns, where)
    client = client_of(fe, user, password, cacert)
    with client_errors():
        try:
            for target, rows in follow_into(client, db, name, sql, consumer, into, poll_s, stop_when_idle):
                typer.echo(f"{target.name}: {rows:,} rows")
        except OSError as exc:  # the client's own failures are its errors: this is the folder's
            fail(f"cannot write into {into}: {exc}", EXIT_USAGE)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

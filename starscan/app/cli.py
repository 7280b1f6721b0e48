"""The `starscan` command line."""

from __future__ import annotations

import getpass
import sys
import time
from contextlib import contextmanager
from pathlib import Path

try:
    import typer
except ModuleNotFoundError as missing:  # `pip install starscan` alone: the reading side, no server
    raise SystemExit(f"the starscan command needs the server's packages ({missing.name} is not installed): "
                     "pip install 'starscan[server]'") from None

from starscan import __version__
from starscan.core.errors import (
    ConfigError,
    InvalidInput,
    JavaMissingError,
    NotAuthorized,
    StarscanError,
    Unauthorized,
    UnknownUser,
)
from starscan.settings.config import Settings, load_settings

app = typer.Typer(add_completion=False, help="Serve Spark tables to StarRocks readers.", no_args_is_help=True,
                  rich_markup_mode="markdown")  # `code` in help renders as code, not backticks
user_app = typer.Typer(help="Manage users and grants in the users file.", no_args_is_help=True)
app.add_typer(user_app, name="user")
secret_app = typer.Typer(help="Manage the plan-signing secret.", no_args_is_help=True)
app.add_typer(secret_app, name="secret")


ConfOpt = typer.Option(None, "--conf", help="starscan.conf file (key = value)")
WarehouseOpt = typer.Option(None, "--warehouse", help="warehouse: a local folder or a URI (s3://bucket/prefix)")
# One set of options for every command that talks to a running server.
FeOpt = typer.Option("127.0.0.1:8030", "--fe", help="FE address: host:port or http(s)://host:port")
UserOpt = typer.Option("root", "--user", "-u", help="user (admin for scanners and config)")
PasswordOpt = typer.Option("", "--password", "-p", help="password ('-': read it from stdin)")
CaOpt = typer.Option(None, "--cacert", help="CA bundle to verify an https FE (and a TLS BE) with")


# Exit codes (docs/operations.md "CLI"): 0 done; 1 the server answered with an error (not found, bad
# value, refused change); 2 bad usage or configuration; 3 Java/Spark cannot start; 4 a port
# cannot be bound; 5 the server cannot be reached; 6 authentication or permission refused.
EXIT_SERVER_ERROR, EXIT_USAGE, EXIT_JAVA, EXIT_PORT, EXIT_UNREACHABLE, EXIT_AUTH = 1, 2, 3, 4, 5, 6


def exit_code(exc: StarscanError) -> int:
    """The CLI's exit code for a domain error."""
    if isinstance(exc, (InvalidInput, UnknownUser, ConfigError)):
        return EXIT_USAGE
    if isinstance(exc, JavaMissingError):
        return EXIT_JAVA
    if isinstance(exc, (Unauthorized, NotAuthorized)):
        return EXIT_AUTH
    return EXIT_SERVER_ERROR


@contextmanager
def _domain_errors():
    """A domain error ends the command with its message and its exit code."""
    try:
        yield
    except StarscanError as exc:
        _fail(exc.message, exit_code(exc))


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _settings(conf: Path | None, **overrides) -> Settings:
    try:
        return load_settings(conf, **overrides)
    except StarscanError as exc:
        _fail(exc.message)
        raise  # unreachable


def _logging(fmt: str = "human", level: str = "INFO") -> None:
    from starscan.core.logs import setup_logging

    setup_logging(fmt, level)


def _spark(settings: Settings):
    from starscan.spark.session import build_session

    try:
        return build_session(settings)
    except StarscanError as exc:
        _fail(exc.message, EXIT_JAVA)


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"starscan {__version__}")


LogFormatOpt = typer.Option(None, "--log-format", help="human (default) or json: one JSON object per log line")
ROLES = ("all", "fe", "be")


def _run_server(fe: bool, be: bool, conf, log_format, **overrides) -> None:
    """A node until SIGTERM/SIGINT (starscan.app.node); its failures as the documented exit codes."""
    from starscan.app.node import CannotListen, run_node

    settings = _settings(conf, log_format=log_format, **overrides)
    _logging(settings.log_format, settings.log_level)
    try:
        run_node(settings, fe=fe, be=be)
    except JavaMissingError as exc:
        _fail(exc.message, EXIT_JAVA)
    except StarscanError as exc:
        _fail(exc.message, exit_code(exc))
    except CannotListen as exc:
        _fail(str(exc), EXIT_PORT)


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
        _fail(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
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

    settings = _settings(conf, warehouse=warehouse)
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
    settings = _settings(conf, warehouse=warehouse, spark_master=None)
    if fmt is not None and fmt not in ("csv", "parquet", "json"):
        _fail(f"--format must be csv, parquet or json, not {fmt!r}")
    spark = _spark(settings)
    from starscan.app.loader import load_table
    from starscan.tables.catalog import Warehouse

    wh = Warehouse.of(settings, listing_ttl_s=0)
    with _domain_errors():
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
    client = _client(fe, user, password, cacert)
    stats = ScanStats()
    started = time.perf_counter()
    with _read_errors(client.fe):
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
        _fail("table must be db.table", EXIT_USAGE)
    names = [c.strip() for c in columns.split(",") if c.strip()]
    return db, name, select_sql(db, name, None if names in ([], ["*"]) else names, where)


def _password(password: str) -> str:
    return sys.stdin.readline().rstrip("\n") if password == "-" else password


def _client(fe: str, user: str, password: str, cacert: Path | None):
    """The bundled client with the command's connection options."""
    import ssl

    from starscan.client import StarscanClient

    context = ssl.create_default_context(cafile=str(cacert)) if cacert else None
    return StarscanClient(fe, user, _password(password), ssl_context=context)


@contextmanager
def _read_errors(fe: str):
    """The client's failures end the command with the documented exit codes: 6 refused
    credentials or grants, 5 a server that cannot be reached (or is unavailable), 1 any other
    error the server answered with."""
    import httpx

    from starscan.client import AuthenticationError, NetworkError, PermissionDenied, PlanError, ReadError, ScanError
    from starscan.client.errors import from_http, from_scan_error

    try:
        yield
    except ReadError as exc:
        if isinstance(exc, PlanError):
            exc = from_http(exc.http_status, exc.body, exc.kind)
        elif isinstance(exc, ScanError):
            exc = from_scan_error(exc)
        if isinstance(exc, (AuthenticationError, PermissionDenied)):
            _fail(f"refused: {exc.message}", EXIT_AUTH)
        if isinstance(exc, NetworkError):
            _fail(exc.message, EXIT_UNREACHABLE)
        _fail(exc.message, EXIT_SERVER_ERROR)
    except (OSError, httpx.HTTPError) as exc:
        _fail(f"cannot reach starscan at {fe}: {exc}", EXIT_UNREACHABLE)


def _users(conf: Path | None, warehouse: str | None):
    from starscan.security.users import UserStore

    settings = _settings(conf, warehouse=warehouse)
    return UserStore(settings.effective_users_file)


def _ask_password(password: str | None) -> str:
    if password is not None:
        return password
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    return getpass.getpass("password: ")


@user_app.command("add")
def user_add(name: str, password: str | None = typer.Option(None, "--password", help="(read from stdin/prompt if omitted)"),
             grant: list[str] | None = typer.Option(None, "--grant", help="db.table, db.* or *.* (repeatable)"),
             no_password: bool = typer.Option(False, "--no-password", help="a user who signs in with bearer tokens only"),
             conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """Add a user."""
    store = _users(conf, warehouse)
    with _domain_errors():
        store.set_password(name, None if no_password else _ask_password(password), create=True)
        for g in grant or []:
            store.grant(name, g)
    typer.echo(f"user {name} added")


@user_app.command("passwd")
def user_passwd(name: str, password: str | None = typer.Option(None, "--password"),
                conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """Change a user's password."""
    with _domain_errors():
        _users(conf, warehouse).set_password(name, _ask_password(password))
    typer.echo(f"password of {name} changed")


@user_app.command("grant")
def user_grant(name: str, grant: str = typer.Argument(..., help="db.table, db.* or *.*"),
               revoke: bool = typer.Option(False, "--revoke", help="remove the grant instead"),
               direct_read: bool = typer.Option(False, "--direct-read",
                                                help="DIRECT_READ instead of SELECT: plans that name the table's files "
                                                     "(docs/direct-reads.md)"),
               conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """Grant (or --revoke) SELECT, or with --direct-read DIRECT_READ, on db.table, db.* or *.*."""
    from starscan.security.users import GRANT_PREFIX

    with _domain_errors():
        _users(conf, warehouse).grant(name, (GRANT_PREFIX + grant) if direct_read else grant, revoke=revoke)
    typer.echo(f"{'revoked' if revoke else 'granted'} {'DIRECT_READ' if direct_read else 'SELECT'} on {grant} "
               f"{'from' if revoke else 'to'} {name}")


@user_app.command("revoke")
def user_revoke(name: str, grant: str = typer.Argument(..., help="db.table, db.* or *.*"),
                direct_read: bool = typer.Option(False, "--direct-read", help="revoke DIRECT_READ, not SELECT"),
                conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """Revoke SELECT (or DIRECT_READ) on db.table, db.* or *.* (running servers notice at once)."""
    user_grant(name, grant, revoke=True, direct_read=direct_read, conf=conf, warehouse=warehouse)


@secret_app.command("rotate")
def secret_rotate(conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """Make a new plan-signing secret. Running servers switch to it within a second and still
    accept plans signed with the previous one for plan_secret_grace_s."""
    from starscan.plans.secrets import rotate_secret

    settings = _settings(conf, warehouse=warehouse)
    if settings.plan_secret is not None:
        _fail("plan_secret is set in the configuration: rotate it there (move the old value to plan_secret_previous)")
    kid = rotate_secret(settings.state_path)
    typer.echo(f"new plan secret {kid} in {settings.state_path}; the previous one is accepted for "
               f"{settings.plan_secret_grace_s} s")


@user_app.command("list")
def user_list(conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """List users and their grants."""
    for name, grants in sorted(_users(conf, warehouse).users().items()):
        typer.echo(f"{name}\t{', '.join(grants)}")


# ---- commands that talk to a running server over HTTP ------------------------------------

scanners_app = typer.Typer(help="List and close the scanners of a running server (admin).", no_args_is_help=True)
app.add_typer(scanners_app, name="scanners")
config_app = typer.Typer(help="Show (`config` / `config show`) or change (`config set KEY VALUE`) a running server's "
                              "configuration (admin).", invoke_without_command=True)
app.add_typer(config_app, name="config")



def _fe_url(fe: str) -> str:
    return fe.rstrip("/") if "://" in fe else f"http://{fe}"


def _http(method: str, fe: str, path: str, user: str, password: str, cacert: Path | None = None, **kwargs):
    """One request to the FE; failures become the documented exit codes."""
    import httpx

    try:
        resp = httpx.request(method, _fe_url(fe) + path, auth=(user, _password(password)), timeout=30,
                             verify=str(cacert) if cacert else True, **kwargs)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach starscan at {_fe_url(fe)}: {exc}", EXIT_UNREACHABLE)
    if resp.status_code in (401, 403):
        _fail(f"refused ({resp.status_code}): {_message(resp)}", EXIT_AUTH)
    if resp.status_code >= 400:
        _fail(f"{_message(resp)} (HTTP {resp.status_code})", EXIT_SERVER_ERROR)
    return resp


def _message(resp) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        return str(body.get("exception") or body.get("msg") or body.get("message") or body)
    return str(body)


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
    resp = _http("POST", fe, f"/api/{db}/{name}/_query_plan", user, password, cacert, content=json.dumps({"sql": sql}))
    typer.echo(resp.text)


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
    client = _client(fe, user, password, cacert)
    with _read_errors(client.fe):
        for target, rows in follow_into(client, db, name, sql, consumer, into, poll_s, stop_when_idle):
            typer.echo(f"{target.name}: {rows:,} rows")


@scanners_app.command("list")
def scanners_list(fe: str = FeOpt, user: str = UserOpt, password: str = PasswordOpt, cacert: Path | None = CaOpt,
                  as_json: bool = typer.Option(False, "--json", help="print the JSON answer")) -> None:
    """List the open scanners: user, table, rows and bytes sent, throughput, age, idle time, Spark jobs."""
    from rich.console import Console
    from rich.table import Table

    from starscan.planner.admin import human_bytes

    body = _http("GET", fe, "/api/scanners", user, password, cacert).json()
    if as_json:
        import json

        typer.echo(json.dumps(body, indent=2))
        return
    out = Table("context_id", "user", "table", "rows", "bytes", "throughput", "age", "idle", "state", "spark jobs")
    for s in body["scanners"]:
        out.add_row(s["context_id"], str(s["user"] or "-"), str(s["table"] or "-"), f"{s['rows_sent']:,}",
                    human_bytes(s["bytes_sent"]), human_bytes(s["throughput_bytes_s"]) + "/s", f"{s['age_s']:.0f} s",
                    f"{s['idle_s']:.0f} s", s["state"], ", ".join(map(str, s["spark_jobs"])) or "-")
    Console(width=200).print(out)


@scanners_app.command("close")
def scanners_close(context_id: str = typer.Argument(..., help="the scanner's context_id"), fe: str = FeOpt,
                   user: str = UserOpt, password: str = PasswordOpt, cacert: Path | None = CaOpt) -> None:
    """Close a scanner: its Spark job is cancelled and its reader gets NOT_FOUND. Exit 1 if there is no such scanner."""
    body = _http("POST", fe, f"/api/scanners/{context_id}/close", user, password, cacert).json()
    typer.echo(f"closed {context_id} after {body.get('rows_sent', 0):,} rows")


@config_app.callback()
def config_main(ctx: typer.Context, fe: str = FeOpt, user: str = UserOpt, password: str = PasswordOpt,
                cacert: Path | None = CaOpt) -> None:
    """Show a running server's effective configuration (GET /varz; secrets masked)."""
    ctx.obj = {"fe": fe, "user": user, "password": password, "cacert": cacert}
    if ctx.invoked_subcommand is None:
        _config_show(ctx.obj)


def _config_show(conn: dict) -> None:
    body = _http("GET", conn["fe"], "/varz", conn["user"], conn["password"], conn["cacert"]).json()
    runtime = set(body.get("runtime_changeable", []))
    for key, value in sorted(body["config"].items()):
        mark = "  # can change at run time" if key in runtime else ""
        typer.echo(f"{key} = {_conf_value(value)}{mark}")


def _conf_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return "; ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


@config_app.command("show")
def config_show(ctx: typer.Context) -> None:
    """Print every key = value (keys that can change at run time are marked)."""
    _config_show(ctx.obj)


@config_app.command("reference")
def config_reference() -> None:
    """Print the configuration reference (docs/configuration.md) generated from the settings model."""
    from starscan.settings.reference import render

    typer.echo(render(), nl=False)


@config_app.command("set")
def config_set(ctx: typer.Context, key: str = typer.Argument(..., help="configuration key"),
               value: str = typer.Argument(..., help="new value")) -> None:
    """Change a key on the running server (POST /api/update_config). Keys that need a restart are refused (exit 1)."""
    conn = ctx.obj
    _http("POST", conn["fe"], "/api/update_config", conn["user"], conn["password"], conn["cacert"], params={key: value})
    typer.echo(f"{key} = {value}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()

"""`starscan scanners ...` and `starscan config ...`: a running server's scanners and
configuration, over the FE's admin HTTP API (an admin user), through starscan.client's
``AdminClient``."""

from __future__ import annotations

from pathlib import Path

import typer

from starscan.app.cli_common import CaOpt, FeOpt, PasswordOpt, UserOpt, admin_of, client_errors
from starscan.settings.config import conf_text

scanners_app = typer.Typer(help="List and close the scanners of a running server (admin).", no_args_is_help=True)
config_app = typer.Typer(help="Show (`config` / `config show`) or change (`config set KEY VALUE`) a running server's "
                              "configuration (admin).", invoke_without_command=True)


@scanners_app.command("list")
def scanners_list(fe: str = FeOpt, user: str = UserOpt, password: str = PasswordOpt, cacert: Path | None = CaOpt,
                  as_json: bool = typer.Option(False, "--json", help="print the JSON answer")) -> None:
    """List the open scanners: user, table, rows and bytes sent, throughput, age, idle time, Spark jobs."""
    from rich.console import Console
    from rich.table import Table

    from starscan.planner.admin import human_bytes

    with client_errors():
        scanners = admin_of(fe, user, password, cacert).scanners()
    if as_json:
        import json

        typer.echo(json.dumps({"scanners": scanners}, indent=2))
        return
    out = Table("context_id", "user", "table", "rows", "bytes", "throughput", "age", "idle", "state", "spark jobs")
    for s in scanners:
        out.add_row(s["context_id"], str(s["user"] or "-"), str(s["table"] or "-"), f"{s['rows_sent']:,}",
                    human_bytes(s["bytes_sent"]), human_bytes(s["throughput_bytes_s"]) + "/s", f"{s['age_s']:.0f} s",
                    f"{s['idle_s']:.0f} s", s["state"], ", ".join(map(str, s["spark_jobs"])) or "-")
    Console(width=200).print(out)


@scanners_app.command("close")
def scanners_close(context_id: str = typer.Argument(..., help="the scanner's context_id"), fe: str = FeOpt,
                   user: str = UserOpt, password: str = PasswordOpt, cacert: Path | None = CaOpt) -> None:
    """Close a scanner: its Spark job is cancelled and its reader gets NOT_FOUND. Exit 1 if there is no such scanner."""
    with client_errors():
        body = admin_of(fe, user, password, cacert).close_scanner(context_id)
    typer.echo(f"closed {context_id} after {body.get('rows_sent', 0):,} rows")


@config_app.callback()
def config_main(ctx: typer.Context, fe: str = FeOpt, user: str = UserOpt, password: str = PasswordOpt,
                cacert: Path | None = CaOpt) -> None:
    """Show a running server's effective configuration (GET /varz; secrets masked)."""
    ctx.obj = {"fe": fe, "user": user, "password": password, "cacert": cacert}
    if ctx.invoked_subcommand is None:
        _config_show(ctx.obj)


def _config_show(conn: dict) -> None:
    with client_errors():
        body = admin_of(conn["fe"], conn["user"], conn["password"], conn["cacert"]).config()
    runtime = set(body.get("runtime_changeable", []))
    for key, value in sorted(body["config"].items()):
        mark = "  # can change at run time" if key in runtime else ""
        typer.echo(f"{key} = {conf_text(value)}{mark}")




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
    with client_errors():
        admin_of(conn["fe"], conn["user"], conn["password"], conn["cacert"]).update_config(key, value)
    typer.echo(f"{key} = {value}")

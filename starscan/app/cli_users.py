"""`starscan user ...` and `starscan secret ...`: the users file and the plan-signing secret,
changed where they are kept (running servers notice at once)."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

import typer

from starscan.app.cli_common import ConfOpt, WarehouseOpt, domain_errors, fail, settings_of

user_app = typer.Typer(help="Manage users and grants in the users file.", no_args_is_help=True)
secret_app = typer.Typer(help="Manage the plan-signing secret.", no_args_is_help=True)


def _users(conf: Path | None, warehouse: str | None):
    from starscan.security.users import UserStore

    settings = settings_of(conf, warehouse=warehouse)
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
    with domain_errors():
        store.set_password(name, None if no_password else _ask_password(password), create=True)
        for g in grant or []:
            store.grant(name, g)
    typer.echo(f"user {name} added")


@user_app.command("passwd")
def user_passwd(name: str, password: str | None = typer.Option(None, "--password"),
                conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """Change a user's password."""
    with domain_errors():
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

    with domain_errors():
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

    settings = settings_of(conf, warehouse=warehouse)
    if settings.plan_secret is not None:
        fail("plan_secret is set in the configuration: rotate it there (move the old value to plan_secret_previous)")
    kid = rotate_secret(settings.state_path)
    typer.echo(f"new plan secret {kid} in {settings.state_path}; the previous one is accepted for "
               f"{settings.plan_secret_grace_s} s")


@user_app.command("list")
def user_list(conf: Path | None = ConfOpt, warehouse: str | None = WarehouseOpt) -> None:
    """List users and their grants."""
    for name, grants in sorted(_users(conf, warehouse).users().items()):
        typer.echo(f"{name}\t{', '.join(grants)}")



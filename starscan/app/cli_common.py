"""What the `starscan` commands share: the options that name a configuration or a running
server, the exit codes (docs/operations.md "CLI") and how a command fails with one."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

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

if TYPE_CHECKING:
    import ssl

    from starscan.client import AdminClient, ReadError, StarscanClient

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
def domain_errors():
    """A domain error ends the command with its message and its exit code."""
    try:
        yield
    except StarscanError as exc:
        fail(exc.message, exit_code(exc))


def fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def settings_of(conf: Path | None, **overrides) -> Settings:
    try:
        return load_settings(conf, **overrides)
    except StarscanError as exc:
        fail(exc.message)
        raise  # unreachable



def password_of(password: str) -> str:
    return sys.stdin.readline().rstrip("\n") if password == "-" else password


# ---- commands that talk to a running server: through starscan.client ----
def _ssl_context(cacert: Path | None) -> ssl.SSLContext | None:
    import ssl

    return ssl.create_default_context(cafile=str(cacert)) if cacert else None


def client_of(fe: str, user: str, password: str, cacert: Path | None) -> StarscanClient:
    """The bundled client with a command's connection options."""
    from starscan.client import StarscanClient

    return StarscanClient(fe, user, password_of(password), ssl_context=_ssl_context(cacert))


def admin_of(fe: str, user: str, password: str, cacert: Path | None) -> AdminClient:
    """The bundled admin client (scanners, configuration) with a command's connection options."""
    from starscan.client import AdminClient

    return AdminClient(fe, user, password_of(password), ssl_context=_ssl_context(cacert))


def read_exit_code(exc: ReadError) -> int:
    """The exit code of a client error, by its class: 6 refused credentials or grants, 5 a
    server that cannot be reached (or is unavailable for now), 2 an option, 1 any other
    error the server answered with."""
    from starscan.client import AuthenticationError, NetworkError, OptionError, PermissionDenied

    if isinstance(exc, (AuthenticationError, PermissionDenied)):
        return EXIT_AUTH
    if isinstance(exc, NetworkError):
        return EXIT_UNREACHABLE
    if isinstance(exc, OptionError):
        return EXIT_USAGE
    return EXIT_SERVER_ERROR


@contextmanager
def client_errors():
    """A failure of starscan.client ends the command with its message and exit code."""
    from starscan.client import ReadError

    try:
        yield
    except ReadError as exc:
        code = read_exit_code(exc)
        status = f" ({exc.status})" if isinstance(exc.status, int) else ""
        fail(f"refused{status}: {exc.message}" if code == EXIT_AUTH else
             f"{exc.message}{status if code == EXIT_SERVER_ERROR else ''}", code)

"""The client's one error tree (starscan.client.errors): every failure a read raises is a
ReadError, classified by the kind a starscan server names (an HTTP header, an opt-in Thrift
status entry) or, from a server that names none, by the status code; never by the words of
a message."""

from __future__ import annotations

import pytest

from starscan.client import (
    AuthenticationError,
    FailoverMismatch,
    NetworkError,
    PermissionDenied,
    QueryError,
    ReadError,
    ScanIntegrityError,
    SnapshotGoneError,
)
from starscan.client.errors import from_http, from_reply, from_status, is_lost
from starscan.core import errors as server_errors
from starscan.core.protocol_extensions import ERROR_KIND_PREFIX
from starscan.core.thrift_defs import wire

CODES = wire.TStatusCode


def test_every_failure_a_read_raises_is_a_read_error():
    """Every exception class the client defines or exports is a ReadError (found by looking,
    not listed here)."""
    import inspect

    import starscan.client as client_package
    from starscan.client import errors as client_errors

    defined = {cls for module in (client_errors, client_package) for _, cls in inspect.getmembers(module, inspect.isclass)
               if issubclass(cls, BaseException) and cls.__module__.startswith("starscan.client")}
    assert {ScanIntegrityError, FailoverMismatch, NetworkError} <= defined
    for cls in defined:
        assert issubclass(cls, ReadError), cls
    with pytest.raises(ReadError):
        raise FailoverMismatch("ctx", 10, 5)


@pytest.mark.parametrize(("error", "expected"), [
    (server_errors.Unauthorized("Access denied for u@h"), AuthenticationError),
    (server_errors.SelectPrivilegeMissing("Access denied; you need ..."), PermissionDenied),
    (server_errors.CredentialsRejected("passwd does not match"), AuthenticationError),
    (server_errors.PrivilegeMissing("needs the DIRECT_READ privilege"), PermissionDenied),
    (server_errors.SnapshotGone("table t version 1 is gone"), SnapshotGoneError),
    (server_errors.PlanExpired("query plan q expired"), SnapshotGoneError),
    (server_errors.TableRewritten("rewritten"), SnapshotGoneError),
    (server_errors.VersionUnknown("never observed"), SnapshotGoneError),
    (server_errors.ContextNotFound("context_id: x not found"), NetworkError),
    (server_errors.NoLiveBackend("no BE"), NetworkError),
    (server_errors.TooManyRequests("slow down"), NetworkError),
    (server_errors.TableNotFound("db.t"), QueryError),
    (server_errors.SqlInvalid("unknown column"), QueryError),
    (server_errors.NotFound("tablet_id: 3 not found"), QueryError),
])
def test_a_starscan_servers_kind_decides_the_class_on_both_wires(error, expected):
    """The same kind gives the same class over HTTP and Thrift, whatever the message says
    (the messages here would mislead a classifier that read words)."""
    assert type(from_http(error.http_status, '{"exception": "privilege grant is gone expired"}', error.kind)) is expected
    code = getattr(CODES, error.status_code)
    status = wire.TStatus(status_code=code, error_msgs=["privilege grant context is gone", ERROR_KIND_PREFIX + error.kind])
    got = from_reply("open_scanner", status)
    assert type(got) is expected
    assert got.kind == error.kind and got.message == "open_scanner: privilege grant context is gone"
    assert got.call == "open_scanner" and got.status == error.status_code


def test_without_a_kind_the_status_code_decides():
    """A StarRocks server names no kind."""
    assert type(from_http(401, '{"msg": "x"}')) is AuthenticationError
    assert type(from_http(403, '{"exception": "x"}')) is PermissionDenied
    assert type(from_http(410, '{"exception": "x"}')) is SnapshotGoneError
    assert type(from_http(503, '{"exception": "x"}')) is NetworkError
    assert type(from_http(404, '{"exception": "the version is unknown"}')) is QueryError  # words decide nothing
    assert type(from_status("open_scanner", CODES.NOT_AUTHORIZED, ["privilege"])) is AuthenticationError
    assert type(from_status("get_next", CODES.NOT_FOUND, ["whatever"])) is NetworkError  # the scanner is gone
    assert type(from_status("open_scanner", CODES.NOT_FOUND, ["context"])) is QueryError
    assert type(from_status("get_next", CODES.TIMEOUT, [])) is NetworkError


def test_a_lost_scanner_is_told_by_its_kind_or_code():
    def status(code, *msgs):
        return wire.TStatus(status_code=code, error_msgs=list(msgs))

    assert is_lost("get_next", status(CODES.NOT_FOUND, "x", ERROR_KIND_PREFIX + "ContextNotFound"))
    assert not is_lost("get_next", status(CODES.NOT_FOUND, "offset", ERROR_KIND_PREFIX + "NotFound"))
    assert is_lost("get_next", status(CODES.CANCELLED, "x", ERROR_KIND_PREFIX + "ServerShuttingDown"))
    assert not is_lost("get_next", status(CODES.CANCELLED, "x", ERROR_KIND_PREFIX + "ScanCancelled"))
    assert is_lost("get_next", status(CODES.NOT_FOUND, "context_id: x not found"))  # a BE that names no kind
    assert is_lost("open_scanner", status(CODES.SERVICE_UNAVAILABLE, "no Spark"))
    assert not is_lost("open_scanner", status(CODES.NOT_FOUND, "tablet_id: 3 not found"))


def _server_kinds() -> list[type]:
    """Every error kind a starscan server can name: the classes of starscan.core.errors."""
    import inspect

    return [cls for _, cls in inspect.getmembers(server_errors, inspect.isclass)
            if issubclass(cls, server_errors.StarscanError) and cls.__module__ == server_errors.__name__]


@pytest.mark.parametrize("kind", _server_kinds(), ids=lambda cls: cls.__name__)
def test_every_kind_the_server_names_has_a_class_of_its_own_choosing(kind):
    """A kind the client has no entry for would fall back to the status code: each of the
    server's kinds is classified by name, and the class is the same over HTTP and Thrift."""
    from starscan.client.errors import _BY_KIND

    assert kind.__name__ in _BY_KIND, f"{kind.__name__} has no class in starscan.client.errors._BY_KIND"
    expected = _BY_KIND[kind.__name__]
    assert type(from_http(kind.http_status, "{}", kind.__name__)) is expected
    status = wire.TStatus(status_code=getattr(CODES, kind.status_code), error_msgs=["x", ERROR_KIND_PREFIX + kind.__name__])
    assert type(from_reply("get_next", status)) is expected


def test_server_failures_are_not_the_callers_query_and_direct_read_refusals_are_their_own():
    from starscan.client import DirectReadDenied, DirectReadError, ServerError

    for failure in (server_errors.InternalError("boom"), server_errors.ScanFailed("Spark scan of t failed")):
        assert type(from_http(failure.http_status, "{}", failure.kind)) is ServerError
    assert type(from_status("get_next", CODES.INTERNAL_ERROR, ["x"])) is ServerError  # a StarRocks BE's failure
    assert type(from_http(500, '{"exception": "x"}')) is ServerError
    denied = from_http(403, "{}", server_errors.DirectReadDenied("needs DIRECT_READ").kind)
    assert isinstance(denied, DirectReadDenied) and isinstance(denied, DirectReadError)
    assert isinstance(denied, PermissionDenied)


def test_option_errors_are_the_clients_and_value_errors():
    from starscan.client import OptionError, ReadOptions, connect

    for bad in (lambda: ReadOptions.of({"starrocks.batch.size": "many"}), lambda: connect("h:1", "u", "", max_workers=0),
                lambda: ReadOptions.of({"no.such.option": 1})):
        with pytest.raises(OptionError) as caught:
            bad()
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, ReadError)


def test_every_raise_site_of_the_client_raises_a_read_error():
    """Read from the source: each ``raise Name(...)`` in starscan.client raises a ReadError,
    except the package's internal signals, each caught inside it (named here with where)."""
    import ast
    import importlib
    import pkgutil

    import starscan.client as client_package

    internal = {
        "Unreadable": "direct.py: a tablet the reader sends to the BE, or DirectReadError",
        "_BackendLost": "protocol.py: scan_group moves the scanner on, or raises its ReadError",
        "TTransportException": "transport.py: thriftpy2's own signal, wrapped by protocol.py as NetworkError",
        "AssertionError": "unreachable code",
    }
    seen = set()
    for info in pkgutil.iter_modules(client_package.__path__):
        module = importlib.import_module(f"starscan.client.{info.name}")
        tree = ast.parse(open(module.__file__, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                name = node.exc.func.id
                seen.add(name)
                if name in internal:
                    continue
                cls = getattr(module, name, None)
                if callable(cls) and not isinstance(cls, type):  # a factory: by its declared return type
                    import typing

                    cls = typing.get_type_hints(cls).get("return")
                assert isinstance(cls, type) and issubclass(cls, ReadError), \
                    f"starscan/client/{info.name}.py:{node.lineno} raises {name}, not a ReadError"
    assert {"NetworkError", "QueryError", "OptionError", "DirectReadError"} <= seen  # the walk found the sites

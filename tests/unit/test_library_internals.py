"""The internals of thriftpy2, uvicorn and mysql-mimic the BE and FE reach
(starscan/core/thriftpy2_internals.py, planner/uvicorn_internals.py,
planner/mysql/mimic_internals.py) are what they were tested on, and the installed releases are
in the tested ranges: a release that renamed or reshaped one fails here (and the server
refuses to start on it), not in a server that serves wrong bytes or drops its guards."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.specifiers import SpecifierSet

from starscan.core import thriftpy2_internals
from starscan.core.errors import ConfigError
from starscan.planner import uvicorn_internals
from starscan.planner.mysql import mimic_internals

ADAPTERS = {"thriftpy2": thriftpy2_internals, "uvicorn": uvicorn_internals, "mysql-mimic": mimic_internals}


@pytest.mark.parametrize("library", sorted(ADAPTERS))
def test_every_internal_the_server_relies_on_is_as_tested(library):
    assert ADAPTERS[library].check() == []
    ADAPTERS[library].require()  # and so the server starts


@pytest.mark.parametrize("library", sorted(ADAPTERS))
def test_the_installed_release_is_in_the_tested_range(library):
    installed = version(library)
    assert installed in SpecifierSet(ADAPTERS[library].TESTED_ON), (
        f"{library} {installed} is outside {ADAPTERS[library].TESTED_ON}: check {ADAPTERS[library].__name__} "
        "against it (the whole suite) and widen the range")


def test_a_reshaped_internal_is_named_and_stops_the_server(monkeypatch):
    """What a changed release looks like to the checks: a hook with another call shape, and a
    reader that no longer looks ``skip`` up (the bounded skip would silently do nothing)."""
    def handle(self, client, address):  # a new parameter
        raise AssertionError("never called")

    monkeypatch.setattr(thriftpy2_internals.TThreadedServer, "handle", handle)
    monkeypatch.setattr(thriftpy2_internals.binary, "read_val", lambda *args: None)
    problems = thriftpy2_internals.check()
    assert "TThreadedServer.handle takes ('self', 'client', 'address'), not ('self', 'client')" in problems
    assert "thriftpy2.protocol.binary.read_val no longer calls the module's skip" in problems
    with pytest.raises(ConfigError, match="not what the BE was tested on"):
        thriftpy2_internals.require()
    monkeypatch.delattr(uvicorn_internals.HttpToolsProtocol, "on_headers_complete")
    assert "HttpToolsProtocol.on_headers_complete is gone" in uvicorn_internals.check()


def test_a_mysql_mimic_that_makes_its_connections_otherwise_stops_the_port(monkeypatch):
    """The port streams through its own connection class, put where mysql-mimic's server
    makes connections: a release that makes them elsewhere, or reshaped the writer it
    overrides, is named, and the port refuses to start."""
    from mysql_mimic import server as mimic_server
    from mysql_mimic.connection import Connection

    def write_text_resultset(self, result_set, more):  # a new parameter
        raise AssertionError("never called")

    monkeypatch.setattr(mimic_server, "Connection", object)
    monkeypatch.setattr(Connection, "write_text_resultset", write_text_resultset)
    problems = mimic_internals.check()
    assert "mysql_mimic.server no longer makes its connections with mysql_mimic.connection.Connection" in problems
    assert "Connection.write_text_resultset takes ('self', 'result_set', 'more'), not ('self', 'result_set')" \
        in problems
    with pytest.raises(ConfigError, match="not what the MySQL port was tested on"):
        mimic_internals.require()

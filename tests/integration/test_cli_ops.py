"""The CLI against the running shared server, as a script would use it: `python -m starscan`
in a subprocess, and the documented exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.readers import NOT_FOUND, Reader, plan_for

from starscan import __version__


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "starscan", *args], capture_output=True, text=True, timeout=120,
                          input=stdin)


@pytest.fixture(scope="module")
def fe(server) -> str:
    return f"127.0.0.1:{server.http_port}"


@pytest.mark.slow
def test_version_and_help():
    out = cli("version")
    assert out.returncode == 0 and out.stdout.strip() == f"starscan {__version__}"
    assert cli("serve", "--help").returncode == 0
    assert cli("no-such-command").returncode == 2
    # Every command's help, in this process (a new interpreter per command costs ~0.6 s each).
    from typer.testing import CliRunner

    from starscan.app.cli import app

    runner = CliRunner()
    for command in ([], ["serve"], ["fe"], ["be"], ["load"], ["tables"], ["plan"], ["scan"], ["follow"],
                    ["scanners", "list"], ["scanners", "close"], ["user", "add"], ["user", "passwd"],
                    ["user", "grant"], ["user", "revoke"], ["config"], ["config", "set"], ["version"]):
        helped = runner.invoke(app, [*command, "--help"])
        assert helped.exit_code == 0, (command, helped.output)
        assert "Usage" in helped.output
        assert "`" not in helped.output, (command, "help text shows its markup", helped.output)


def test_scanners_list_and_close(server, fe, be_addr, client):
    plan_b64, tablets = plan_for(client, "demo", "lineitem", "select l_orderkey from demo.lineitem")
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("demo", "lineitem", plan_b64, tablets, batch_size=500)
        reader.next_batch(cid, 0)
        listed = cli("scanners", "list", "--fe", fe)
        assert listed.returncode == 0, listed.stderr
        assert cid in listed.stdout and "demo.lineitem" in listed.stdout
        as_json = json.loads(cli("scanners", "list", "--fe", fe, "--json").stdout)
        mine = [s for s in as_json["scanners"] if s["context_id"] == cid]
        assert mine and mine[0]["rows_sent"] == 500 and mine[0]["user"] == "root"

        closed = cli("scanners", "close", cid, "--fe", fe, "--password", "-", stdin="\n")
        assert closed.returncode == 0, closed.stderr
        assert f"closed {cid}" in closed.stdout
        assert reader.next(cid, 500).status.status_code == NOT_FOUND
        again = cli("scanners", "close", cid, "--fe", fe)
        assert again.returncode == 1 and "not found" in again.stderr
    finally:
        reader.close()


def test_exit_codes_for_auth_and_unreachable(server, fe):
    refused = cli("scanners", "list", "--fe", fe, "--password", "wrong")
    assert refused.returncode == 6 and "401" in refused.stderr
    unreachable = cli("scanners", "list", "--fe", "127.0.0.1:1")
    assert unreachable.returncode == 5 and "cannot reach" in unreachable.stderr
    assert cli("config", "--fe", "127.0.0.1:1").returncode == 5
    unreachable_scan = cli("scan", "db1.t1", "--fe", "127.0.0.1:1")
    assert unreachable_scan.returncode == 5
    # A refused connection is tried again (an FE restarting is back in seconds), and each wait says so.
    assert "refused the connection" in unreachable_scan.stderr
    assert "trying again in 4 s (3 of 3)" in unreachable_scan.stderr, unreachable_scan.stderr


@pytest.mark.parametrize("command", [["scan", "db1.t1"], ["follow", "db1.t1", "--consumer", "c", "--into", "out"],
                                     ["plan", "db1.t1"]])
def test_every_command_that_reads_takes_the_same_options_and_exit_codes(server, fe, tmp_path, command):
    """scan, follow and plan take --fe/--user/--password (`-`: from stdin) like the admin
    commands, and exit as documented: 6 for refused credentials, 1 for an unknown table."""
    refused = cli(*command, "--fe", fe, "-u", "root", "-p", "wrong")
    assert refused.returncode == 6, refused.stderr
    refused_stdin = cli(*command, "--fe", fe, "--password", "-", stdin="wrong\n")
    assert refused_stdin.returncode == 6, refused_stdin.stderr
    missing = cli(command[0], "db1.nope", *command[2:], "--fe", fe)
    assert missing.returncode == 1 and "does not exists" in missing.stderr


def test_names_are_quoted_as_the_client_quotes_them():
    """A backtick in a column name is doubled (the SELECTs the commands build are the client's)."""
    from starscan.app.cli import _select

    assert _select("db.t", "a`b, c", "c > 1") == ("db", "t", "select `a``b`, `c` from `db`.`t` where c > 1")
    assert _select("db.t", "*", None)[2] == "select * from `db`.`t`"


def test_config_show_and_set(server, fe):
    shown = cli("config", "--fe", fe)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f"http_port = {server.http_port}" in lines
    assert "max_scanners = 256  # can change at run time" in lines
    assert cli("config", "--fe", fe, "show").stdout == shown.stdout
    changed = cli("config", "--fe", fe, "set", "query_timeout_max_s", "7200")
    assert changed.returncode == 0, changed.stderr
    try:
        assert "query_timeout_max_s = 7200  # can change at run time" in cli("config", "--fe", fe).stdout
    finally:
        assert cli("config", "--fe", fe, "set", "query_timeout_max_s", "86400").returncode == 0
    restart = cli("config", "--fe", fe, "set", "http_port", "1")
    assert restart.returncode == 1 and "restart" in restart.stderr


def test_plan(server, fe):
    planned = cli("plan", "db1.t1", "--columns", "k1,v1", "--where", "k1 > 1", "--fe", fe)
    assert planned.returncode == 0, planned.stderr
    body = json.loads(planned.stdout)
    assert body["status"] == 200 and body["opaqued_query_plan"] and body["partitions"]
    missing = cli("plan", "db1.nope", "--fe", fe)
    assert missing.returncode == 1 and "does not exists" in missing.stderr
    assert cli("plan", "nodot", "--fe", fe).returncode == 2


def test_the_admin_client_is_what_the_commands_call(server, fe, client):
    """docs/operations.md's AdminClient: the scanners (one open here is listed, then closed),
    the configuration changed at run time, and its failures as the client's classes."""
    from starscan.client import AdminClient, AuthenticationError, NetworkError, QueryError

    admin = AdminClient(fe)
    plan, tablets = plan_for(client, "db1", "t1", "select * from db1.t1")
    reader = Reader(("127.0.0.1", server.be_port))
    try:
        cid = reader.open_ok("db1", "t1", plan, tablets)
        assert cid in [s["context_id"] for s in admin.scanners()]
        assert admin.close_scanner(cid)["rows_sent"] == 0
        with pytest.raises(QueryError) as gone:
            admin.close_scanner(cid)
        assert gone.value.status == 404 and gone.value.call == "close scanner"
    finally:
        reader.close()
    admin.update_config("query_timeout_max_s", "7200")
    try:
        assert admin.config()["config"]["query_timeout_max_s"] == 7200
    finally:
        admin.update_config("query_timeout_max_s", "86400")
    with pytest.raises(AuthenticationError):
        AdminClient(fe, "root", "wrong").scanners()
    with pytest.raises(NetworkError):
        AdminClient("127.0.0.1:1").config()

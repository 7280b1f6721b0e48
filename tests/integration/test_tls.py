"""TLS on both ports with a throw-away CA made here (trustme): server certificate, client
certificates required, and what happens to clients that do not speak TLS or bring no
certificate."""

from __future__ import annotations

import socket
import ssl

import httpx
import pytest
import trustme
from support.servers import basic, running_server
from thriftpy2.transport import TTransportException

from starscan.app.server import StarscanServer
from starscan.client import StarscanClient, thrift_client
from starscan.core.errors import ConfigError
from starscan.core.thrift_defs import wire
from starscan.settings.config import load_settings


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_server(server, spark, base_settings, ca, tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    settings = base_settings.model_copy(update={
        "http_tls": True, "be_tls": True, "flight_tls": True,
        "tls_cert_file": d / "server.pem", "tls_key_file": d / "server.pem",
        "tls_ca_file": d / "ca.pem", "tls_client_auth": "required",
    })
    with running_server(spark, settings) as srv:
        yield srv


def client_context(ca, with_cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if with_cert:
        ca.issue_cert("reader@example.com").configure_cert(ctx)
    return ctx


def test_scan_over_tls_on_both_ports(tls_server, ca, client):
    tls_client = StarscanClient(f"https://127.0.0.1:{tls_server.http_port}", "root", "", ssl_context=client_context(ca))
    got = tls_client.read("db1", "t1", "select k1, v1 from db1.t1")
    want = client.read("db1", "t1", "select k1, v1 from db1.t1")  # the plain session server
    assert sorted(got.to_pylist(), key=str) == sorted(want.to_pylist(), key=str)


def test_flight_sql_over_tls_with_client_certificates(tls_server, ca, client):
    """Both Flight ports over TLS (flight_tls) with client certificates required: a client
    with one reads (the FE relaying the BE's stream over TLS too); one without is refused."""
    import pyarrow.flight as flight
    from google.protobuf import any_pb2

    from starscan.flight import flight_sql_pb2 as sql_pb2

    uri = f"grpc+tls://127.0.0.1:{tls_server.flight_sql_port}"
    reader = ca.issue_cert("reader@example.com")
    command = any_pb2.Any()
    command.Pack(sql_pb2.CommandStatementQuery(query="select k1, v1 from db1.t1"))
    descriptor = flight.FlightDescriptor.for_command(command.SerializeToString())
    conn = flight.connect(uri, tls_root_certs=ca.cert_pem.bytes(), cert_chain=reader.cert_chain_pems[0].bytes(),
                          private_key=reader.private_key_pem.bytes())
    options = flight.FlightCallOptions(headers=[conn.authenticate_basic_token("root", "")])
    info = conn.get_flight_info(descriptor, options)
    assert all(loc.uri.decode().startswith("grpc+tls://") for e in info.endpoints for loc in e.locations)
    got = [row for e in info.endpoints for row in conn.do_get(e.ticket, options).read_all().to_pylist()]
    want = client.read("db1", "t1", "select k1, v1 from db1.t1").to_pylist()
    assert sorted(got, key=str) == sorted(want, key=str)
    bare = flight.connect(uri, tls_root_certs=ca.cert_pem.bytes())
    with pytest.raises(flight.FlightError):
        bare.authenticate_basic_token("root", "")


def test_client_without_certificate_is_refused(tls_server, ca):
    ctx = client_context(ca, with_cert=False)
    with pytest.raises((httpx.HTTPError, ssl.SSLError, OSError)):
        httpx.post(f"https://127.0.0.1:{tls_server.http_port}/api/db1/t1/_query_plan", content='{"sql":"select k1 from db1.t1"}',
                   headers={"Authorization": basic("root", "")}, verify=ctx, timeout=30).raise_for_status()
    conn = None
    with pytest.raises((ssl.SSLError, OSError, TTransportException)):
        conn = thrift_client("127.0.0.1", tls_server.be_port, 30, ssl_context=ctx)
        conn.get_next(wire.TScanNextBatchParams(context_id="x", offset=0))
    if conn is not None:
        conn.close()


def test_server_certificate_is_checked_by_clients(tls_server):
    untrusting = ssl.create_default_context()  # does not know our throw-away CA
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"https://127.0.0.1:{tls_server.http_port}/api/health", verify=untrusting, timeout=30)


def test_plaintext_clients_get_nothing_and_the_server_carries_on(tls_server, ca):
    with socket.create_connection(("127.0.0.1", tls_server.be_port), timeout=30) as sock:
        sock.sendall(b"\x80\x01\x00\x01\x00\x00\x00\x08get_next\x00\x00\x00\x01\x00")
        sock.settimeout(30)
        try:
            data = sock.recv(1024)
        except ConnectionResetError:
            data = b""
        assert b"get_next" not in data  # never a Thrift reply in the clear
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{tls_server.http_port}/api/health", timeout=30).raise_for_status()
    conn = thrift_client("127.0.0.1", tls_server.be_port, 30, ssl_context=client_context(ca))
    try:
        res = conn.get_next(wire.TScanNextBatchParams(context_id="nope", offset=0))
        assert res.status.status_code == wire.TStatusCode.NOT_FOUND
    finally:
        conn.close()


def test_tls_settings_are_checked_at_start(spark, tmp_path):
    with pytest.raises(ConfigError, match="tls_cert_file is not set"):
        StarscanServer(load_settings(warehouse=tmp_path, http_tls=True), spark)
    with pytest.raises(ConfigError, match="does not exist"):
        StarscanServer(load_settings(warehouse=tmp_path, be_tls=True, tls_cert_file=tmp_path / "nope.pem",
                                     tls_key_file=tmp_path / "nope.key"), spark)
    (tmp_path / "c.pem").write_text("x")
    with pytest.raises(ConfigError, match="tls_client_auth needs tls_ca_file"):
        StarscanServer(load_settings(warehouse=tmp_path, be_tls=True, tls_cert_file=tmp_path / "c.pem",
                                     tls_key_file=tmp_path / "c.pem", tls_client_auth="required"), spark)

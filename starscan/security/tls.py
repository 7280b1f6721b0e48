"""TLS for both ports (opt-in): one certificate and key, optional client certificates."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from starscan.core.errors import ConfigError
from starscan.settings.config import Settings

_VERIFY = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def check(settings: Settings) -> None:
    """Refuse, at start, settings that ask for TLS without what it needs."""
    if not (settings.http_tls or settings.be_tls or settings.flight_tls):
        return
    for key in ("tls_cert_file", "tls_key_file"):
        path = getattr(settings, key)
        if path is None:
            raise ConfigError(f"http_tls/be_tls/flight_tls is on but {key} is not set")
        if not path.is_file():
            raise ConfigError(f"{key} {path} does not exist")
    if settings.tls_client_auth != "none" and settings.tls_ca_file is None:
        raise ConfigError("tls_client_auth needs tls_ca_file (the CA client certificates must chain to)")
    if settings.tls_ca_file is not None and not settings.tls_ca_file.is_file():
        raise ConfigError(f"tls_ca_file {settings.tls_ca_file} does not exist")


@dataclass(frozen=True)
class FlightTls:
    """TLS of the Flight ports (``flight_tls``) as gRPC takes it: the server's chain and key;
    client certificates required (``tls_client_auth`` = required: gRPC has no "optional", which
    asks for none) that chain to ``tls_ca_file``. The FE's relay to the BEs is a client of the
    same deployment: it trusts ``tls_ca_file`` and shows the server's own certificate."""

    cert_chain: bytes
    private_key: bytes
    verify_client: bool
    root_certificates: bytes | None

    def server_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"tls_certificates": [(self.cert_chain, self.private_key)],
                                   "verify_client": self.verify_client}
        if self.root_certificates is not None:
            options["root_certificates"] = self.root_certificates
        return options

    def client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"cert_chain": self.cert_chain, "private_key": self.private_key}
        if self.root_certificates is not None:
            options["tls_root_certs"] = self.root_certificates
        return options


def flight_tls(settings: Settings) -> FlightTls | None:
    if not settings.flight_tls:
        return None
    check(settings)
    assert settings.tls_cert_file is not None and settings.tls_key_file is not None  # check() said so
    ca = settings.tls_ca_file.read_bytes() if settings.tls_ca_file is not None else None
    return FlightTls(settings.tls_cert_file.read_bytes(), settings.tls_key_file.read_bytes(),
                     settings.tls_client_auth == "required", ca)


def server_context(settings: Settings) -> ssl.SSLContext:
    check(settings)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _own_certificate(ctx, settings)
    if settings.tls_ca_file is not None:
        ctx.load_verify_locations(cafile=str(settings.tls_ca_file))
    ctx.verify_mode = _VERIFY[settings.tls_client_auth]
    return ctx


def client_context(settings: Settings) -> ssl.SSLContext:
    """The FE's Thrift relay as a client of the BEs' TLS port: it trusts tls_ca_file (else the
    system's CAs) and shows the node's own certificate, for BEs that ask for one."""
    check(settings)
    ca = str(settings.tls_ca_file) if settings.tls_ca_file is not None else None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    _own_certificate(ctx, settings)
    return ctx


def _own_certificate(ctx: ssl.SSLContext, settings: Settings) -> None:
    """TLS 1.2 or later, and the node's own certificate and key (tls_cert_file, tls_key_file)."""
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(settings.tls_cert_file), str(settings.tls_key_file))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load tls_cert_file/tls_key_file: {exc}") from None


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    if not settings.http_tls:
        return {}
    check(settings)
    options = {"ssl_certfile": str(settings.tls_cert_file), "ssl_keyfile": str(settings.tls_key_file),
               "ssl_cert_reqs": int(_VERIFY[settings.tls_client_auth])}
    if settings.tls_ca_file is not None:
        options["ssl_ca_certs"] = str(settings.tls_ca_file)
    return options

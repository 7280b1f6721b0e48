"""TLS for both ports (opt-in): one certificate and key, optional client certificates."""

from __future__ import annotations

import ssl
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


def flight_certificates(settings: Settings) -> list[tuple[bytes, bytes]]:
    """The certificate chain and key for the Flight ports (``flight_tls``), as gRPC takes them."""
    if not settings.flight_tls:
        return []
    assert settings.tls_cert_file is not None and settings.tls_key_file is not None  # check() said so
    return [(settings.tls_cert_file.read_bytes(), settings.tls_key_file.read_bytes())]


def server_context(settings: Settings) -> ssl.SSLContext:
    check(settings)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(settings.tls_cert_file), str(settings.tls_key_file))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load tls_cert_file/tls_key_file: {exc}") from None
    if settings.tls_ca_file is not None:
        ctx.load_verify_locations(cafile=str(settings.tls_ca_file))
    ctx.verify_mode = _VERIFY[settings.tls_client_auth]
    return ctx


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    if not settings.http_tls:
        return {}
    check(settings)
    options = {"ssl_certfile": str(settings.tls_cert_file), "ssl_keyfile": str(settings.tls_key_file),
               "ssl_cert_reqs": int(_VERIFY[settings.tls_client_auth])}
    if settings.tls_ca_file is not None:
        options["ssl_ca_certs"] = str(settings.tls_ca_file)
    return options

"""The FE's HTTP API as the client calls it: one place that authenticates, retries a refused
connection and turns every failure into the client's error classes (starscan.client.errors).

``FrontEnd`` serves ``StarscanClient``'s plan, schema and consumer calls and
``AdminClient``'s calls (``/api/scanners``, ``/varz``, ``/api/update_config``: an admin
user), which the ``starscan scanners`` and ``starscan config`` commands use."""

from __future__ import annotations

import base64
import logging
import ssl
import time
from typing import Any
from urllib.parse import quote

import httpx

from starscan.client.errors import NetworkError, ServerError, from_http
from starscan.core.protocol_extensions import ERROR_KIND_HEADER

#: A refused connection's retries are told at WARNING, as urllib3 tells its own: a program
#: that configures no logging sees them on stderr (Python's last-resort handler), so a read
#: that waits on an FE coming back says why it waits.
log = logging.getLogger(__name__)


class FrontEnd:
    """The FE at ``fe`` (``host:port`` or a URL), as ``user`` (basic) or with a bearer
    ``token``. A connection that fails is a ``NetworkError``; a refused connection (nothing
    was sent: an FE restarting, back in seconds) is tried again ``retries`` times, 1, 2, 4
    ... s apart. An answer other than 200 is the error its kind (or status) names."""

    def __init__(self, fe: str, user: str = "root", password: str = "", timeout_s: float = 60.0, retries: int = 3,
                 ssl_context: ssl.SSLContext | None = None, token: str | None = None,
                 connect_timeout_s: float | None = None):
        self.url = fe.rstrip("/") if "://" in fe else f"{'https' if ssl_context else 'http'}://{fe}"
        self.user, self.password, self.token = user, password, token
        self.ssl_context = ssl_context
        self.retries = retries
        self.timeout = httpx.Timeout(timeout_s, connect=timeout_s if connect_timeout_s is None else connect_timeout_s)

    @property
    def _verify(self) -> Any:
        """httpx's ``verify``: the caller's TLS context, the system's CAs for https, and
        nothing for plain http (loading the CA bundle costs 20-40 ms per call)."""
        if self.ssl_context is not None:
            return self.ssl_context
        return self.url.startswith("https:")

    def authorization(self) -> str:
        if self.token:
            return f"Bearer {self.token}"
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()

    def call(self, method: str, path: str, call: str, **kwargs: Any) -> Any:
        """The JSON answer of one call (``call`` names it in an error); any failure raised as
        the client's error."""
        headers = {"Authorization": self.authorization(), **kwargs.pop("headers", {})}
        r = self._send(method, self.url + path, call, headers=headers, **kwargs)
        if r.status_code != 200:
            raise from_http(r.status_code, r.text, r.headers.get(ERROR_KIND_HEADER), call)
        try:
            return r.json()
        except ValueError:  # not a starscan or StarRocks FE at that address, or a broken one
            raise ServerError(f"{call}: the FE at {self.url} answered 200 with a body that is not JSON: "
                              f"{r.text[:200]!r}", 200, None, call) from None

    def _send(self, method: str, url: str, call: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                return httpx.request(method, url, timeout=self.timeout, verify=self._verify, **kwargs)
            except httpx.ConnectError as exc:
                if attempt == self.retries:
                    raise NetworkError(f"cannot reach the FE at {self.url}: {type(exc).__name__}: {exc}",
                                       call=call) from None
                pause = min(2.0 ** attempt, 8.0)
                log.warning("the FE at %s refused the connection (%s); trying again in %.0f s (%d of %d)", self.url,
                            exc, pause, attempt + 1, self.retries)
                time.sleep(pause)
            except httpx.HTTPError as exc:
                raise NetworkError(f"cannot reach the FE at {self.url}: {type(exc).__name__}: {exc}",
                                   call=call) from None
        raise AssertionError("unreachable")


def table_path(db: str, table: str) -> str:
    return f"/api/{quote(db, safe='')}/{quote(table, safe='')}"


class AdminClient:
    """A running server's scanners and configuration (an admin user): what ``starscan
    scanners`` and ``starscan config`` show and change."""

    def __init__(self, fe: str, user: str = "root", password: str = "", ssl_context: ssl.SSLContext | None = None,
                 timeout_s: float = 30.0, retries: int = 0):
        self.fe = FrontEnd(fe, user, password, timeout_s, retries, ssl_context)

    def scanners(self) -> list[dict[str, Any]]:
        """The open scanners (context_id, user, table, rows and bytes sent, age, state...)."""
        scanners: list[dict[str, Any]] = self.fe.call("GET", "/api/scanners", "scanners")["scanners"]
        return scanners

    def close_scanner(self, context_id: str) -> dict[str, Any]:
        """Close a scanner (its Spark job is cancelled); the answer has its ``rows_sent``."""
        answer: dict[str, Any] = self.fe.call("POST", f"/api/scanners/{quote(context_id, safe='')}/close",
                                              "close scanner")
        return answer

    def config(self) -> dict[str, Any]:
        """``/varz``: ``config`` (the effective values, secrets masked) and
        ``runtime_changeable`` (the keys ``update_config`` may change)."""
        answer: dict[str, Any] = self.fe.call("GET", "/varz", "varz")
        return answer

    def update_config(self, key: str, value: str) -> dict[str, Any]:
        """Change ``key`` on the running server; a key that needs a restart is refused."""
        answer: dict[str, Any] = self.fe.call("POST", "/api/update_config", "update_config", params={key: value})
        return answer

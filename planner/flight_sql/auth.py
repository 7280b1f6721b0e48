"""Who calls the Flight SQL front. A client logs in once with HTTP Basic credentials (the
Flight handshake with an ``authorization`` header, as ADBC and the JDBC driver do) and gets a
bearer token back in the ``authorization`` response header; it sends that token on every
later call. The users file decides, as on the other ports; a JWT (``jwt_key``) is accepted
as a bearer token as on the HTTP port."""

from __future__ import annotations

import secrets
import threading

import pyarrow.flight as flight
from cachetools import TTLCache

from starscan.core.errors import Unauthorized
from starscan.flight.errors import to_flight
from starscan.planner.auth import Authenticator

SESSION_TTL_S = 8 * 3600
MAX_SESSIONS = 100_000


class SessionTokens:
    """The bearer tokens this FE issued: random, held in memory, valid ``SESSION_TTL_S``."""

    def __init__(self, ttl_s: float = SESSION_TTL_S):
        self._users: TTLCache = TTLCache(maxsize=MAX_SESSIONS, ttl=ttl_s)
        self._lock = threading.Lock()

    def issue(self, user: str) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._users[token] = user
        return token

    def user_of(self, token: str) -> str | None:
        with self._lock:
            return self._users.get(token)


class HandshakeAccepted(flight.ServerAuthHandler):
    """Flight's handshake, answered: the credentials travel in its ``authorization`` header,
    which ``CallerMiddlewareFactory`` checks (a server without an auth handler refuses the
    handshake itself)."""

    def authenticate(self, outgoing, incoming):
        pass

    def is_valid(self, token):
        return ""


class CallerMiddleware(flight.ServerMiddleware):
    """The calling user of one call; a new session's token goes back in the response headers."""

    def __init__(self, user: str, token: str | None):
        self.user = user
        self.token = token

    def sending_headers(self):
        return {"authorization": f"Bearer {self.token}"} if self.token else {}


class CallerMiddlewareFactory(flight.ServerMiddlewareFactory):
    def __init__(self, auth: Authenticator, sessions: SessionTokens):
        self.auth = auth
        self.sessions = sessions

    def start_call(self, info, headers):
        values = headers.get("authorization") or headers.get("Authorization") or []
        header = values[0] if values else None
        try:
            if header and header[:7].lower() == "bearer ":
                user = self.sessions.user_of(header[7:].strip())
                if user is not None and self.auth.users.exists(user):
                    return CallerMiddleware(user, None)
                return CallerMiddleware(self.auth.authenticate(header, "flight-sql"), None)  # a JWT
            if not header:
                raise Unauthorized("Need auth information: log in with a user and password (HTTP Basic in the "
                                   "Flight handshake), or send a bearer token")
            user = self.auth.authenticate(_padded(header), "flight-sql")
            return CallerMiddleware(user, self.sessions.issue(user))
        except Exception as exc:  # noqa: BLE001 - every refusal is a gRPC status
            raise to_flight(exc) from None


def _padded(header: str) -> str:
    """Go's gRPC clients (ADBC) send Basic credentials in unpadded base64: padded, as HTTP
    Basic has it."""
    scheme, _, value = header.partition(" ")
    value = value.strip()
    return f"{scheme} {value}{'=' * (-len(value) % 4)}"


def caller(context) -> str:
    """The user of a call (the middleware ran before every handler)."""
    middleware = context.get_middleware("caller")
    if middleware is None:
        raise flight.FlightUnauthenticatedError("Need auth information")
    return middleware.user

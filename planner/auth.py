"""Who is calling: HTTP Basic (as StarRocks' FE parses it) or a signed bearer token, with
failed logins rate-limited per user and client address. What the caller may then do is the
statement service's (planner/statements)."""

from __future__ import annotations

import base64
import binascii

from starscan.core.errors import TooManyRequests, Unauthorized
from starscan.security.ratelimit import LoginGuard
from starscan.security.tokens import TokenVerifier
from starscan.security.users import UserStore


def parse_basic(header: str | None) -> tuple[str, str]:
    if not header:
        raise Unauthorized("Need auth information.")
    parts = header.split(" ")
    if len(parts) != 2 or parts[0].lower() != "basic":
        raise Unauthorized("Need auth information.")
    try:
        decoded = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise Unauthorized("Need auth information.") from None
    # UTF-8 (Flink/Trino); Apache HttpClient's ASCII mangling cannot be undone.
    text = decoded.decode("utf-8", errors="replace")
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise Unauthorized("Need auth information.")
    return user, password


class Authenticator:
    def __init__(self, users: UserStore, guard: LoginGuard, tokens: TokenVerifier | None = None):
        self.users = users
        self.guard = guard
        self.tokens = tokens

    def authenticate(self, header: str | None, client: str) -> str:
        """The user name, or Unauthorized / TooManyRequests."""
        if header and header[:7].lower() == "bearer ":
            return self._bearer(header[7:].strip(), client)
        user, password = parse_basic(header)
        if not self.guard.attempt(user, client, lambda: self.users.authenticate(user, password)):
            raise Unauthorized(f"Access denied for {user}@{client}")
        return user

    def authenticate_recent(self, header: str | None, client: str) -> str | None:
        """The user, when Basic credentials were verified lately (no argon2: cheap enough for
        the event loop); None when ``authenticate`` must run (in a thread)."""
        if not header or header[:6].lower() != "basic ":
            return None
        try:
            user, password = parse_basic(header)
            self.guard.check(user, client)
        except (Unauthorized, TooManyRequests):
            return None  # authenticate says why
        if not self.users.recently_verified(user, password):
            return None
        self.guard.succeeded(user, client)
        return user

    def _bearer(self, token: str, client: str) -> str:
        if self.tokens is None:
            raise Unauthorized("bearer tokens are not enabled on this server (set jwt_key); use Basic auth")
        # No lockout here: a token's signature cannot be guessed, and an expired token from a
        # batch job must not lock out the address for everyone else.
        user = self.tokens.user_of(token)
        if not self.users.exists(user):
            raise Unauthorized(f"Access denied for {user}@{client}: the token's user is not in the users file")
        return user

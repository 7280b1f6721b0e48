"""HTTP Basic authentication as StarRocks' FE parses it."""

from __future__ import annotations

import base64
import binascii

from starscan.errors import Unauthorized
from starscan.users import UserStore


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


def authenticate(users: UserStore, header: str | None, client: str) -> str:
    user, password = parse_basic(header)
    if not users.authenticate(user, password):
        raise Unauthorized(f"Access denied for {user}@{client}")
    return user


def require_select(users: UserStore, user: str, client: str, db: str, table: str) -> None:
    if not users.can_select(user, db, table):
        raise Unauthorized(f"Access denied; you need (at least one of) the SELECT privilege(s) on TABLE {db}.{table} for {user}@{client}")

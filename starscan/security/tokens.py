"""Signed bearer tokens (JWT, PyJWT) for the HTTP port: the token's ``sub`` is the user.

Grants still come from the users file, so a token names a user the file knows; such a
user may have no password at all (``starscan user add NAME --no-password``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jwt

from starscan.core.errors import ConfigError, Unauthorized


class TokenVerifier:
    def __init__(self, key: str, algorithms: list[str], issuer: str | None = None, audience: str | None = None):
        path = Path(key) if len(key) < 4096 and "\n" not in key else None
        if path is not None and path.is_file():
            key = path.read_text(encoding="utf-8")
        elif any(a[:2] in ("RS", "ES", "PS", "Ed") for a in algorithms) and "BEGIN" not in key:
            raise ConfigError(f"jwt_key must be a PEM public key or a path to one for {', '.join(algorithms)}")
        self.key = key
        self.algorithms = list(algorithms)
        self.issuer = issuer
        self.audience = audience

    def user_of(self, token: str) -> str:
        options: dict[str, Any] = {"require": ["exp", "sub"] + (["iss"] if self.issuer else [])}
        try:
            claims = jwt.decode(token, self.key, algorithms=self.algorithms, issuer=self.issuer,
                                audience=self.audience, options={**options, "verify_aud": self.audience is not None})  # type: ignore[arg-type]
        except jwt.ExpiredSignatureError:
            raise Unauthorized("bearer token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"bearer token rejected: {exc}") from None
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthorized("bearer token has no user (`sub` claim)")
        return sub

"""Users, passwords and grants (the users file).

A JSON file ``{"users": {"<name>": {"password_hash": "<argon2>", "grants": ["db.table", "db.*", "*.*"]}}}``.
A grant ``db.table`` (or ``db.*``, ``*.*``) is SELECT; ``direct_read:db.table`` is DIRECT_READ,
plans that name the table's files (starscan.arrow.direct); ``admin`` is the admin page.
Out of the box it holds ``root`` with an empty password and SELECT on everything, as
StarRocks ships; DIRECT_READ is off until granted, for root too.
Successful verifications are remembered for a short while (argon2 is deliberately slow).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import threading
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from cachetools import TTLCache

from starscan.core.errors import InvalidInput, UnknownUser
from starscan.storage.files import write_private

log = logging.getLogger("starscan.security.users")
#: DIRECT_READ grants are this and a SELECT grant's pattern: ``direct_read:sales.*``.
GRANT_PREFIX = "direct_read:"

_argon2 = PasswordHasher()
#: argon2 hashes with 64 MiB of memory each (argon2-cffi's default, RFC 9106's low-memory
#: profile): four readers logging in at once took the server from 0.18 to 0.44 GB. One runs
#: at a time; the others wait their turn (each takes ~0.1 s), so a burst of logins, or of
#: guesses with ever new user names, costs time, not memory. The same credentials arriving
#: together are checked once (UserStore.authenticate).
ARGON2_AT_ONCE = 1
_argon2_slots = threading.BoundedSemaphore(ARGON2_AT_ONCE)


def _hash(password: str) -> str:
    with _argon2_slots:
        return _argon2.hash(password)


def _verify(stored: str, password: str) -> bool:
    with _argon2_slots:
        return _argon2.verify(stored, password)
ALL = "*.*"
ADMIN_GRANT = "admin"


def mysql_native_hash(password: str) -> str:
    """What MySQL's ``mysql_native_password`` needs the server to hold: SHA1(SHA1(password)),
    hex. Stored beside the argon2 hash (key ``mysql_native_password``) for the MySQL port."""
    return hashlib.sha1(hashlib.sha1(password.encode("utf-8")).digest()).hexdigest()


def grant_matches(grant: str, db: str, table: str) -> bool:
    gdb, _, gtable = grant.partition(".")
    return (gdb == "*" or gdb == db) and (gtable == "*" or gtable == table)


class _Check:
    """One password check under way, and its answer for those who waited for it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False


class UserStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._verified: TTLCache[bytes, bool] = TTLCache(maxsize=10_000, ttl=300)
        self._checking: dict[bytes, _Check] = {}  # credentials being checked now
        self._cache_key = secrets.token_bytes(32)
        self._mtime: int | None = None
        self._users: dict[str, dict[str, Any]] = {}
        self._ensure()

    # ---- file ----
    def _ensure(self) -> None:
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"root": {"password_hash": _hash(""), "mysql_native_password": mysql_native_hash(""),
                                  "grants": [ALL]}})
        self._reload()

    def _reload(self) -> None:
        st = self.path.stat()
        if st.st_mtime_ns == self._mtime:
            return
        data = json.loads(self.path.read_text(encoding="utf-8"))
        with self._lock:
            self._users = dict(data.get("users", {}))
            self._mtime = st.st_mtime_ns
            self._verified.clear()

    def _write(self, users: dict[str, dict[str, Any]]) -> None:
        write_private(self.path, json.dumps({"users": users}, indent=2, sort_keys=True).encode("utf-8"))

    def warn_if_default_root(self) -> None:
        root = self._users.get("root")
        if root and self._check_hash(root.get("password_hash", ""), ""):
            log.warning("user 'root' has an empty password and all grants; set one with `starscan user passwd root`")

    # ---- checks ----
    @staticmethod
    def _check_hash(stored: str, password: str) -> bool:
        try:
            return _verify(stored, password)
        except (VerificationError, InvalidHashError):
            return False

    def _verified_key(self, user: str, password: str, record: dict[str, Any]) -> bytes:
        return hmac.new(self._cache_key, f"{user}\0{password}\0{record.get('password_hash')}".encode("utf-8", "surrogatepass"),
                        hashlib.sha256).digest()

    def recently_verified(self, user: str, password: str) -> bool:
        """True when these credentials passed ``authenticate`` lately and the user's password
        is unchanged: microseconds, no argon2 (an event loop may call it)."""
        self._reload()
        record = self._users.get(user)
        return record is not None and self._verified_key(user, password, record) in self._verified

    def authenticate(self, user: str, password: str) -> bool:
        self._reload()
        record = self._users.get(user)
        if record is None:
            _hash(password)  # same work for unknown users: no timing oracle
            return False
        key = self._verified_key(user, password, record)
        if key in self._verified:
            return True
        if not record.get("password_hash"):
            _hash(password)  # a token-only user has no password to log in with
            return False
        # The same credentials arriving together (a Spark job's partitions, each opening a
        # scanner) are checked once: the others wait for that check's answer.
        with self._lock:
            if key in self._verified:
                return True
            check = self._checking.get(key)
            mine = check is None
            if mine:
                check = self._checking[key] = _Check()
        assert check is not None
        if not mine:
            check.done.wait()
            return check.ok
        try:
            check.ok = self._check_hash(record.get("password_hash", ""), password)
            if check.ok:
                with self._lock:
                    self._verified[key] = True
        finally:
            with self._lock:
                self._checking.pop(key, None)
            check.done.set()
        return check.ok

    def exists(self, user: str) -> bool:
        self._reload()
        return user in self._users

    def has_password(self, user: str) -> bool:
        self._reload()
        return bool((self._users.get(user) or {}).get("password_hash"))

    def mysql_native_password(self, user: str) -> str | None:
        """The user's SHA1(SHA1(password)) for the MySQL port, or None (unknown user, a
        token-only user, or a password set before the MySQL port existed)."""
        self._reload()
        return (self._users.get(user) or {}).get("mysql_native_password") or None

    def can_select(self, user: str, db: str, table: str, reload: bool = True) -> bool:
        """``reload=False``: the caller has just authenticated, which read the file."""
        if reload:
            self._reload()
        record = self._users.get(user) or {}
        return any(grant_matches(g, db, table) for g in record.get("grants", []))

    def can_direct_read(self, user: str, db: str, table: str, reload: bool = True) -> bool:
        """SELECT and DIRECT_READ on the table (a grant ``direct_read:db.table``, ``db.*`` or
        ``*.*``): the user may get plans that name the table's files (starscan.arrow.direct)."""
        if not self.can_select(user, db, table, reload=reload):
            return False
        grants = (self._users.get(user) or {}).get("grants", [])
        return any(g.startswith(GRANT_PREFIX) and grant_matches(g[len(GRANT_PREFIX):], db, table) for g in grants)

    def is_admin(self, user: str) -> bool:
        """``root``, or a user holding the grant ``admin`` (the admin page, /varz, update_config)."""
        return user == "root" or ADMIN_GRANT in self.users().get(user, [])

    def users(self) -> dict[str, list[str]]:
        self._reload()
        return {name: list(rec.get("grants", [])) for name, rec in self._users.items()}

    # ---- changes (CLI) ----
    def set_password(self, user: str, password: str | None, create: bool = False) -> None:
        """``password=None``: a user who can only sign in with a bearer token."""
        self._reload()
        users = dict(self._users)
        if user not in users and not create:
            raise UnknownUser(user)
        if user in users and create:
            raise InvalidInput(f"user {user!r} already exists")
        record = dict(users.get(user, {"grants": []}))
        record["password_hash"] = _hash(password) if password is not None else None
        record["mysql_native_password"] = mysql_native_hash(password) if password is not None else None
        users[user] = record
        self._write(users)
        self._reload()

    def grant(self, user: str, grant: str, revoke: bool = False) -> None:
        self._reload()
        if user not in self._users:
            raise UnknownUser(user)
        target = grant[len(GRANT_PREFIX):] if grant.startswith(GRANT_PREFIX) else grant
        if grant != "admin" and target.count(".") != 1:  # "admin": the admin page, /varz, update_config
            raise InvalidInput(f"grant {grant!r} is not db.table, db.* or *.* (or direct_read: and one of them)")
        users = dict(self._users)
        record = dict(users[user])
        grants = [g for g in record.get("grants", []) if g != grant]
        if not revoke:
            grants.append(grant)
        record["grants"] = grants
        users[user] = record
        self._write(users)
        self._reload()

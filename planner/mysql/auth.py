"""MySQL logins against the users file (``mysql_native_password``).

The server holds SHA1(SHA1(password)) for each user (``UserStore.mysql_native_password``,
written whenever a password is set). An empty password is checked against the argon2
hash directly, so a user whose entry predates the MySQL port can still log in with an
empty password; any other password needs the double-SHA1, i.e. the password set again.
Unknown users, wrong passwords and missing hashes all get the same MySQL error 1045.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Sequence

from mysql_mimic import IdentityProvider, NativePasswordAuthPlugin, User
from mysql_mimic import utils as mimic_utils
from mysql_mimic.auth import AuthInfo, AuthPlugin, AuthState, Forbidden, Success

from starscan.core.errors import TooManyRequests
from starscan.security.ratelimit import LoginGuard
from starscan.security.users import UserStore

# The peer address of the connection being served (set per connection task by the port),
# so failed logins count per user and client address as on the other ports.
client_address: contextvars.ContextVar[str] = contextvars.ContextVar("mysql_client_address", default="unknown")
# Whether the connection's latest login (the handshake or a COM_CHANGE_USER) was refused:
# set per connection task by the password plugin, read by the session.
login_refused: contextvars.ContextVar[bool] = contextvars.ContextVar("mysql_login_refused", default=False)

log = logging.getLogger("starscan.mysql")


class UsersFilePasswordPlugin(NativePasswordAuthPlugin):
    """``mysql_native_password`` whose verdict comes from the users file."""

    def __init__(self, users: UserStore, guard: LoginGuard | None = None, on_refused: Callable[[], None] | None = None):
        self.users = users
        self.guard = guard
        self.on_refused = on_refused  # counts refused logins (starscan_auth_failures_total{port="mysql"})

    async def auth(self, auth_info: AuthInfo | None = None) -> AuthState:
        if auth_info and auth_info.handshake_plugin_name == self.name and auth_info.handshake_auth_data:
            nonce = auth_info.handshake_auth_data.rstrip(b"\x00")
        else:
            nonce = mimic_utils.nonce(20)
            auth_info = yield nonce + b"\x00"
        assert auth_info is not None
        name = auth_info.username
        client = client_address.get()
        data = auth_info.data
        try:
            if self.guard is not None:
                ok = self.guard.attempt(name, client, lambda: self._check(name, data, nonce))
            else:
                ok = self._check(name, data, nonce)
        except TooManyRequests as exc:
            self._refused()
            yield Forbidden(exc.message)
            return
        if ok:
            login_refused.set(False)
            yield Success(name)
        else:
            self._refused()
            using = "YES" if auth_info.data else "NO"
            yield Forbidden(f"Access denied for user '{name}' (using password: {using})")

    def _refused(self) -> None:
        login_refused.set(True)
        if self.on_refused is not None:
            self.on_refused()

    def _check(self, name: str, scramble: bytes, nonce: bytes) -> bool:
        if name not in self.users.users():
            return False
        if not scramble:
            # Empty password: the client sends no scramble; argon2 decides.
            return self.users.authenticate(name, "")
        stored = self.users.mysql_native_password(name)
        if stored is None:
            log.warning("MySQL login of user %r refused: the users file has no mysql_native_password hash for "
                        "it (its password was set before the MySQL port existed, or it is token-only); "
                        "set the password again with `starscan user passwd %s`", name, name)
            return False
        return self.verify_scramble(stored, scramble, nonce)


class UsersFileIdentity(IdentityProvider):
    def __init__(self, users: UserStore, guard: LoginGuard | None = None, on_refused: Callable[[], None] | None = None):
        self.users = users
        self._plugin = UsersFilePasswordPlugin(users, guard, on_refused)

    def get_plugins(self) -> Sequence[AuthPlugin]:
        return [self._plugin]

    async def get_user(self, username: str) -> User | None:
        # Every name gets a user record, so an unknown name fails exactly like a wrong
        # password (1045) instead of mysql-mimic's "user does not exist".
        return User(name=username, auth_plugin=self._plugin.name)

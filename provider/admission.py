"""Who may open a scanner: the BE's own checks on top of the signed plan.

The plan proves the FE authorised ``plan.user`` for the table when it was issued. At
``open_scanner`` the BE checks again, against the users file as it is now: the user still
exists, still holds the SELECT grant (a revoke takes effect without a restart), and, when
the client sends ``user``/``passwd`` (the Spark connector does), they match that identity.
Then the scanner caps (in total and per user) apply.
"""

from __future__ import annotations

import threading

from starscan.core.errors import CredentialsRejected, PrivilegeMissing, TooManyRequests, TooManyTasks
from starscan.security.ratelimit import LoginGuard
from starscan.security.users import UserStore
from starscan.settings.config import Settings
from starscan.settings.runtime import LiveSettings


class Admission:
    def __init__(self, settings: Settings | LiveSettings, users: UserStore | None, guard: LoginGuard | None = None):
        self.live = LiveSettings.of(settings)
        settings = self.live.current
        self.users = users
        self.guard = guard or LoginGuard(settings.login_max_failures, settings.login_lockout_s)
        self.lock = threading.Lock()  # check-and-admit is atomic across concurrent opens

    @property
    def settings(self) -> Settings:
        """The settings as they are now (run-time changes replace them)."""
        return self.live.current

    def check_identity(self, plan, sent_user: str | None, sent_passwd: str | None, client: str) -> None:
        if sent_user and sent_user != plan.user:
            raise CredentialsRejected(f"user {sent_user!r} may not use a plan issued to {plan.user!r}")
        if self.users is None:
            return
        user = plan.user
        if not self.users.exists(user):
            raise CredentialsRejected(f"user {user!r} of this plan no longer exists")
        if sent_passwd is not None:
            users = self.users

            def verify() -> bool:
                if users.has_password(user):
                    return users.authenticate(user, sent_passwd)
                return sent_passwd == ""  # a token-only user has no password to send

            try:
                ok = self.guard.attempt(user, client, verify)
            except TooManyRequests as exc:
                raise CredentialsRejected(exc.message) from None
            if not ok:
                raise CredentialsRejected(f"Access denied for {user}@{client}: passwd does not match the users file")
        if not self.users.can_select(user, plan.database, plan.table):
            raise PrivilegeMissing(
                f"Access denied; user {user!r} no longer has the SELECT privilege on {plan.database}.{plan.table} "
                "(it was revoked after the plan was issued)")

    def check_caps(self, open_contexts, user: str) -> None:
        """Call with ``self.lock`` held, then mark the context admitted before releasing it."""
        total = mine = 0
        for ctx in open_contexts:
            # A scan that failed holds nothing (its queue dropped its rows, its readers are
            # gone) while it waits for its reader's next call or the reaper: it takes no place.
            failed = ctx.queue is not None and ctx.queue.error is not None
            if ctx.admitted and ctx.open_error is None and not failed:
                total += 1
                mine += ctx.user == user
        if mine >= self.settings.max_scanners_per_user:
            raise TooManyTasks(
                f"too many scanners for user {user!r}: {mine} open, "
                f"max_scanners_per_user={self.settings.max_scanners_per_user}; close finished scanners or retry later")
        if total >= self.settings.max_scanners:
            raise TooManyTasks(
                f"too many scanners: {total} open, max_scanners={self.settings.max_scanners}; "
                "close finished scanners or retry later")

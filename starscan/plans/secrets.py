"""Plan-signing secrets that can be rotated without downtime.

The secret lives in ``<warehouse>/_starscan/plan_secret`` (or in config). ``starscan secret
rotate`` writes a new one and keeps the old one in ``plan_secret.previous``; every running
FE/BE sharing the warehouse notices the change within a second, signs with the new secret
and still accepts plans signed with the previous one for ``plan_secret_grace_s`` after the
rotation (the previous file's mtime), so plans handed out just before a rotation keep working.
With ``plan_secret`` set in config, rotation is a rolling restart: set the new value and move
the old one to ``plan_secret_previous`` on every node.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

from starscan.plans.codec import PlanSigner, load_or_create_secret
from starscan.storage.files import write_private

CURRENT = "plan_secret"
PREVIOUS = "plan_secret.previous"


def rotate_secret(state_dir: Path) -> str:
    """Make a new current secret; the old one becomes the previous. Returns the new key id."""
    from starscan.plans.codec import key_id

    state_dir = Path(state_dir)
    old = load_or_create_secret(state_dir, None)
    new = secrets.token_hex(32).encode("ascii")
    write_private(state_dir / PREVIOUS, old)
    write_private(state_dir / CURRENT, new)
    return key_id(new)


class RotatingPlanSigner:
    """``PlanSigner``'s interface over secrets that may change while the server runs."""

    CHECK_EVERY_S = 1.0

    def __init__(self, state_dir: Path, configured: str | None = None, configured_previous: str | None = None,
                 grace_s: float = 86400.0):
        self.state_dir = Path(state_dir)
        self.configured = configured
        self.configured_previous = configured_previous
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int] | None, ...] | None = None
        self._checked = 0.0
        self._signer = self._load()

    @property
    def secret(self) -> bytes:
        return self._current().secret

    def sign(self, body: bytes) -> tuple[bytes, str]:
        return self._current().sign(body)

    def verify(self, body: bytes, signature: bytes, kid: str) -> None:
        self._current().verify(body, signature, kid)

    # ---- loading ----
    def _files_stamp(self) -> tuple[tuple[int, int, int] | None, ...]:
        out: list[tuple[int, int, int] | None] = []
        for name in (CURRENT, PREVIOUS):
            try:
                st = (self.state_dir / name).stat()
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except FileNotFoundError:
                out.append(None)
        return tuple(out)

    def _load(self) -> PlanSigner:
        if self.configured:
            configured_previous = (self.configured_previous.encode("utf-8"),) if self.configured_previous else ()
            return PlanSigner(self.configured.encode("utf-8"), configured_previous)
        current = load_or_create_secret(self.state_dir, None)
        previous: tuple[bytes, ...] = ()
        prev_path = self.state_dir / PREVIOUS
        try:
            rotated_at = prev_path.stat().st_mtime
            if time.time() - rotated_at <= self.grace_s:
                previous = (prev_path.read_bytes().strip(),)
        except FileNotFoundError:
            pass
        self._stamp = self._files_stamp()
        return PlanSigner(current, previous)

    def _current(self) -> PlanSigner:
        if self.configured:
            return self._signer
        now = time.monotonic()
        if now - self._checked >= self.CHECK_EVERY_S:
            with self._lock:
                if now - self._checked >= self.CHECK_EVERY_S:
                    self._checked = now
                    # Reload on a file change, and also when the grace period may have ended.
                    if self._files_stamp() != self._stamp or self._signer.previous:
                        self._signer = self._load()
        return self._signer

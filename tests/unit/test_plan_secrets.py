"""Plan-secret rotation (plans.secrets) on real files: after ``rotate_secret`` a running
signer signs with the new secret, accepts plans of the previous one for the grace period
counted from the rotation, and refuses them once it has passed: by its clock alone, with no
file changing then."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from starscan.core.errors import PlanInvalid
from starscan.plans import secrets as plan_secrets
from starscan.plans.secrets import RotatingPlanSigner, rotate_secret

GRACE_S = 60.0


@pytest.fixture
def clock(monkeypatch):
    """The signer's clocks, moved by the test (the files keep their real times)."""
    now = SimpleNamespace(wall=time.time(), mono=time.monotonic())
    monkeypatch.setattr(plan_secrets, "time", SimpleNamespace(time=lambda: now.wall, monotonic=lambda: now.mono))

    def advance(seconds: float) -> None:
        now.wall += seconds
        now.mono += seconds

    return advance


def test_the_previous_secret_is_accepted_for_the_grace_period_then_refused(tmp_path, clock):
    signer = RotatingPlanSigner(tmp_path, grace_s=GRACE_S)
    before_sig, before_kid = signer.sign(b"plan")
    new_kid = rotate_secret(tmp_path)
    clock(RotatingPlanSigner.CHECK_EVERY_S)
    assert signer.sign(b"plan")[1] == new_kid != before_kid
    signer.verify(b"plan", before_sig, before_kid)  # within the grace period
    clock(GRACE_S - 2 * RotatingPlanSigner.CHECK_EVERY_S)
    signer.verify(b"plan", before_sig, before_kid)  # still within it
    clock(3 * RotatingPlanSigner.CHECK_EVERY_S)     # past it; no file changed since the rotation
    with pytest.raises(PlanInvalid, match="signature does not match"):
        signer.verify(b"plan", before_sig, before_kid)
    after_sig, after_kid = signer.sign(b"plan")
    signer.verify(b"plan", after_sig, after_kid)

"""The opaque query plan: built by the FE, verified and read by the BE.

Wire form: base64 (standard, padded) of a binary-serialized ``TSignedPlan`` whose ``plan``
is a binary-serialized ``TScanPlan`` and ``signature`` its HMAC-SHA256 with the server
secret. Plans are stateless: any BE with the same secret accepts them until they expire,
across restarts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.transport import TCyMemoryBuffer

from starscan.core.errors import PlanExpired, PlanInvalid
from starscan.core.thrift_defs import plan as plan_idl
from starscan.storage.files import write_private

FORMAT_VERSION = 1
# thriftpy2 is untyped (and so are the structs its IDLs make): both are used as Any.
_PROTO: Any = cast(Any, TCyBinaryProtocolFactory)()


def serialize(obj: Any, _factory: object = None) -> bytes:
    buf = TCyMemoryBuffer()
    obj.write(_PROTO.get_protocol(buf))
    return cast(bytes, buf.getvalue())


def deserialize(obj: Any, raw: bytes, _factory: object = None) -> Any:
    """Fast (Cython) decoding: only for bytes whose signature was verified."""
    obj.read(_PROTO.get_protocol(TCyMemoryBuffer(raw)))
    return obj


def _read_signed_envelope(raw: bytes) -> Any:
    """``TSignedPlan`` from untrusted bytes, read by hand in exactly the layout ``encode``
    writes (fields 1-4 in order, then STOP; anything else is refused).

    Neither thriftpy2 reader is safe here: the Cython one allocates whatever length a forged
    prefix declares, and the pure-Python one, told to skip a forged list of two billion
    zero-width elements, spins for minutes. This reads at most ``len(raw)`` bytes, once."""
    view = memoryview(raw)
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(view):
            raise ValueError("truncated")
        out = view[pos:pos + n].tobytes()
        pos += n
        return out

    def field(ttype: int, fid: int) -> None:
        if take(3) != struct.pack(">bh", ttype, fid):
            raise ValueError(f"field {fid} expected")

    def binary() -> bytes:
        return take(struct.unpack(">i", take(4))[0])

    field(6, 1)
    version = struct.unpack(">h", take(2))[0]
    field(11, 2)
    body = binary()
    field(11, 3)
    signature = binary()
    field(11, 4)
    kid = binary().decode("utf-8")
    if take(1) != b"\x00" or pos != len(view):
        raise ValueError("trailing bytes")
    return plan_idl.TSignedPlan(format_version=version, plan=body, signature=signature, key_id=kid)


def key_id(secret: bytes) -> str:
    return hashlib.sha256(b"starscan-key-id:" + secret).hexdigest()[:12]



class Signer(Protocol):
    """What plans are signed and checked with: ``PlanSigner``, or the server's
    ``RotatingPlanSigner`` (starscan.plans.secrets), which reloads its secrets."""

    def sign(self, body: bytes) -> tuple[bytes, str]: ...

    def verify(self, body: bytes, signature: bytes, kid: str) -> None: ...

@dataclass(frozen=True)
class PlanSigner:
    """Signs plans with ``secret``; verifies with it (and ``previous`` secrets, for rotation)."""

    secret: bytes
    previous: tuple[bytes, ...] = ()

    def sign(self, body: bytes) -> tuple[bytes, str]:
        return hmac.new(self.secret, body, hashlib.sha256).digest(), key_id(self.secret)

    def verify(self, body: bytes, signature: bytes, kid: str) -> None:
        for candidate in (self.secret, *self.previous):
            if kid == key_id(candidate):
                expected = hmac.new(candidate, body, hashlib.sha256).digest()
                if hmac.compare_digest(expected, signature or b""):
                    return
                break
        raise PlanInvalid(
            "query plan signature does not match: the plan was modified after the FE issued it, "
            "or it was issued by a server with another plan secret"
        )


def load_or_create_secret(state_dir: Path, configured: str | None) -> bytes:
    """The configured secret, or the one persisted in the warehouse (created on first use)."""
    if configured:
        return configured.encode("utf-8")
    path = Path(state_dir) / "plan_secret"
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_hex(32).encode("ascii")
    write_private(path, value, replace=False)  # first writer wins when two processes start together
    return path.read_bytes().strip()


def encode(plan: Any, signer: Signer) -> str:
    body = serialize(plan, _PROTO)
    signature, kid = signer.sign(body)
    wrapper = plan_idl.TSignedPlan(format_version=FORMAT_VERSION, plan=body, signature=signature, key_id=kid)
    return base64.b64encode(serialize(wrapper, _PROTO)).decode("ascii")


def decode(text: str, signer: Signer, now_ms: int | None = None) -> Any:
    """Base64 text -> verified ``TScanPlan``. Raises ``PlanInvalid`` with a reason a person can act on."""
    if not text:
        raise PlanInvalid("opaqued_query_plan is empty")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise PlanInvalid(
            f"query_plan_info: {text[:64]!r} validate error, should not be modified after returned starscan FE processed"
        ) from None
    try:
        wrapper = _read_signed_envelope(raw)
        if wrapper.plan is None or wrapper.signature is None or wrapper.key_id is None:
            raise ValueError("incomplete")
        if serialize(wrapper, _PROTO) != raw:
            # The reader stops at the struct's STOP byte and ignores whatever follows: only the
            # exact bytes encode() produced are accepted.
            raise ValueError("not canonical")
    except Exception:  # noqa: BLE001 - any decode failure means a damaged plan
        raise PlanInvalid(
            "query_plan_info deserialize error, should not be modified after returned starscan FE processed"
        ) from None
    if wrapper.format_version != FORMAT_VERSION:
        raise PlanInvalid(f"query plan format {wrapper.format_version} is not supported (expected {FORMAT_VERSION})")
    signer.verify(wrapper.plan, wrapper.signature, wrapper.key_id)
    try:
        plan = deserialize(plan_idl.TScanPlan(), wrapper.plan, _PROTO)
    except Exception:  # noqa: BLE001 - any decode failure means a damaged plan
        raise PlanInvalid("query plan body is not a starscan plan") from None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if plan.expires_at_ms is not None and now_ms > plan.expires_at_ms:
        raise PlanExpired(
            f"query plan {plan.query_id} expired at {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(plan.expires_at_ms / 1000))} UTC; "
            "ask the FE for a new plan"
        )
    return plan


# An empty TPlanTablets in the binary protocol: field 1's header (LIST, id 1), the list's
# element type (STRUCT) and its count (i32 0), then the struct's STOP.
_EMPTY_TABLETS = serialize(plan_idl.TPlanTablets(tablets=[]))
_LIST_COUNT = struct.Struct(">i")
_TABLETS_HEAD, _STRUCT_STOP = _EMPTY_TABLETS[:-5], _EMPTY_TABLETS[-1:]
assert _EMPTY_TABLETS[-5:] == b"\x00" * 5


def pack_tablets(tablets: Iterable[Any], index: dict[int, tuple[int, int]] | None = None) -> bytes:
    """``TPlanTablet``s -> the bytes carried in ``TScanPlan.tablets``: ``TPlanTablets``.

    Written one tablet at a time, so that a generator's tablets are let go as they are
    written: packing a million files' list as a list of ``TPlanFile`` objects took 125-200 MB
    above the listing at its peak, one tablet at a time 80 MB (the packed bytes, ~49 MB). A
    Thrift list is its element type and count followed by its elements' own encodings, so the
    bytes are those of serializing the whole list (tests/unit/test_tablet_lists.py).
    ``index``, when given, is filled with where each tablet is in the bytes (tablet id ->
    from, to), for ``unpack_tablet``."""
    written = []
    at = len(_TABLETS_HEAD) + _LIST_COUNT.size
    for tablet in tablets:
        one = serialize(tablet)
        written.append(one)
        if index is not None:
            index[tablet.tablet_id] = (at, at + len(one))
        at += len(one)
    return b"".join([_TABLETS_HEAD, _LIST_COUNT.pack(len(written)), *written, _STRUCT_STOP])


def unpack_tablet(packed: bytes, start: int, end: int) -> Any:
    """The ``TPlanTablet`` at ``packed[start:end]`` (a place ``pack_tablets`` indexed), for
    bytes the server packed itself."""
    return deserialize(plan_idl.TPlanTablet(), packed[start:end])


def unpack_tablets(packed: bytes) -> list[Any]:
    """``pack_tablets``' bytes (from a signed plan, or a list the server keeps) -> ``[TPlanTablet]``."""
    try:
        tablets: list[Any] = deserialize(plan_idl.TPlanTablets(), packed).tablets or []
        return tablets
    except Exception:  # noqa: BLE001 - any decode failure means a damaged plan
        raise PlanInvalid("query plan tablet list is damaged") from None


def tablets_of(plan: Any) -> list[Any]:
    """The ``TPlanTablet`` list a decoded (signature-checked) plan carries."""
    return unpack_tablets(plan.tablets or b"")


def to_bytes(plan: Any) -> bytes:
    return serialize(plan, _PROTO)


def from_bytes(raw: bytes) -> Any:
    return deserialize(plan_idl.TScanPlan(), raw, _PROTO)

"""The protocol the BE reads requests with: thriftpy2's pure-Python binary reader, made
safe for bytes from anyone.

Both of thriftpy2's readers skip unknown fields by looping over a container's declared
size, and elements of a type that has no bytes on the wire (STOP, VOID, or any undefined
type number) cost nothing to skip. A 20-byte request declaring a list of two billion such
elements kept the Cython reader busy for 5 s and the pure-Python one for minutes, holding
the GIL (found by tests/wire/fuzz). No Thrift IDL can declare such a list, so skipping one is
refused at its first element: thriftpy2's module-level ``skip`` (which its ``read_struct``
and ``read_val`` look up at call time) is wrapped with that type check by
``install_checked_skip``, which ``request_protocol_factory`` calls (nothing is patched at
import). The wrapper changes nothing for well-formed messages, whoever reads them.
Replies are still written with the Cython writer.
"""

from __future__ import annotations

from typing import Any

from starscan.core.thriftpy2_internals import TProtocolException, TType, binary

_WIRE_TYPES = frozenset({TType.BOOL, TType.BYTE, TType.I16, TType.I32, TType.I64, TType.DOUBLE, TType.STRING,
                         TType.STRUCT, TType.MAP, TType.SET, TType.LIST})
_library_skip = binary.skip


def _skip_checked(inbuf: Any, ftype: int, budget: int = binary.DEFAULT_MAX_DEPTH) -> Any:
    if ftype not in _WIRE_TYPES:
        raise TProtocolException(TProtocolException.INVALID_DATA, f"cannot skip a value of Thrift type {ftype}")
    return _library_skip(inbuf, ftype, budget)


def install_checked_skip() -> None:
    """Wrap thriftpy2's ``skip`` with the type check (once per process; idempotent)."""
    if getattr(binary.skip, "__name__", "") != "_skip_checked":
        binary.skip = _skip_checked


class _CheckedReads:
    """The transport as the reader sees it: a negative length (forged) is refused instead of
    read as "nothing" (which would leave the reader waiting for the rest of a bad message)."""

    def __init__(self, trans: Any) -> None:
        self._trans = trans

    def read(self, sz: int) -> bytes:
        if sz < 0:
            raise TProtocolException(TProtocolException.NEGATIVE_SIZE, f"negative length {sz}")
        return bytes(self._trans.read(sz))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trans, name)


class _RequestProtocolFactory(binary.TBinaryProtocolFactory):  # type: ignore[misc]  # thriftpy2 is untyped
    def get_protocol(self, trans: Any) -> Any:
        return super().get_protocol(_CheckedReads(trans))


def request_protocol_factory() -> binary.TBinaryProtocolFactory:
    """Java's TBinaryProtocol.Factory default: lenient read (docs/protocol.md 3), so old-style
    requests without the 0x8001 version word are served too."""
    install_checked_skip()
    return _RequestProtocolFactory(strict_read=False, strict_write=True)

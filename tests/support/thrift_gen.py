"""An independent Thrift client of the BE, generated at test time."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

IDL = Path(__file__).resolve().parents[2] / "idl" / "StarrocksExternalService.thrift"


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the independent-client wire tests must run)", pytrace=False)
    pytest.skip(reason)


def official_thrift_client(out: Path) -> Any:
    """The `starscan_wire` package Debian's Apache Thrift compiler generates into ``out``
    from idl/StarrocksExternalService.thrift, with the official library's pieces: a client
    that shares nothing with starscan's own IDL loading (thriftpy2). Skipped without the
    compiler or the library, failed when CI is set."""
    compiler = shutil.which("thrift")
    if compiler is None:
        _unavailable("Apache Thrift compiler `thrift` not on PATH (apt-get install thrift-compiler)")
    try:
        from thrift.protocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport
    except ImportError:
        _unavailable("the official Apache Thrift Python library (`pip install thrift`) is not installed")
    proc = subprocess.run([compiler, "--gen", "py", "-out", str(out), str(IDL)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"thrift --gen py failed:\n{proc.stdout}\n{proc.stderr}"
    assert (out / "starscan_wire" / "TStarrocksExternalService.py").is_file()
    for name in [m for m in sys.modules if m == "starscan_wire" or m.startswith("starscan_wire.")]:
        del sys.modules[name]
    sys.path.insert(0, str(out))
    try:
        service = importlib.import_module("starscan_wire.TStarrocksExternalService")
        ttypes = importlib.import_module("starscan_wire.ttypes")
    finally:
        sys.path.remove(str(out))
    # Really the compiler's output, not something importable from elsewhere.
    assert Path(service.__file__).resolve().is_relative_to(out.resolve())
    assert "thriftpy2" not in repr(service.Client.__mro__)

    class Gen:
        pass

    g = Gen()
    g.service, g.ttypes = service, ttypes
    g.TSocket, g.TTransport, g.TBinaryProtocol = TSocket, TTransport, TBinaryProtocol
    return g

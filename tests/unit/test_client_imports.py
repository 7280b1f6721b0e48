"""`starscan.client` is a reader's package: importing it (and reading with it) must not load
Spark, the server's web stack or the server's modules."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_client_loads_no_spark_and_no_server():
    code = ("import json, sys; import starscan.client; from starscan.client import connect, ReadOptions; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    loaded = set(json.loads(out.strip().splitlines()[-1]))
    server_side = {"pyspark", "py4j", "fastapi", "uvicorn", "starlette", "mysql_mimic", "sqlglot", "pydantic"}
    assert not {m.split(".")[0] for m in loaded} & server_side
    assert not {m for m in loaded if m.startswith(("starscan.planner", "starscan.provider", "starscan.app.server"))}


def test_direct_is_false_true_or_auto_and_nothing_else():
    import pytest

    from starscan.client import connect

    for mode in (False, True, "auto"):
        assert connect("127.0.0.1:1", direct=mode).direct == mode
    for bad in (0, 1, "yes", None):
        with pytest.raises(ValueError, match="direct must be"):
            connect("127.0.0.1:1", direct=bad)


def test_a_direct_reader_loads_no_thrift_and_no_pandas():
    """A reader that plans and reads the files itself never talks Thrift to a BE: thriftpy2
    and the IDLs (about 60 ms) load on a BE's first call; pandas (0.2 s) never loads."""
    code = ("import json, sys; import starscan.client; import starscan.client.direct; "
            "from starscan.arrow.direct import DirectRead; from starscan.expr import from_json, to_json, column, literal, op; "
            "e = op('>=', column('id'), literal('bigint', '3')); assert from_json(to_json(e)) == e; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    loaded = {m.split(".")[0] for m in json.loads(out.strip().splitlines()[-1])}
    assert not loaded & {"thriftpy2", "pandas"}


def test_a_be_reader_loads_thriftpy2s_client_side_only():
    """The client's transport takes the socket from thriftpy2's adapter
    (starscan.core.thriftpy2_internals), whose server-side classes load only when the BE asks
    for them: a reader is not bound to thriftpy2's server internals."""
    code = ("import json, sys; from starscan.client.protocol import thrift_client, _thrift_parts; _thrift_parts(); "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    loaded = set(json.loads(out.strip().splitlines()[-1]))
    assert "starscan.client.transport" in loaded and "starscan.core.thriftpy2_internals" in loaded
    assert "thriftpy2.server" not in loaded

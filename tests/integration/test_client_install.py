"""The reading side installs alone: the wheel's own dependencies (no extra) are the client's
(pyarrow, numpy, thriftpy2, httpx), and a fresh virtual environment holding only those and
the wheel reads from a running server, with no pyspark and no server package importable.

The dependencies come from this test run's environment (the machine may have no network):
each distribution the wheel requires without an extra, and what those require in turn, is
linked into a folder the fresh environment reads through a .pth file.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from support.wheels import build_wheel, venv_with

pytestmark = pytest.mark.slow  # builds a wheel and a virtual environment



def _requirements(text_lines: list[str]) -> list[str]:
    """Distribution names of requirements that apply here without any extra."""
    from packaging.requirements import Requirement

    names = []
    for line in text_lines:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        names.append(req.name)
    return names


def _closure(names: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(_requirements(md.requires(name) or []))
        except md.PackageNotFoundError:
            pass  # an optional dependency this environment does not have
    return seen


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory):
    work = tmp_path_factory.mktemp("client-wheel")
    wheel = build_wheel(work)
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    base = _requirements(requires)
    py, site = venv_with(work, wheel)
    deps = work / "deps"
    deps.mkdir()
    for name in sorted(_closure(base)):
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        tops = {Path(str(f)).parts[0] for f in dist.files or ()} - {"..", "bin"}
        for top in tops:
            target = Path(str(dist.locate_file(top)))
            if target.exists() and not (deps / top).exists():
                (deps / top).symlink_to(target)
    (site / "client-deps.pth").write_text(str(deps) + "\n")
    return py, base


def test_the_wheel_needs_only_the_readers_packages(client_venv):
    _, base = client_venv
    assert sorted(base) == ["httpx", "numpy", "pyarrow", "thriftpy2"]


def test_a_fresh_environment_without_spark_reads_from_a_running_server(client_venv, server, fe_url):
    py, _ = client_venv
    script = f"""
import importlib.util, json
from starscan.client import connect
absent = [m for m in ("pyspark", "py4j", "fastapi", "uvicorn", "sqlglot", "pydantic")
          if importlib.util.find_spec(m) is not None]
conn = connect({fe_url!r}, "root", "")
table = conn.read_arrow("db1.t1", ["k1", "v1", "d", "dt", "m"])
print(json.dumps({{"absent": absent, "rows": sorted(table.to_pylist(), key=lambda r: r["k1"])}}, default=str))
"""
    out = subprocess.run([str(py), "-c", script], capture_output=True, text=True, timeout=300, cwd=py.parent)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["absent"] == []
    assert [r["k1"] for r in doc["rows"]] == [1, 2, 3]
    assert doc["rows"][0]["v1"] == "a" and doc["rows"][0]["d"] == "2024-01-02"


def test_a_fresh_environment_reads_a_direct_plan_from_the_files(client_venv, server, fe_url):
    """``pip install starscan`` alone reads direct plans (docs/direct-reads.md): the tablets
    of a table without row-level deletes come from the files, in the reader's process, with
    none of the server's packages (the BE's page cache and its cachetools among them)."""
    py, _ = client_venv
    name = "bare_direct"
    if not server.users.exists(name):
        server.users.set_password(name, "pw", create=True)
    server.users.grant(name, "db1.*")
    server.users.grant(name, "direct_read:db1.*")
    script = f"""
import importlib.util, json, sys
from starscan.client import connect
conn = connect({fe_url!r}, {name!r}, "pw")
table = conn.read_arrow("db1.t1", ["k1", "v1"], direct=True)
loaded = sorted(m for m in ("cachetools", "pyroaring", "fastavro", "thriftpy2") if m in sys.modules)
print(json.dumps({{"direct": conn.direct_tablets, "loaded": loaded, "k1": sorted(table.column("k1").to_pylist())}}))
"""
    out = subprocess.run([str(py), "-c", script], capture_output=True, text=True, timeout=300, cwd=py.parent)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["direct"] > 0 and doc["k1"] == [1, 2, 3]
    assert doc["loaded"] == []


def test_the_command_line_says_what_to_install(client_venv):
    py, _ = client_venv
    out = subprocess.run([str(py.parent / "starscan"), "serve"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "pip install 'starscan[server]'" in out.stderr

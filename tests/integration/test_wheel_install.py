"""The Docker image's path without a Docker engine: build the wheel, install it into a fresh
virtual environment, start `starscan serve` from there (JSON logs, config by environment
variables as in the image) and scan a table over real sockets. Also checks the process-level
logging: JSON lines with the scan ids, Spark quiet, no progress bar, SIGTERM stops cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sysconfig
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from support.readers import NOT_FOUND, Reader, plan_for, scrape, value
from support.waits import free_port, wait_until
from support.wheels import build_wheel, venv_with

from starscan.client import StarscanClient

pytestmark = pytest.mark.slow  # starts its own `starscan serve` (not the quick tier)



@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    py, site = venv_with(work, build_wheel(work))
    venv = py.parents[1]
    # The package from the wheel; its dependencies (pyspark is 300+ MB) from this test run's
    # environment through a .pth file, so nothing but the wheel comes from the source tree.
    Path(site, "deps-from-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([str(py), "-c", "import starscan, starscan.planner.admin, starscan.idl; print(starscan.__file__)"],
                           capture_output=True, text=True, cwd=work, timeout=120)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv)), where.stdout  # the wheel's copy, not the source tree
    return venv


def test_wheel_serves_a_table(fresh_venv, tmp_path):
    http_port, be_port, query_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", STARSCAN_FLIGHT_SQL_PORT="0", STARSCAN_BE_FLIGHT_PORT="0", STARSCAN_WAREHOUSE=str(tmp_path / "warehouse"), STARSCAN_DEMO_SCALE="0.001",
               STARSCAN_SPARK_MASTER="local[1]", STARSCAN_SPARK_CONF="spark.driver.memory=1g",
               STARSCAN_QUERY_PORT=str(query_port), STARSCAN_ENABLE_PROFILE_FOR_EXTERNAL_PLAN="true",
               STARSCAN_WARMUP_ROWS="20000")  # the warm-up runs from the wheel too, on a small table
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([str(fresh_venv / "bin" / "starscan"), "serve", "--http-port", str(http_port),
                                 "--be-port", str(be_port), "--log-format", "json"],
                                cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    fe_url = f"http://127.0.0.1:{http_port}"
    try:
        def healthy():
            assert proc.poll() is None, log_path.read_text()
            try:
                return httpx.get(f"{fe_url}/api/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout_s=240, interval_s=0.5, what="starscan serve from the wheel")
        scanned = subprocess.run([str(fresh_venv / "bin" / "starscan"), "scan", "demo.lineitem", "--fe",
                                  f"127.0.0.1:{http_port}", "--columns", "l_orderkey,l_quantity"],
                                 capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert scanned.returncode == 0, scanned.stderr
        expected = pq.read_table(tmp_path / "warehouse" / "demo.db" / "lineitem").num_rows
        assert expected > 0 and f"rows={expected:,} " in scanned.stdout, scanned.stdout

        # A scanner closed before its end: the cancel must not spill Spark stack traces.
        client = StarscanClient(fe_url, "root", "")
        plan_b64, tablets = plan_for(client, "demo", "lineitem", "select * from demo.lineitem")
        reader = Reader(("127.0.0.1", be_port))
        try:
            cid = reader.open_ok("demo", "lineitem", plan_b64, tablets, batch_size=100)
            reader.next_batch(cid, 0)
            reader.close_scanner(cid)
            assert reader.next(cid, 100).status.status_code == NOT_FOUND
        finally:
            reader.close()
        samples = scrape(fe_url)
        assert value(samples, "starrocks_be_active_scan_context_count") == 0
        assert value(samples, "starscan_scanners_opened_total") >= 2
        profile = httpx.get(f"{fe_url}/api/scans/{cid}/profile", auth=("root", ""), timeout=30).json()
        assert profile["outcome"] == "closed_before_eos" and profile["rows"] == 100
        time.sleep(0.5)  # let Spark's cancelled tasks log whatever they log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    output = log_path.read_text()
    assert rc == 0, output

    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert any(r["msg"].startswith("starscan ") and "ready" in r["msg"] for r in records)
    scan_lines = [r for r in records if r.get("context_id")]
    assert {r["context_id"] for r in scan_lines} >= {cid}
    for r in scan_lines:
        assert r.get("query_id") and r.get("user") == "root" and r.get("table") == "demo.lineitem", r
    assert any(r["logger"] == "starscan.provider" and r["msg"].startswith("open ") for r in scan_lines)
    assert not any(r["logger"].startswith("py4j") and r["level"] == "INFO" for r in records)
    others = [line for line in output.splitlines() if line.strip() and not line.startswith("{")]
    assert not any("[Stage" in line for line in others), others  # no console progress bar
    assert not any(line.lstrip().startswith("at ") for line in others), "\n".join(others)  # no JVM stack traces

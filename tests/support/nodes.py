"""`starscan serve --role ...` processes, as a user deploys them (separate FE and BE nodes on
127.0.0.1 sharing a warehouse, the users file, the state folder and the plan secret), for the
scale-out tests and the chaos soak (bench/chaos.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from support.waits import wait_until


class Node:
    """One `starscan serve` process under ``root`` (its warehouse ``root/wh``, its state
    ``root/state``), started with ``args`` and ``env`` (STARSCAN_* settings); on 127.0.0.1,
    or on a test host of tests/support/netns.py (``host``: it binds and advertises
    ``address``, by default the host's own, and keeps its settings' default ports)."""

    def __init__(self, root: Path, name: str, *args: str, env: dict[str, str] | None = None, host: Any = None,
                 address: str | None = None):
        self.root, self.name, self.args = root, name, args
        self.env = dict(env or {})
        self.host = host
        self.address = address or (host.address if host is not None else "127.0.0.1")
        self.proc: subprocess.Popen | None = None

    def start(self) -> Node:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
        env.update(SPARK_LOCAL_IP=self.address, STARSCAN_WARMUP_ROWS="0", STARSCAN_STATE_DIR=str(self.root / "state"))
        if self.host is None:  # on one host every node needs ports of its own
            env.update(STARSCAN_FLIGHT_SQL_PORT="0", STARSCAN_BE_FLIGHT_PORT="0")
        else:
            env.update(STARSCAN_ADVERTISE_HOST=self.address)
        env.update(self.env)
        log = (self.root / f"{self.name}.log").open("a")
        argv = [sys.executable, "-m", "starscan", "serve", "--warehouse", str(self.root / "wh"),
                "--bind-host", self.address, "--demo-scale", "0", *self.args]
        self.proc = subprocess.Popen(self.host.command(*argv) if self.host is not None else argv,
                                     cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def log(self) -> str:
        return (self.root / f"{self.name}.log").read_text()[-3000:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, http_port: int, timeout_s: float = 300) -> None:
        def answers() -> bool:
            try:
                return httpx.get(f"http://{self.address}:{http_port}/api/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        def ready() -> bool:
            assert self.alive(), self.log()
            return self.host.run_here(answers) if self.host is not None else answers()

        wait_until(ready, timeout_s=timeout_s, interval_s=0.5, what=f"{self.name} to start")

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(60)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a minute."""
        if self.alive():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def spark_daemon(root: Path, name: str, *args: str, host: Any = None, work_dir: Path | None = None,
                 daemon_opts: str | None = None) -> subprocess.Popen:
    """A Spark standalone master or worker (``spark-class org.apache.spark.deploy...``) from
    pyspark's own jars, logging to ``root/<name>.log``; on 127.0.0.1, or on a test host of
    tests/support/netns.py (``host``). ``work_dir``: a worker's folder for its executors'
    logs (default ``root/work``); ``daemon_opts``: JVM options of the master and its workers."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STARSCAN_", "PYSPARK_"))}
    env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP=host.address if host is not None else "127.0.0.1",
               SPARK_WORKER_DIR=str(work_dir or root / "work"), SPARK_LOG_DIR=str(root / "logs"),
               PYSPARK_PYTHON=sys.executable)
    if daemon_opts:
        env["SPARK_DAEMON_JAVA_OPTS"] = daemon_opts
    argv = [str(home / "bin" / "spark-class"), *args]
    log = (root / f"{name}.log").open("w")
    proc = subprocess.Popen(host.command(*argv) if host is not None else argv, cwd=root, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    log.close()
    return proc


def write_id_table(folder: Path, files: int, rows_per_file: int) -> None:
    """A table of ``files`` Parquet files (row groups of 10,000) whose rows are known without
    any engine: ``id`` 0.. and ``v = str(id)``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for n in range(files):
        ids = pa.array(range(n * rows_per_file, (n + 1) * rows_per_file), pa.int64())
        pq.write_table(pa.table({"id": ids, "v": pc.cast(ids, pa.string())}), folder / f"part-{n}.parquet",
                       row_group_size=10_000)

"""From a node's process start to its first row (issue 38; not a test).

A BE restarted after a crash is away until it answers again: this measures how long, as a
reader sees it. For each role, a fresh `starscan serve` process is started (the clock starts
at its spawn) and a reader polls it from outside, every 0.2 s:

- **listening**: the BE's Thrift port accepts a connection;
- **open_scanner OK**: `open_scanner` with a plan answers OK within 1 s (the Flink
  connector's default timeout; the plan comes from an FE already running for `--role be`,
  from the node itself for `--role all`);
- **first row**: the first `get_next` of that scanner returns rows (waited for up to a
  minute: the Spark connector's reader is not cut off at 1 s);
- **ready line**: the node logs "ready".

Settings are the defaults (warm-up on), Spark `local[2]`,
`demo.lineitem` at ``--scale`` in a warehouse written once.

    python bench/be_start.py                      # --role be and --role all, 2 runs each
    python bench/be_start.py --runs 1 --no-append
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
import httpx
from support.waits import free_port

DB, TABLE = "demo", "lineitem"
SQL = "select * from `demo`.`lineitem`"
POLL_S = 0.2
CALL_TIMEOUT_S = 1.0


def _serve(root: Path, name: str, warehouse: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", STARSCAN_FLIGHT_SQL_PORT="0", STARSCAN_BE_FLIGHT_PORT="0", STARSCAN_PLAN_SECRET="bench-be-start-secret-0123456789",
               STARSCAN_STATE_DIR=str(root / "state"))
    log = root / f"{name}.log"
    proc = subprocess.Popen([sys.executable, "-m", "starscan", "serve", "--warehouse", str(warehouse),
                             "--bind-host", "127.0.0.1", *args], cwd=root, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)
    return proc, log


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _plan(fe_http: int) -> dict | None:
    try:
        r = httpx.post(f"http://127.0.0.1:{fe_http}/api/{DB}/{TABLE}/_query_plan", json={"sql": SQL},
                       auth=("root", ""), timeout=CALL_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def _try_read(be_port: int, plan: dict, started: float) -> tuple[float | None, float | None, str]:
    """(when open_scanner answered OK, when the first rows came, what failed): the open with
    the 1 s timeout; then one get_next, waited for up to a minute (a reader that is not
    cut off at 1 s, as the Spark connector's default read timeout does not)."""
    from starscan.client import thrift_client
    from starscan.core.thrift_defs import wire

    try:
        conn = thrift_client("127.0.0.1", be_port, timeout_s=CALL_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - not listening yet
        return None, None, type(exc).__name__
    try:
        opened = conn.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database=DB, table=TABLE, tablet_ids=[int(t) for t in plan["partitions"]],
            opaqued_query_plan=plan["opaqued_query_plan"], user="root", passwd="", batch_size=1000,
            keep_alive_min=1, query_timeout=600, mem_limit=1 << 30))
        if opened.status.status_code != wire.TStatusCode.OK:
            return None, None, str(opened.status.error_msgs)[:120]
        open_at = time.monotonic() - started
    except Exception as exc:  # noqa: BLE001 - a timeout or a reset: not answered
        return None, None, f"open_scanner: {type(exc).__name__}: {str(exc)[:80]}"
    try:
        conn.close()
        conn = thrift_client("127.0.0.1", be_port, timeout_s=60.0)
        res = conn.get_next(wire.TScanNextBatchParams(context_id=opened.context_id, offset=0))
        got = res.status.status_code == wire.TStatusCode.OK and bool(res.rows)
        conn.close_scanner(wire.TScanCloseParams(context_id=opened.context_id))
        return open_at, (time.monotonic() - started) if got else None, "" if got else str(res.status.error_msgs)[:120]
    except Exception as exc:  # noqa: BLE001
        return open_at, None, f"get_next: {type(exc).__name__}: {str(exc)[:80]}"
    finally:
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT_S):
            return True
    except OSError:
        return False


def measure(root: Path, warehouse: Path, role: str, fe_http: int | None, timeout_s: float,
            be_port: int | None = None) -> dict:
    be_port = be_port or free_port()
    args = ["--role", role, "--be-port", str(be_port), "--demo-scale", "0"]
    own_http = None
    if role == "all":
        own_http = free_port()
        args += ["--http-port", str(own_http), "--query-port", str(free_port())]
    else:
        args += ["--be-http-port", str(free_port())]
    started = time.monotonic()
    proc, log = _serve(root, f"{role}-{int(started)}", warehouse, *args)
    out = {"listening": None, "open": None, "first_row": None, "ready_line": None, "last_failure": ""}
    try:
        while time.monotonic() - started < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"the node exited: {log.read_text()[-1500:]}")
            now = time.monotonic() - started
            if out["ready_line"] is None and " ready: " in log.read_text(errors="replace"):
                out["ready_line"] = now
            if out["listening"] is None and _listening(be_port):
                out["listening"] = time.monotonic() - started
            if out["listening"] is not None:
                plan = _plan(fe_http if fe_http is not None else own_http)
                if plan is not None:
                    opened, row, why = _try_read(be_port, plan, started)
                    if opened is not None and out["open"] is None:
                        out["open"] = opened
                    if row is not None:
                        out["first_row"] = row
                        break
                    out["last_failure"] = why
            time.sleep(POLL_S)
        while out["ready_line"] is None and time.monotonic() - started < timeout_s:
            if " ready: " in log.read_text(errors="replace"):
                out["ready_line"] = time.monotonic() - started
            time.sleep(POLL_S)
    finally:
        _stop(proc)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--roles", default="be,all")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args(argv)
    env = common.environment()
    root = Path(tempfile.mkdtemp(prefix="starscan-be-start-"))
    warehouse = root / "warehouse"
    fe_proc = None
    rows = []
    try:
        # The warehouse, written once by an FE (which also plans for the BE runs).
        fe_http, be_for_fe = free_port(), free_port()
        fe_proc, fe_log = _serve(root, "fe", warehouse, "--role", "fe", "--http-port", str(fe_http), "--query-port",
                                 str(free_port()), "--demo-scale", str(args.scale), "--be-endpoints",
                                 f"127.0.0.1:{be_for_fe}")
        deadline = time.monotonic() + 600
        while not _listening(fe_http) or "created demo tables" not in fe_log.read_text(errors="replace"):
            if fe_proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the FE did not start: {fe_log.read_text()[-1500:]}")
            time.sleep(0.5)
        for role in args.roles.split(","):
            for run in range(args.runs):
                if role == "all":
                    _stop(fe_proc)  # one node alone: it writes nothing (the demo is there), plans for itself
                # A BE listens on the port the FE's routings name (the FE answers no plan while
                # none of its BEs is alive): as a BE restarted in place.
                got = measure(root, warehouse, role, fe_http if role == "be" else None, args.timeout,
                              be_for_fe if role == "be" else None)
                common.log(f"{role} run {run + 1}: {got}")
                rows.append([f"--role {role}", run + 1, *(common.fmt(got[k]) if got[k] is not None else "never"
                                                          for k in ("listening", "open", "first_row", "ready_line")),
                             got["last_failure"] or "–"])
    finally:
        if fe_proc is not None:
            _stop(fe_proc)
        shutil.rmtree(root, ignore_errors=True)
    table = common.markdown_table(
        ["node", "run", "BE port listening s", "open_scanner OK s", "first row s", "'ready' logged s",
         "last failure before the first row"], rows)
    conditions = {
        "what": "seconds from spawning `starscan serve --role ROLE` to: the BE port accepting a connection; an "
                "open_scanner answering OK within 1 s (polled every 0.2 s from another process); that scanner's "
                "first get_next returning rows (waited for up to 60 s); the node's 'ready' log line",
        "data": f"demo.lineitem at scale {args.scale}, written once by an FE process before the runs",
        "nodes": "default settings (warm-up on: warmup_rows default, stopped by the first reader's scan), Spark "
                 "local[2]; --role be: a BE on the port a separate FE process routes to (the FE notices it within its "
                 "probe interval), plans from that FE; --role all plans from itself",
        "target": "first row <= 10 s after the process start (issue 38)",
        "load average at end": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    common.report("be_start: process start to first row", conditions, table, env, not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Exactly-once consumption (`starscan follow`): a writer appends files while a consumer
process follows the table and is killed with SIGKILL at random moments and started again;
in the end every appended row is in the consumer's output exactly once."""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
import time
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.readers import follow_process

VERSIONS = 60
ROWS_PER_VERSION = 25

pytestmark = pytest.mark.slow  # starts `starscan follow` processes of its own


def _append(location, i: int) -> None:
    ids = range(i * ROWS_PER_VERSION, (i + 1) * ROWS_PER_VERSION)
    table = pa.table({"id": pa.array(list(ids), pa.int64()), "v": pa.array([f"r{x}" for x in ids])})
    tmp = location / f".part-{i:04d}.tmp"  # hidden while written, then renamed: writers publish whole files
    pq.write_table(table, tmp)
    os.replace(tmp, location / f"part-{i:04d}.parquet")


class CommitHold:
    """An HTTP proxy in front of the FE that, while ``hold`` is set, keeps the consumer's
    commit requests (the step's file is then renamed into place and its position not yet
    committed) and reports each in ``held``: the test kills the consumer exactly there."""

    def __init__(self, target: str):
        import http.server

        import httpx

        self.hold = threading.Event()
        self.held = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if "/commit" in self.path and proxy.hold.is_set():
                    proxy.held.set()
                    time.sleep(60)  # the consumer is killed meanwhile
                    return
                r = httpx.request(self.command, f"http://{target}{self.path}", content=body, timeout=120,
                                  headers={k: v for k, v in self.headers.items()
                                           if k.lower() in ("authorization", "content-type")})
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = _forward

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_consumer_killed_between_its_output_and_its_commit_writes_nothing_twice(server, tmp_path):
    location = server.warehouse.table_path("inc", "held")
    shutil.rmtree(location, ignore_errors=True)
    location.mkdir(parents=True)
    _append(location, 0)
    proxy = CommitHold(f"127.0.0.1:{server.http_port}")
    out = tmp_path / "out"
    for i in range(1, 6):
        _append(location, i)
        proxy.hold.set()
        proxy.held.clear()
        proc = follow_process(proxy.address, out, table="inc.held", consumer="held")
        assert proxy.held.wait(120), "the consumer never reached a commit"
        proc.send_signal(signal.SIGKILL)  # its file is in place, its position is not committed
        proc.wait(30)
    proxy.hold.clear()
    final = follow_process(proxy.address, out, "--stop-when-idle", table="inc.held", consumer="held")
    _, err = final.communicate(timeout=300)
    assert final.returncode == 0, err.decode(errors="replace")[-2000:]
    seen = Counter(x for path in out.glob("*-*.parquet") for x in pq.read_table(path).column("id").to_pylist())
    assert seen == Counter(range(6 * ROWS_PER_VERSION))
    proxy.server.shutdown()


def test_a_killed_consumer_delivers_every_appended_row_exactly_once(server, tmp_path):
    location = server.warehouse.table_path("inc", "stream")
    shutil.rmtree(location, ignore_errors=True)
    location.mkdir(parents=True)
    _append(location, 0)
    fe = f"127.0.0.1:{server.http_port}"
    out = tmp_path / "out"
    done = threading.Event()

    def writer() -> None:
        for i in range(1, VERSIONS):
            _append(location, i)
            time.sleep(random.uniform(0.02, 0.15))
        done.set()

    rng = random.Random(20261123)
    threading.Thread(target=writer, daemon=True).start()
    kills = 0
    while not done.is_set() or kills < 6:
        proc = follow_process(fe, out)
        time.sleep(rng.uniform(0.3, 2.0))  # before, inside or after a step, or before its commit
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        kills += 1
        if kills > 40:
            break
    assert done.wait(120)
    final = follow_process(fe, out, "--stop-when-idle")
    _, err = final.communicate(timeout=300)
    assert final.returncode == 0, err.decode(errors="replace")[-2000:]

    seen: Counter = Counter()
    for path in sorted(out.glob("*-*.parquet")):
        seen.update(zip(pq.read_table(path).column("id").to_pylist(), pq.read_table(path).column("v").to_pylist()))
    expected = Counter((x, f"r{x}") for x in range(VERSIONS * ROWS_PER_VERSION))
    assert kills >= 6
    assert seen == expected, (sum(seen.values()), len(expected), [k for k, n in seen.items() if n > 1][:5])

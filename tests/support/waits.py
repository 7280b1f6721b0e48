"""Waiting for a condition, and ports to listen on."""

from __future__ import annotations

import itertools
import os
import random
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float = 60.0, interval_s: float = 0.05,
               what: str = "condition") -> T:
    """``predicate()``'s first true value, asked every ``interval_s``; AssertionError naming
    ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to sockets bound to port 0 (and to outgoing
    connections)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_FIRST_PORT = 20000
_picks = itertools.count(random.randrange(1 << 16))  # this process's next pick in its block


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server a test or a benchmark
    starts later.

    Taken below the kernel's ephemeral range: a port there is never handed to a socket bound
    to port 0 or to an outgoing connection, so Spark's driver, block manager and workers (and
    every client) cannot take it between this pick and the server's bind (a CI run lost
    `starscan serve`'s query port that way). Each xdist worker picks from its own block of
    the ports from 20000 to the range, so two workers never pick the same one; a process picks
    its block's ports in turn from a random one.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    index = int(worker) if worker.isdigit() else 0
    count = max(int(workers) if workers.isdigit() else 1, index + 1)
    block = min(1000, (_ephemeral_low() - _FIRST_PORT) // count)
    if block >= 16:
        base = _FIRST_PORT + index * block
        for _ in range(block):
            port = base + next(_picks) % block
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue  # in use, or in TIME_WAIT
                return port
    warnings.warn("no free port below the ephemeral range: a port bound to 0 may take the one picked here",
                  stacklevel=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

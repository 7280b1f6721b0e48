"""A node's listening ports: a port that cannot be bound stops the node at once with an
error that names the port, the setting that chose it and, where this machine can tell, the
process that holds it.

The libraries say less: gRPC (the Flight ports) reports only "Server did not start
properly", and the socket error names neither the setting nor the holder. Two nodes on one
host left at their defaults (``be_flight_port`` 9419 both) is the usual cause, so the
message says which setting to change.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


class CannotListen(Exception):
    """A port of the node cannot be bound (in use, or not allowed)."""


def listening(setting: str, host: str, port: int, start: Callable[[], T]) -> T:
    """``start()``, which binds ``host:port`` for ``setting``; its failure as CannotListen
    naming all three (and the port's holder, when another process has it)."""
    try:
        return start()
    except Exception as exc:  # noqa: BLE001 - OSError from sockets, ArrowException from gRPC
        in_use = isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
        if not in_use and port and not isinstance(exc, OSError):
            in_use = not is_free(host, port)  # gRPC says only "did not start properly"
        if in_use:
            raise port_in_use(setting, host, port) from None
        raise CannotListen(f"cannot listen on {host}:{port} ({setting}): {exc}") from None


def check_free(setting: str, host: str, port: int) -> None:
    """A port bound later (the BE's push listener, at its first scan) checked at start."""
    if port and not is_free(host, port):
        raise port_in_use(setting, host, port)


def is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def port_in_use(setting: str, host: str, port: int) -> CannotListen:
    holder = holder_of(port)
    held = f" by {holder}" if holder else " by another process"
    return CannotListen(f"port {port} on {host} ({setting}) is in use{held}: set {setting} to a free port "
                        "(every node on one host needs its own ports)")


def holder_of(port: int, proc: Path = Path("/proc")) -> str | None:
    """``pid N (command line)`` of the process with a listening TCP socket on ``port`` in
    this network namespace, from /proc (Linux); None where it cannot be told."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in (p for p in os.listdir(proc) if p.isdigit()):
        try:
            fds = os.listdir(proc / pid / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(proc / pid / "fd" / fd) in wanted:
                    return f"pid {pid} ({_command_of(proc / pid)})"
            except OSError:
                continue
    return None


def _command_of(pid_dir: Path) -> str:
    try:
        words = (pid_dir / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    return text if len(text) <= 120 else text[:117] + "..."

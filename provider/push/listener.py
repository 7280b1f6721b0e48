"""The BE end of push connections (provider/push/wire.py): one listener per BE.

The listener accepts a connection, reads the hello and hands the connection to the sink
(provider/push/sink.py) whose token it names; anything else (a wrong magic, an unknown or
expired token, a split out of range) is closed at once, so no one can add rows to a scan
without its token, and a token stops working when its scan ends. A task that names no split
gets the one the BE's scheduler (provider/scheduler.py) gives it, or is told to stop.
"""

from __future__ import annotations

import hmac
import logging
import os
import shutil
import socket
import tempfile
import threading
import time

from starscan.provider.push.sink import PushSink
from starscan.provider.push.wire import (
    ANY_SPLIT,
    HELLO,
    KEEP_SPLIT,
    MAGIC,
    NEXT_SPLIT,
    STOP,
    recv_exact,
    send_quietly,
)
from starscan.provider.scheduler import Ask, SlotScheduler

log = logging.getLogger("starscan.provider.push")

HELLO_TIMEOUT_S = 10.0
#: The hello's split numbers that ask the scheduler for a split, and how they ask.
_ASKS = {ANY_SPLIT: Ask.FIRST, KEEP_SPLIT: Ask.IN_TURN, NEXT_SPLIT: Ask.TURN_OVER}
SOCKET_BUFFER_BYTES = 1 << 20


class PushListener:
    """Accepts push connections on ``host:port`` (0: a free port) for the scans registered;
    with ``local`` also on a Unix socket in a folder only this user can enter (``local_path``),
    which tasks on this machine use instead (provider/push/wire.py). Both take the same
    hello: the token, not the way in, is what admits a connection."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, advertised_host: str | None = None,
                 local: bool = False, scheduler: SlotScheduler | None = None):
        tcp = socket.create_server((host, port), backlog=256)
        # Accepted connections inherit it: what a task can have in flight beyond the
        # scanner's queue stays small (the kernel would otherwise buffer megabytes).
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        self.host = host
        self.port = tcp.getsockname()[1]
        # Where tasks connect: the bound address, or the advertised one when bound to all.
        self.advertised_host = advertised_host if host in ("0.0.0.0", "", "::") and advertised_host else host
        self._sinks: dict[bytes, PushSink] = {}
        self._lock = threading.Lock()
        self.scheduler = scheduler or SlotScheduler()  # the turns of the scans registered here
        self._stopping = False
        self._servers = [tcp]  # then the Unix socket, when there is one
        self.accepted = {"tcp": 0, "local": 0}  # connections accepted, by the way in
        self._local_dir: str | None = None
        self.local_path: str | None = None
        if local and hasattr(socket, "AF_UNIX"):
            self._listen_locally()
        self._threads = [threading.Thread(target=self._accept, args=(server, way), name="be-push", daemon=True)
                         for server, way in zip(self._servers, ("tcp", "local"))]
        for thread in self._threads:
            thread.start()

    def _listen_locally(self) -> None:
        """The Unix socket, or none (tasks then push over TCP) when it cannot be made: no
        writable temporary folder, or a path longer than a socket address allows."""
        unix = None
        _remove_dead_folders()
        try:
            self._local_dir = tempfile.mkdtemp(prefix=LOCAL_PREFIX)  # mode 0700
            path = os.path.join(self._local_dir, LOCAL_SOCKET)
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(path)
            unix.listen(256)
        except OSError as exc:
            log.warning("no Unix socket for Spark tasks on this machine (they push over TCP): %s", exc)
            if unix is not None:
                unix.close()
            if self._local_dir is not None:
                shutil.rmtree(self._local_dir, ignore_errors=True)
                self._local_dir = None
            return
        self.local_path = path
        self._servers.append(unix)

    def register(self, sink: PushSink) -> None:
        with self._lock:
            self._sinks[sink.token] = sink
        self.scheduler.add(sink)

    def unregister(self, sink: PushSink) -> None:
        with self._lock:
            self._sinks.pop(sink.token, None)
        self.scheduler.remove(sink)

    def _accept(self, server: socket.socket, way: str) -> None:
        while not self._stopping:
            try:
                sock, _ = server.accept()
            except OSError:
                return
            with self._lock:
                self.accepted[way] += 1
            threading.Thread(target=self._handle, args=(sock,), name="be-push-conn", daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(HELLO_TIMEOUT_S)
            hello = recv_exact(sock, HELLO.size)
            sock.settimeout(None)
        except OSError:
            hello = None
        if hello is None:
            sock.close()
            return
        magic, token, split, _attempt = HELLO.unpack(hello)
        sink = self._find(token) if hmac.compare_digest(magic, MAGIC) else None
        if sink is not None and split in _ASKS:
            claimed = self.scheduler.split_for(sink, _ASKS[split])
            if claimed is None:  # every split is read, the scan stopped, or the slot goes to another scan
                send_quietly(sock, STOP)
                sock.close()
                return
            sink.serve(sock, claimed, assigned=True)
            return
        if sink is None or split >= len(sink.splits):
            # Not a scan of ours (forged, or one that ended): no answer, no rows.
            log.info("push connection refused: %s", "unknown or expired scan token" if sink is None else
                     f"split {split} out of range")
            sock.close()
            return
        self.scheduler.task_asked(sink)  # the sql engine's task: one per job
        sink.serve(sock, split)

    def _find(self, token: bytes) -> PushSink | None:
        with self._lock:
            return self._sinks.get(token)

    def stop(self) -> None:
        self._stopping = True
        for server in self._servers:
            try:
                server.close()
            except OSError:
                pass
        if self._local_dir is not None:
            shutil.rmtree(self._local_dir, ignore_errors=True)


LOCAL_PREFIX = "starscan-push-"  # the Unix socket's folder: tempfile.mkdtemp's prefix
LOCAL_SOCKET = "push.sock"        # its name in the folder
STARTING_FOLDER_S = 60.0          # a folder changed this recently may be a listener's still starting


def _remove_dead_folders() -> None:
    """Folders of this user's earlier listeners whose server is gone (killed, so it could not
    remove its own): their socket refuses connections, or is not there. A live server's
    socket accepts, and its folder stays; so does a folder changed in the last
    STARTING_FOLDER_S, which may be another server's between making it and listening (two
    servers starting at once would otherwise remove each other's)."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(LOCAL_PREFIX)]
    except OSError:
        return
    for name in names:
        folder = os.path.join(root, name)
        try:
            st = os.stat(folder)
        except OSError:
            continue
        if st.st_uid != os.getuid() or time.time() - st.st_mtime < STARTING_FOLDER_S:
            continue
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(os.path.join(folder, LOCAL_SOCKET))
        except (ConnectionRefusedError, FileNotFoundError):
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass  # not ours to judge
        finally:
            probe.close()

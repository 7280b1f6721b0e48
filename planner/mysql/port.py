"""The MySQL listener: mysql-mimic's asyncio server on its own thread and event loop.
Statements that touch Spark or the file system run in worker threads, so one slow query
does not hold up other connections."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from mysql_mimic import MysqlServer

from starscan.core.errors import StarscanError
from starscan.planner.mysql import mimic_internals
from starscan.planner.mysql.auth import UsersFileIdentity, client_address
from starscan.planner.mysql.session import PortContext, StarscanSession
from starscan.planner.mysql.variables import global_variables
from starscan.planner.statements import StatementService
from starscan.security.ratelimit import LoginGuard
from starscan.security.users import UserStore
from starscan.settings.config import Settings

log = logging.getLogger("starscan.mysql")
# mysql-mimic logs every error a client gets at ERROR level; the session logs them itself
# (starscan.mysql, INFO), and unexpected failures with their traceback.
logging.getLogger("mysql_mimic.connection").setLevel(logging.CRITICAL)


class _Server(MysqlServer):
    async def _client_connected_cb(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client_address.set(peer[0] if peer else "unknown")  # this connection's task only
        await super()._client_connected_cb(reader, writer)


class MysqlPort:
    """``start()`` binds ``settings.query_port`` (0: a free port, see ``port``); ``stop()``
    closes the listener and every open connection."""

    def __init__(self, settings: Settings, statements: StatementService, users: UserStore,
                 guard: LoginGuard | None = None, on_refused: Callable[[], None] | None = None):
        self.host = settings.bind_host
        self.requested_port = settings.query_port
        self.ctx = PortContext(statements=statements, variables=global_variables(settings.time_zone))
        self.port: int | None = None
        self._server = _Server(session_factory=lambda: StarscanSession(self.ctx),
                               identity_provider=UsersFileIdentity(users, guard, on_refused))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MysqlPort:
        mimic_internals.require()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.start_server(host=self.host, port=self.requested_port))
                self.port = self._server.sockets()[0].getsockname()[1]
            except BaseException as exc:  # noqa: BLE001 - reported to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()

        self._thread = threading.Thread(target=run, name="fe-mysql", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            self.stop()
            raise StarscanError(f"the FE MySQL port {self.host}:{self.requested_port} did not start within 30 s")
        if failure:
            raise failure[0]
        log.info("FE MySQL protocol listening on %s:%d", self.host, self.port)
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def shutdown() -> None:
            self._server.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._server.wait_closed()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10)
        except Exception as exc:  # noqa: BLE001 - stopping anyway
            log.warning("MySQL port shutdown: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

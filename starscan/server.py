"""Assembles FE and BE around one SparkSession (`starscan serve`)."""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn

from starscan import plan as plan_codec
from starscan.catalog import Warehouse
from starscan.config import Settings
from starscan.gc.reaper import ScanContextReaper
from starscan.planner.app import create_app
from starscan.planner.query_plan import QueryPlanner
from starscan.provider.contexts import ScanContextManager
from starscan.provider.handler import ExternalServiceHandler
from starscan.provider.server import ThriftServer
from starscan.provider.service import ScanService
from starscan.schemas import SchemaResolver
from starscan.users import UserStore

log = logging.getLogger("starscan")


class StarscanServer:
    """FE (uvicorn) + BE (thriftpy2) + reaper in one process. Ports 0 pick free ports."""

    def __init__(self, settings: Settings, spark, fe: bool = True, be: bool = True):
        self.settings = settings
        self.spark = spark
        settings.warehouse.mkdir(parents=True, exist_ok=True)
        self.warehouse = Warehouse(settings.warehouse, settings.listing_cache_ttl_s)
        self.signer = plan_codec.PlanSigner(plan_codec.load_or_create_secret(settings.state_dir, settings.plan_secret))
        self.users = UserStore(settings.effective_users_file)
        self.contexts = ScanContextManager()
        self.fe_enabled, self.be_enabled = fe, be
        self._uvicorn: uvicorn.Server | None = None
        self._uvicorn_thread: threading.Thread | None = None
        self.thrift: ThriftServer | None = None
        self.reaper: ScanContextReaper | None = None
        self.http_port: int | None = None
        self.be_port: int | None = None
        self.service = ScanService(settings, spark, self.signer, self.contexts)
        self.planner = QueryPlanner(settings, self.warehouse, SchemaResolver(spark), self.signer)

    def start(self) -> "StarscanServer":
        self.users.warn_if_default_root()
        if self.be_enabled:
            self.thrift = ThriftServer(ExternalServiceHandler(self.service), self.settings.bind_host,
                                       self.settings.be_port, self.settings.thrift_client_timeout_s)
            self.thrift.start()
            self.be_port = self.thrift.port
            if self.settings.be_port == 0 and not self.settings.be_endpoints:
                # Tests bind port 0: advertise the port actually bound.
                self.settings = self.settings.model_copy(update={"be_port": self.be_port})
                self.planner.settings = self.settings
            self.reaper = ScanContextReaper(self.contexts, self.settings.gc_interval_s)
            self.reaper.start()
        if self.fe_enabled:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.bind_host, self.settings.http_port))
            self.http_port = sock.getsockname()[1]
            app = create_app(self.planner, self.users)
            config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
            self._uvicorn = uvicorn.Server(config)
            self._uvicorn_thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [sock]},
                                                    name="fe-http", daemon=True)
            self._uvicorn_thread.start()
            deadline = time.monotonic() + 30
            while not self._uvicorn.started and time.monotonic() < deadline:
                time.sleep(0.02)
            log.info("FE http listening on %s:%d", self.settings.bind_host, self.http_port)
        return self

    def stop(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            if self._uvicorn_thread is not None:
                self._uvicorn_thread.join(timeout=10)
        if self.thrift is not None:
            self.thrift.stop()
        if self.reaper is not None:
            self.reaper.stop()
        self.contexts.close_all()

    def wait(self) -> None:
        while True:
            time.sleep(3600)

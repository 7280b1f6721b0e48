"""Assembles FE and BE around one SparkSession (`starscan serve`)."""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from starscan.app.huge_pages import set_transparent_huge_pages
from starscan.app.operations import Operations
from starscan.app.ports import check_free, listening
from starscan.core import logs
from starscan.core.errors import ServerShuttingDown, StarscanError
from starscan.gc.reaper import ScanContextReaper
from starscan.planner import uvicorn_internals
from starscan.planner.app import create_app
from starscan.planner.auth import Authenticator
from starscan.planner.be_membership import BeMembership
from starscan.planner.flight_sql.server import FlightSqlServer
from starscan.planner.http_protocol import BoundedHttpToolsProtocol
from starscan.planner.mysql import MysqlPort
from starscan.planner.ops_routes import install_routes
from starscan.planner.query_plan import QueryPlanner
from starscan.planner.statements import ScanReads, StatementService
from starscan.planner.thrift_relay import ThriftRelay
from starscan.plans.scan_records import FOLDER as SCAN_RECORDS
from starscan.plans.scan_records import ScanRecords
from starscan.plans.secrets import RotatingPlanSigner
from starscan.plans.tablet_lists import TabletLists
from starscan.provider.admission import Admission
from starscan.provider.contexts import ScanContextManager
from starscan.provider.flight_front import BeFlightServer
from starscan.provider.handler import ExternalServiceHandler
from starscan.provider.service import ScanService
from starscan.provider.worker_keeper import PythonWorkerKeeper
from starscan.security import tls
from starscan.security.audit import AuditLog
from starscan.security.ratelimit import LoginGuard
from starscan.security.tokens import TokenVerifier
from starscan.security.users import UserStore
from starscan.settings.config import Settings
from starscan.settings.runtime import LiveSettings
from starscan.spark import pyspark_internals
from starscan.spark.handle import SparkHandle
from starscan.spark.schemas import SchemaResolver
from starscan.tables.catalog import Warehouse
from starscan.tables.consumers import ConsumerPositions
from starscan.tables.tablets import Sizing
from starscan.thrift.server import ThriftServer

log = logging.getLogger("starscan")


def be_app(spark, ops: Operations, auth: Authenticator):
    """The HTTP app of a BE node on its own: health (503 when its Spark is gone), metrics and
    the operations endpoints (scanners, the admin page: admins only)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    from starscan import __version__
    from starscan.planner.errors import handle_starscan_error
    from starscan.spark.session import spark_health

    app = FastAPI(title="starscan BE", version=__version__)
    app.add_exception_handler(StarscanError, handle_starscan_error)  # type: ignore[arg-type]
    app.state.auth = auth

    @app.get("/api/health", summary="Liveness; RECOVERING while a new SparkSession starts, 503 when Spark is gone for good")
    async def health() -> JSONResponse:
        status, message, code = await run_in_threadpool(spark_health, spark)
        return JSONResponse({"status": status, "msg": message}, status_code=code)

    install_routes(app, ops)
    return app


def _reveal(secret) -> str | None:
    return secret.get_secret_value() if secret is not None else None


class StarscanServer:
    """FE (uvicorn) + BE (thriftpy2) + reaper in one process. Ports 0 pick free ports."""

    def __init__(self, settings: Settings, spark, fe: bool = True, be: bool = True):
        self.live_settings = LiveSettings(settings)  # run-time changes (POST /api/update_config)
        if be:
            set_transparent_huge_pages(settings.be_transparent_huge_pages)
        self.spark = spark
        if settings.warehouse_is_local:
            settings.warehouse_path.mkdir(parents=True, exist_ok=True)
        settings.state_path.mkdir(parents=True, exist_ok=True)
        catalogs = []
        if settings.hive_databases:
            from starscan.tables.hive import HiveTables

            catalogs.append(HiveTables(pyspark_internals.SessionJvm(spark), settings.hive_databases, settings.storage_options,
                                       settings.listing_cache_ttl_s))
        self.warehouse = Warehouse.of(settings, extra_catalogs=catalogs)
        if self.warehouse.storage.scheme == "s3":
            # The same endpoint and keys for Hadoop's s3a client, should Spark have one (the sql
            # engine's path); set at run time, so they are in no Spark UI page or event log.
            def hadoop_keys(session: Any) -> None:
                hadoop = pyspark_internals.hadoop_configuration(session)
                for key, value in settings.storage_options.hadoop_conf().items():
                    hadoop.set(key, value)

            if isinstance(spark, SparkHandle):
                spark.when_ready(hadoop_keys)
            else:
                hadoop_keys(spark)
        self.signer = RotatingPlanSigner(settings.state_path, _reveal(settings.plan_secret),
                                         _reveal(settings.plan_secret_previous), settings.plan_secret_grace_s)
        self.users = UserStore(settings.effective_users_file)
        tls.check(settings)
        self.audit = AuditLog(settings.effective_audit_log)
        self.login_guard = LoginGuard(settings.login_max_failures, settings.login_lockout_s)
        self.contexts = ScanContextManager()
        self.fe_enabled, self.be_enabled = fe, be
        self._uvicorn: uvicorn.Server | None = None
        self._uvicorn_thread: threading.Thread | None = None
        self.thrift: ThriftServer | None = None
        self.relay: ThriftRelay | None = None  # the FE's Thrift relay, when thrift_relay_port is set
        self.reaper: ScanContextReaper | None = None
        self.http_port: int | None = None
        self.be_port: int | None = None
        self.query_port: int | None = None
        self.flight_sql_port: int | None = None
        self.be_flight_port: int | None = None
        self.mysql: MysqlPort | None = None  # when the FE runs
        self.flight_sql: FlightSqlServer | None = None   # the FE's Flight SQL front
        self.statements: StatementService | None = None  # what every FE door's statements answer
        self.be_flight: BeFlightServer | None = None     # the BE's Flight front
        self.workers: PythonWorkerKeeper | None = None  # with the warm-up
        self.warmed = threading.Event()  # the background warm-up is done (or skipped)
        self._warmup_thread: threading.Thread | None = None
        self._warmup_stop = threading.Event()  # a reader's scan came first, or the server stops
        self._stopping = False
        self.tablet_lists = TabletLists(settings.tablet_lists_max_bytes)
        resumable = settings.resumable_scans if settings.resumable_scans is not None else (be and not fe)
        self.service = ScanService(self.live_settings, spark, self.signer, self.contexts,
                                   Admission(self.live_settings, self.users, self.login_guard), self.audit,
                                   tablet_lists=self.tablet_lists, warehouse=self.warehouse,
                                   records=ScanRecords(settings.state_path / SCAN_RECORDS) if resumable else None)
        self.membership = BeMembership(settings.be_endpoints, settings.be_probe_interval_s, settings.be_probe_failures) \
            if fe and settings.be_endpoints else None
        schemas = SchemaResolver(spark)
        if fe:  # an FE's plans read schemas (a BE's listings need none, and need no Spark started)
            self.warehouse.listed.append(schemas.prefetch)
        self.planner = QueryPlanner(self.live_settings, self.warehouse, schemas, self.signer, self.tablet_lists,
                                    ConsumerPositions(settings.state_path), self.membership)
        self.ops = Operations(self.live_settings, self.service, self.contexts, self.users, self.audit, spark,
                              lambda: {"http_port": self.http_port, "be_port": self.be_port, "query_port": self.query_port},
                              self.planner.consumer_lags)
        self._subscribe_runtime_changes()

    @property
    def settings(self) -> Settings:
        """The settings as they are now (run-time changes replace them)."""
        return self.live_settings.current

    def _subscribe_runtime_changes(self) -> None:
        """What a run-time configuration change must reach besides the settings objects."""
        live = self.live_settings
        live.subscribe(["scan_context_gc_interval_s", "scan_context_gc_interval_min"],
                       lambda s, _: self.reaper.set_interval(s.gc_interval_s) if self.reaper is not None else None)
        live.subscribe(["total_queue_max_bytes"], lambda s, _: setattr(self.service.budget, "max_bytes", s.total_queue_max_bytes))
        live.subscribe(["reply_keepalive_s"], lambda s, _: setattr(self.thrift.keepalive, "interval_s", s.reply_keepalive_s)
                       if self.thrift is not None else None)
        live.subscribe(["log_level"], lambda s, _: logs.set_level(s.log_level))
        live.subscribe(["result_cache_max_bytes", "result_cache_max_entry_bytes", "result_cache_tables"],
                       lambda s, _: self.service.result_cache.configure(s.result_cache_max_bytes,
                                                                         s.result_cache_max_entry_bytes, s.result_cache_tables))
        live.subscribe(["page_cache_max_bytes"], lambda s, _: self.service.chunk_cache.configure(s.page_cache_bytes))
        live.subscribe(["tablet_target_bytes", "tablet_open_cost_bytes"],
                       lambda s, _: self.warehouse.set_sizing(Sizing.of(s)))
        live.subscribe(["login_max_failures", "login_lockout_s"],
                       lambda s, _: self.login_guard.configure(s.login_max_failures, s.login_lockout_s))

    def start(self) -> StarscanServer:
        self.users.warn_if_default_root()
        if self.be_enabled:
            self.thrift = ThriftServer(self.ops.be.wrap(ExternalServiceHandler(self.service)), self.settings.bind_host,
                                       self.settings.be_port, self.settings.thrift_client_timeout_s,
                                       max_read_bytes=self.settings.max_thrift_message_bytes,
                                       ssl_context=tls.server_context(self.settings) if self.settings.be_tls else None,
                                       reply_keepalive_s=self.settings.reply_keepalive_s,
                                       on_reply_begun=self.ops.metrics.replies_begun.inc,
                                       on_connection_closed=self.service.connection_closed)
            listening("be_port", self.settings.bind_host, self.settings.be_port, self.thrift.start)
            check_free("push_port", self.settings.bind_host, self.settings.push_port)  # bound at the first scan
            self.be_port = self.thrift.port
            if self.settings.be_port == 0 and not self.settings.be_endpoints:
                # Tests bind port 0: advertise the port actually bound.
                self.live_settings.bound(be_port=self.be_port)
            self.reaper = ScanContextReaper(self.contexts, self.settings.gc_interval_s, also=self.service.tend_records)
            self.reaper.start()
            self._serve_be_flight()
            self._warm_up_in_background()
        tokens = None
        if self.settings.jwt_key is not None:
            tokens = TokenVerifier(self.settings.jwt_key.get_secret_value(), self.settings.jwt_algorithms,
                                   self.settings.jwt_issuer, self.settings.jwt_audience)
        auth = Authenticator(self.users, self.login_guard, tokens)
        if self.fe_enabled:
            if self.membership is not None:
                self.membership.start()
            self._relay_thrift()
            statements = self.statements = self._statement_service()
            app = create_app(statements, auth, self.live_settings)
            install_routes(app, self.ops)
            self.http_port = listening("http_port", self.settings.bind_host, self.settings.http_port,
                                       lambda: self._serve_http(app, self.settings.http_port, "FE"))
            mysql = self.mysql = MysqlPort(self.settings, statements, self.users, self.login_guard,
                                           on_refused=self.ops.metrics.auth_failures.labels("mysql").inc)
            listening("query_port", self.settings.bind_host, self.settings.query_port, mysql.start)
            self.query_port = mysql.port
            self._serve_flight_sql(auth, statements)
        elif self.be_enabled:
            # A BE node on its own answers health and metrics (and the operations pages) on
            # be_http_port, as a StarRocks BE's web server does.
            self.http_port = listening("be_http_port", self.settings.bind_host, self.settings.be_http_port,
                                       lambda: self._serve_http(be_app(self.spark, self.ops, auth),
                                                                self.settings.be_http_port, "BE"))
        # What is loaded by now (Spark's and the libraries' objects, hundreds of thousands)
        # lives as long as the process: keep it out of the collector's full passes, which
        # otherwise walk all of it (pauses that made the FE's p99 under load twice its p50).
        gc.collect()
        gc.freeze()
        return self

    def _relay_thrift(self) -> None:
        """The FE's Thrift relay (thrift_relay_port): a port per BE, named by the plans'
        routings instead of the BEs."""
        settings = self.settings
        ports = settings.relay_ports
        if not ports:
            return
        backends = settings.routings
        membership = self.membership
        relay = self.relay = ThriftRelay(
            backends, membership.live if membership is not None else lambda: backends, settings.bind_host, ports,
            settings.thrift_relay_timeout_s, settings.max_thrift_message_bytes, settings.reply_keepalive_s,
            server_tls=tls.server_context(settings) if settings.be_tls else None,
            client_tls=tls.client_context(settings) if settings.be_tls else None)
        relay.start(lambda port, start: listening("thrift_relay_port", settings.bind_host, port, start))
        self.planner.relay_routes = {be: f"{settings.advertise_host}:{port}"
                                     for be, port in zip(backends, relay.ports, strict=True)}

    def _serve_be_flight(self) -> None:
        settings = self.settings
        if settings.be_flight_port < 0:
            return
        scheme = "grpc+tls" if settings.flight_tls else "grpc"
        self.be_flight = listening("be_flight_port", settings.bind_host, settings.be_flight_port, lambda: BeFlightServer(
            f"{scheme}://{settings.bind_host}:{settings.be_flight_port}", self.service, self.signer, tls.flight_tls(settings)))
        self.be_flight_port = self.be_flight.port
        if settings.be_flight_port == 0 and not settings.be_flight_endpoints:
            self.live_settings.bound(be_flight_port=self.be_flight_port)  # tests bind port 0: advertise what was bound
        log.info("BE flight listening on %s:%d", settings.bind_host, self.be_flight_port)

    def _statement_service(self) -> StatementService:
        """The FE's statement service, with its reader of the BEs' rows (the node's own BE
        read in this process when it is one)."""
        flight_tls = tls.flight_tls(self.settings)
        reads = ScanReads(self.live_settings, self.signer, self.membership,
                          flight_tls.client_options() if flight_tls is not None else {})
        if self.be_flight is not None:  # this node is its FE's BE too: its tablets read here
            be_flight = self.be_flight
            reads.local_be = lambda: f"{self.settings.advertise_host}:{self.be_port}" if self.be_port else None
            reads.local_batches = lambda ticket, client: be_flight.batches(ticket, client)
        return StatementService(self.planner, self.users, self.spark, self.live_settings, self.audit, reads)

    def _serve_flight_sql(self, auth: Authenticator, statements: StatementService) -> None:
        settings = self.settings
        if settings.flight_sql_port < 0:
            return
        scheme = "grpc+tls" if settings.flight_tls else "grpc"
        server = self.flight_sql = listening("flight_sql_port", settings.bind_host, settings.flight_sql_port,
                                             lambda: FlightSqlServer(
            f"{scheme}://{settings.bind_host}:{settings.flight_sql_port}", "", statements, auth, self.signer,
            self.live_settings, tls.flight_tls(settings)))
        self.flight_sql_port = server.port
        server.advertised = f"{scheme}://{settings.advertise_host}:{server.port}"
        log.info("FE flight sql listening on %s:%d", settings.bind_host, server.port)

    def _warm_up_in_background(self) -> None:
        """Warm the JVM up and start Spark's Python workers after the BE listens, on a thread
        of their own, so that a BE answers from its first seconds (a restarted one is back at
        once). The first reader's scan stops the warm-up (its running scan cancelled): the
        reader's scan warms the JVM as well, and does not wait for Spark's slots behind it.
        ``warmed`` is set when it is done, stopped or skipped."""
        if self.settings.warmup_rows <= 0:
            self.warmed.set()
            return
        self.service.open_listeners.append(self._warmup_stop.set)
        if self.fe_enabled:  # an FE in this process: its plans need the cores more than the warm-up
            self.planner.plan_listeners.append(self._warmup_stop.set)
        self._warmup_thread = threading.Thread(target=self._warm_up, name="starscan-warmup", daemon=True)
        self._warmup_thread.start()

    def _warm_up(self) -> None:
        from starscan.provider.warmup import WarmUpStopped, warm_up

        started = time.monotonic()
        try:
            try:
                seconds = warm_up(self.spark, self.settings.warehouse_path if self.settings.warehouse_is_local
                                  else self.settings.state_path, self.settings.warmup_rows,
                                  self.service.push_listener(), self._warmup_stop)
            except WarmUpStopped:
                if not self._stopping:
                    log.info("BE warm-up stopped after %.1f s: a reader's plan or scan came first; its scan warms the JVM instead",
                             time.monotonic() - started)
            except Exception as exc:  # noqa: BLE001 - a cold JVM is slower, not broken
                if not self._stopping:
                    log.warning("JVM warm-up skipped: %s: %s (the first scans will be slower; warmup_rows=0 turns "
                                "the warm-up off)", type(exc).__name__,
                                str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "")
            else:
                log.info("JVM warmed up in %.1f s (%d rows written and scanned; warmup_rows=0 turns this off)",
                         seconds, self.settings.warmup_rows)
            if self._stopping:
                return
            workers = self.workers = PythonWorkerKeeper(self.spark)
            if not self._warmup_stop.is_set():  # a reader's scans start their own workers meanwhile
                try:
                    seconds = workers.fill()
                    log.info("%d Spark Python workers started in %.1f s", workers.slots(), seconds)
                except Exception as exc:  # noqa: BLE001 - started on demand then
                    log.warning("Spark Python workers not started ahead: %s", exc)
            if not self._stopping:
                workers.start()
                log.info("BE warm-up done, %.1f s after the BE began listening", time.monotonic() - started)
        finally:
            self.warmed.set()

    def _serve_http(self, app, port: int, role: str) -> int:
        """Start uvicorn with ``app`` on ``port`` (0: a free one); returns the port bound."""
        uvicorn_internals.require()  # the bounded protocol's hooks as they were tested, or no HTTP port
        # proto=IPPROTO_TCP, not the default 0: asyncio turns Nagle's algorithm off
        # (TCP_NODELAY) only on sockets whose proto says TCP, and uvicorn writes a reply's
        # headers and body separately; with Nagle on, every keep-alive request after the
        # first waited ~40 ms for the client's delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.settings.bind_host, port))
        bound = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                http=BoundedHttpToolsProtocol, loop="uvloop", **tls.uvicorn_options(self.settings))
        self._uvicorn = uvicorn.Server(config)
        self._uvicorn_thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [sock]},
                                                name=f"{role.lower()}-http", daemon=True)
        self._uvicorn_thread.start()
        deadline = time.monotonic() + 30
        while not self._uvicorn.started and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self._uvicorn.started:
            self.stop()
            raise StarscanError(f"the {role} HTTP port {self.settings.bind_host}:{bound} did not start within 30 s")
        log.info("%s http%s listening on %s:%d", role, "s" if self.settings.http_tls else "", self.settings.bind_host,
                 bound)
        return bound

    def stop(self) -> None:
        self._stopping = True
        self._warmup_stop.set()
        if self._warmup_thread is not None:
            self._warmup_thread.join(timeout=30)
        if self.membership is not None:
            self.membership.stop()
        if self.mysql is not None:
            self.mysql.stop()
        for front in (self.flight_sql, self.be_flight):
            if front is not None:
                front.shutdown()
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            if self._uvicorn_thread is not None:
                self._uvicorn_thread.join(timeout=10)
        if self.relay is not None:
            self.relay.stop()
        if self.thrift is not None:
            self.thrift.stop()
        if self.reaper is not None:
            self.reaper.stop()
        if self.workers is not None:
            self.workers.stop()
        # Readers inside get_next get this status now; their next call gets NOT_FOUND.
        self.contexts.close_all(ServerShuttingDown("the server is shutting down: open a new scanner when it is back"))
        self.service.stop()
        self.ops.stop()
        self.audit.close()

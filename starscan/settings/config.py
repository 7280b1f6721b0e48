"""One settings object for the whole server.

Precedence (lowest first): defaults < ``starscan.conf`` (StarRocks ``key = value`` style,
``#`` comments, ``spark.*`` keys pass through to Spark) < ``STARSCAN_*`` environment
variables < CLI flags. Unknown keys and bad values are rejected at start with the key
named. StarRocks names and defaults are kept where they exist.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from starscan.core.errors import ConfigError
from starscan.storage.locations import StorageOptions, check_location, is_uri, local_path

ENV_PREFIX = "STARSCAN_"
# Marks a field that takes effect on a running server (POST /api/update_config); every other
# key needs a restart. starscan.settings.runtime reads the marks.
RUNTIME: dict[str, Any] = {"runtime": True}


#: page_cache_max_bytes' default: this share of the machine's memory (StarRocks' 20 %).
PAGE_CACHE_SHARE = 5


def machine_memory_bytes() -> int:
    """The memory this process's machine has, or its cgroup's limit where that is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
        break
    return int(total)


def user_state_dir(location: str) -> Path:
    """starscan's own files for a warehouse in object storage, in this user's state directory
    (``$XDG_STATE_HOME``, else ``~/.local/state``): one folder per warehouse, named after its
    location, so that a plan secret or users file is never written into the working
    directory (where ``git add -A`` would commit it) and two warehouses never share one."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", location.split("://", 1)[-1]).strip("._")[:100] or "warehouse"
    return base / "starscan" / f"{name}-{hashlib.sha256(location.encode('utf-8')).hexdigest()[:8]}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, enable_decoding=False,
                                      frozen=True)  # changes at run time make a new object (runtime_config)

    # ---- ports and addresses (StarRocks names) ----
    http_port: int = Field(8030, ge=0, le=65535, description="FE HTTP port (_query_plan, _schema)")
    be_port: int = Field(9060, ge=0, le=65535, description="BE Thrift port (open_scanner/get_next/close_scanner)")
    be_http_port: int = Field(8040, ge=0, le=65535, description="HTTP port of a BE node on its own (serve --role be): health and metrics")
    query_port: int = Field(9030, ge=0, le=65535, description="FE MySQL protocol port (metadata, SELECT queries)")
    query_max_rows: int | None = Field(None, ge=1, description="rows a statement the FE streams (the MySQL port, Flight SQL's FE endpoints) may return; past it the statement fails with an error naming this setting, never a shorter answer (default: no limit)", json_schema_extra=RUNTIME)
    flight_sql_port: int = Field(9408, ge=-1, le=65535, description="FE Arrow Flight SQL port (StarRocks' arrow_flight_port; -1: off)")
    be_flight_port: int = Field(9419, ge=-1, le=65535, description="BE Arrow Flight port serving the FE's tickets (-1: off)")
    be_flight_endpoints: list[str] = Field(
        default_factory=list,
        description="every BE's Flight address as host:port, in the order of be_endpoints (default: advertise_host:be_flight_port)")
    flight_proxy: bool = Field(True, description="the FE relays the BEs' Flight streams (clients need reach only the FE), as StarRocks' arrow_flight_proxy",
                               json_schema_extra=RUNTIME)
    # One: a BE's scanner reads its tablets in parallel already (its readers, its own read
    # slots); more endpoints are more scanners on the same cores (lineitem SF1, one BE, 2
    # cores: ADBC read 3.8 M rows/s from one endpoint, 2.5-2.9 M from two).
    flight_endpoints_per_be: int = Field(1, ge=1, le=64, description="Flight SQL endpoints a BE's tablets of a scan are cut into", json_schema_extra=RUNTIME)
    bind_host: str = Field("127.0.0.1", description="address both ports listen on (0.0.0.0 for all)")
    advertise_host: str = Field("127.0.0.1", description="host put in `routings`; must be an IP or name clients reach")
    be_endpoints: list[str] = Field(
        default_factory=list,
        description="every BE as host:port for `routings` (default: advertise_host:be_port); the FE probes them and routes only to those that answer",
    )
    thrift_relay_port: int = Field(-1, ge=-1, le=65535, description="the FE relays the BEs' Thrift scans (readers need reach only the FE; a scanner whose BE is lost is resumed on another BE at the reader's offset): the FE listens on this port for the first of be_endpoints, the next port for the second, and so on, and its plans' routings name these ports at advertise_host (0: free ports; -1: off; docs/scaling.md)")
    thrift_relay_timeout_s: float = Field(10.0, gt=0, le=3600, description="seconds the FE's Thrift relay waits for the next bytes from a BE before it takes the BE as lost (BEs keep slow replies alive every reply_keepalive_s)")
    be_probe_interval_s: float = Field(1.0, gt=0, le=60, description="seconds between an FE's probes of each BE in be_endpoints (also the probe's timeout)")
    be_probe_failures: int = Field(2, ge=1, le=100, description="failed probes in a row that take a BE out of the routings (its next answered probe puts it back)")

    # ---- scan contexts (StarRocks names and defaults) ----
    keep_alive_min: int = Field(5, ge=1, le=32767, description="idle minutes before a context is reaped, when the client sends none", json_schema_extra=RUNTIME)
    keep_alive_s: float | None = Field(None, gt=0, description="keep-alive in seconds when the client sends none (overrides the minutes; for tests and soaks)")
    scan_context_gc_interval_min: int = Field(5, ge=1, description="minutes between reaper ticks", json_schema_extra=RUNTIME)
    scan_context_gc_interval_s: float | None = Field(None, gt=0, description="reaper tick in seconds (overrides the minutes; for tests)", json_schema_extra=RUNTIME)
    query_timeout_s: int = Field(3600, ge=1, description="scan timeout when the client sends none", json_schema_extra=RUNTIME)
    queue_max_bytes: int = Field(16 << 20, ge=1 << 16, description="upper bound of one scanner's result queue (mem_limit lowers it)", json_schema_extra=RUNTIME)
    result_cache_max_bytes: int = Field(0, ge=0, description="bytes of get_next replies kept for repeated scans of the same plan content (0: no result cache)", json_schema_extra=RUNTIME)
    result_cache_max_entry_bytes: int = Field(256 << 20, ge=1, description="a scan whose replies pass this many bytes is not cached", json_schema_extra=RUNTIME)
    result_cache_tables: list[str] = Field(default_factory=lambda: ["*.*"], description="tables whose scans may be cached: db.table, db.* or *.*, comma-separated", json_schema_extra=RUNTIME)
    page_cache_max_bytes: int | None = Field(None, ge=0, description="bytes of decoded Parquet column chunks the BE keeps in memory for later scans of the same files (StarRocks' Page Cache: a warm scan skips the decode); 0: off; default: 20 % of the machine's memory, as StarRocks' storage_page_cache_limit", json_schema_extra=RUNTIME)
    be_transparent_huge_pages: bool = Field(False, description="let the kernel back the BE process's memory with transparent huge pages (off: turned off for the BE's process at start, so its page cache's first fill does not wait on the kernel compacting memory; docs/operations.md)")
    reply_fill_wait_s: float = Field(0.2, ge=0, le=60, description="how long a get_next reply that has rows but fewer than batch_size waits for the rest while the scan produces them (0: send what is there)", json_schema_extra=RUNTIME)
    scan_engine: str = Field("auto", pattern="^(auto|arrow|sql)$", description="how scans read: arrow (pyarrow in Spark's Python tasks, the JVM out of the data path), sql (Spark SQL), or auto (arrow for every plan it reads exactly as Spark SQL would, sql for the rest)", json_schema_extra=RUNTIME)
    sql_engine_reader: str = Field("auto", pattern="^(auto|starscan)$", description="which file reader the sql engine's Spark SQL reads its input with: auto (Spark's own Parquet and ORC readers for plain files in a local or Hadoop-reachable folder, starscan's reader for the rest: row-level deletes, mapped columns, object stores) or starscan (starscan's reader for every file; docs/architecture.md says what each costs)", json_schema_extra=RUNTIME)
    scan_local_reads: bool = Field(True, description="the BE reads an arrow-engine scan's splits itself, with pyarrow in its own process, from its open until the scan's first Spark task connects: a reader's first rows do not wait for a Spark slot (a burst of scanners on few slots, a BE still warming up)")
    scan_local_read_slots: int | None = Field(None, ge=0, le=256, description="readers of arrow-engine scans the BE runs in its own process at once, for all scans, before their scans take Spark slots (scans whose files average 1 MiB or more: smaller files are read faster by Spark's worker processes): a reader there costs no Spark job, task, Python worker or push connection (about 12 % less CPU per row on TPC-H lineitem); 0: every split a Spark task's (but for scan_local_reads); default: the BE machine's cores")
    resumable_scans: bool | None = Field(None, description="every scanner is recorded in state_dir (shared by the deployment's nodes) and reads its rows in a fixed order, so any BE that shares state_dir resumes it at the reader's offset when the BE that opened it is lost or restarted (docs/scaling.md); default: on for --role be, off for --role all")
    scan_tasks_per_scanner: int = Field(2, ge=1, le=64, description="readers one scanner keeps running at once: in the BE's own read slots (scan_local_read_slots) while one is free, else Spark tasks (an arrow-engine reader reads split after split; a sql-engine task one split); more is faster for one reader and leaves fewer slots to the others")
    scan_yield_after_s: float = Field(2.0, gt=0, description="a scanner whose reader has not read for this long gives its Spark task slots back; its splits go on, from where they stopped, when the reader reads again (new scanners take a change)", json_schema_extra=RUNTIME)
    push_port: int = Field(0, ge=0, le=65535, description="port on bind_host where Spark tasks push scanned rows into the BE (0: a free port); tasks connect to advertise_host")
    reply_keepalive_s: float = Field(0.25, ge=0, le=10, description="a BE reply not ready after this many seconds is begun and kept alive with a field the reader skips every this many seconds, until it is ready, so a reader's socket read timeout (the StarRocks Flink connector's 1 s) does not fire while Spark starts or a filter finds its first rows (docs/protocol.md); 0: replies are sent only when ready", json_schema_extra=RUNTIME)
    abandoned_scan_keep_alive_s: float = Field(60, ge=0, description="a scanner whose reader's connection ended before its eos and close_scanner (a reader that timed out or crashed closes nothing) goes after this many idle seconds instead of its keep_alive_min, unless a call names it again (a reader that reconnects); 0: keep_alive_min", json_schema_extra=RUNTIME)
    thrift_client_timeout_s: float | None = Field(None, gt=0, description="idle seconds before the BE drops a connection (none: never)")
    shutdown_grace_s: float = Field(30, gt=0, le=3600, description="after SIGTERM/SIGINT: longest wait for in-flight scans to be cancelled and Spark to stop before the process exits regardless")
    warmup_rows: int = Field(1_000_000, ge=0, le=100_000_000, description="rows of a throw-away table the BE writes and scans once at start, so the first reader does not pay the JVM's class loading and JIT (0: off)")

    # ---- warehouse, tables, plans ----
    warehouse: str = Field("starscan-warehouse", description="where the tables are: a local folder or a URI (s3://bucket/prefix, gs://bucket/prefix, hdfs://host/path), in Spark's layout <db>.db/<table>")
    state_dir: Path | None = Field(None, description="folder for starscan's own files (plan secret, users, audit log): default <warehouse>/_starscan for a local warehouse; for one in object storage a folder of this user's state directory ($XDG_STATE_HOME/starscan/<bucket and prefix>, ~/.local/state by default), never the working directory; nodes of one deployment must share it or set plan_secret and users_file (docs/scaling.md)")
    hive_metastore: str = Field("", description="a Hive metastore for Spark's catalog: embedded (Derby under state_dir) or thrift://host:9083; empty: none")
    hive_databases: list[str] = Field(default_factory=list, description="databases served from the Hive metastore (its tables' locations, partitions and columns), comma-separated")
    iceberg_catalog: dict[str, str] = Field(default_factory=dict, description="pyiceberg catalog properties, k=v; k2=v2 (name=lake; type=sql; uri=sqlite:////data/catalog.db; warehouse=file:///data/ice, or type=rest; uri=...; name defaults to default): its namespaces are served as databases beside the warehouse's folders")
    iceberg_namespaces: list[str] = Field(default_factory=list, description="the Iceberg namespaces served, comma-separated (default: all of the catalog's)")
    s3_endpoint: str | None = Field(None, description="S3 endpoint URL for S3-compatible stores (http://host:9000); unset: AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL (as the AWS SDKs read them), else AWS itself")
    s3_region: str | None = Field(None, description="S3 region (unset: AWS_REGION / AWS_DEFAULT_REGION, else found from the bucket)")
    s3_access_key_id: SecretStr | None = Field(None, description="S3 access key id (unset: the AWS environment, profile or instance credentials; never logged or shown)")
    s3_secret_access_key: SecretStr | None = Field(None, description="S3 secret access key (never logged or shown)")
    s3_session_token: SecretStr | None = Field(None, description="S3 session token of temporary credentials (never logged or shown)")
    s3_path_style: bool | None = Field(None, description="path-style S3 requests (bucket in the path, as MinIO wants); unset: on when s3_endpoint is set")
    tablet_target_bytes: int = Field(128 << 20, ge=1 << 10, description="target bytes per tablet: small files of a partition are packed into one tablet up to this size, a larger file is cut into tablets of whole row groups of about this size; also the size of the files `starscan load` writes", json_schema_extra=RUNTIME)
    tablet_open_cost_bytes: int = Field(128 << 10, ge=0, description="what opening one more file costs, in bytes of reading, when small files are packed into tablets and into the arrow engine's splits (Spark's openCostInBytes)", json_schema_extra=RUNTIME)
    version_history_max: int = Field(1000, ge=1, description="versions of each folder or Hive metastore table whose changes are kept for incremental reads (_query_plan with since_version); older ones are unknown")
    listing_cache_ttl_s: float = Field(5.0, ge=0, description="seconds a table's file listing is kept (a local folder's also ends when the folder changes); one that ran out less than this ago still answers while the table is listed again")
    plan_inline_tablets_max_bytes: int = Field(16 << 10, ge=0, description="a plan whose tablet list is larger than this (bytes, packed) carries its digest instead and the server keeps the list (starscan.plans.tablet_lists): plans of tables of thousands of files stay small", json_schema_extra=RUNTIME)
    tablet_lists_max_bytes: int = Field(64 << 20, ge=1 << 20, description="memory for the tablet lists of large tables' plans; a list dropped from it is rebuilt from the table's files while they are unchanged")
    plan_ttl_s: int = Field(86400, ge=1, description="seconds an issued plan stays valid")
    plan_secret: SecretStr | None = Field(None, description="HMAC secret for plans (generated and kept in the warehouse if unset)")
    users_file: Path | None = Field(None, description="users and grants (default: <warehouse>/_starscan/users.json)")
    time_zone: str = Field("UTC", description="time zone DATETIME values are rendered in")
    demo_scale: float = Field(0.01, ge=0, le=100, description="TPC-H scale factor of demo.lineitem created in an empty warehouse (0: no demo)")

    # ---- security (docs/security.md) ----
    plan_secret_previous: SecretStr | None = Field(None, description="previous plan secret, still accepted (rolling rotation of a configured plan_secret)")
    plan_secret_grace_s: int = Field(86400, ge=0, description="seconds the previous plan secret is still accepted after `starscan secret rotate`")
    jwt_key: SecretStr | None = Field(None, description="bearer tokens: HMAC secret, or path to a PEM public key (RS*/ES*/EdDSA); unset: tokens refused")
    jwt_issuer: str | None = Field(None, description="bearer tokens: required `iss` claim")
    jwt_audience: str | None = Field(None, description="bearer tokens: required `aud` claim (unset: not checked)")
    jwt_algorithms: list[str] = Field(default_factory=lambda: ["HS256"], description="bearer tokens: accepted algorithms")
    login_max_failures: int = Field(5, ge=1, description="failed logins per user and client address before a lockout", json_schema_extra=RUNTIME)
    login_lockout_s: float = Field(60.0, gt=0, description="window and lockout time for failed logins", json_schema_extra=RUNTIME)
    tls_cert_file: Path | None = Field(None, description="PEM certificate (chain) for TLS on the enabled ports")
    tls_key_file: Path | None = Field(None, description="PEM private key for tls_cert_file")
    tls_ca_file: Path | None = Field(None, description="CA bundle that client certificates must chain to (enables tls_client_auth)")
    tls_client_auth: str = Field("none", pattern="^(none|optional|required)$", description="client certificates: none, optional, required")
    http_tls: bool = Field(False, description="serve the HTTP port over TLS (https)")
    be_tls: bool = Field(False, description="serve the Thrift port over TLS")
    flight_tls: bool = Field(False, description="serve the Flight SQL and BE Flight ports over TLS (grpc+tls)")
    audit_log: Path | None = Field(None, description="audit log file (default: <warehouse>/_starscan/audit.log; '-' for stderr)")

    # ---- limits (docs/security.md "Limits") ----
    plan_concurrency: int = Field(8, ge=1, le=256, description="_query_plan requests planned at once; the others wait their turn in arrival order")
    plan_rate_per_user: float = Field(50.0, ge=0, description="_query_plan calls per second per user, sustained (0: no cap)", json_schema_extra=RUNTIME)
    plan_rate_burst: int = Field(100, ge=1, description="_query_plan calls a user may make at once before the rate applies", json_schema_extra=RUNTIME)
    max_scanners: int = Field(256, ge=1, description="open scan contexts in total", json_schema_extra=RUNTIME)
    max_scanners_per_user: int = Field(64, ge=1, description="open scan contexts per user", json_schema_extra=RUNTIME)
    total_queue_max_bytes: int = Field(1 << 30, ge=1 << 16, description="all result queues together (each may still hold one batch)", json_schema_extra=RUNTIME)
    query_timeout_max_s: int = Field(86400, ge=1, description="largest query_timeout a client may ask for (larger values are lowered to it)", json_schema_extra=RUNTIME)
    max_tablets_per_scanner: int = Field(10000, ge=1, description="tablet_ids in one open_scanner", json_schema_extra=RUNTIME)
    max_tablets_per_plan: int = Field(100000, ge=1, description="tablets one _query_plan may return", json_schema_extra=RUNTIME)
    max_sql_length: int = Field(1 << 20, ge=16, description="characters of `sql` in _query_plan", json_schema_extra=RUNTIME)
    max_request_body_bytes: int = Field(4 << 20, ge=1024, description="bytes of an HTTP request body", json_schema_extra=RUNTIME)
    max_thrift_message_bytes: int = Field(64 << 20, ge=1 << 16, description="largest field a Thrift request may declare (bytes)")

    # ---- operations (docs/operations.md) ----
    enable_profile_for_external_plan: bool = Field(False, description="keep a profile per scan (GET /api/scans/{context_id}/profile; summary in the audit line)", json_schema_extra=RUNTIME)
    profile_retention_s: float = Field(3600.0, ge=0, description="seconds a finished scan's profile stays available")
    log_format: str = Field("human", pattern="^(human|json)$", description="application log lines: human or json")
    log_level: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$", description="application log level", json_schema_extra=RUNTIME)

    # ---- Spark ----
    spark_master: str = Field("local[16]", description="Spark master URL: local[N], spark://, k8s://, yarn. Locally, N is the number of Spark task slots, not cores: every open scanner keeps scan_tasks_per_scanner tasks running (the OS shares the cores among them), so N should be that many times the scanners read at once. local[N] runs as local[N,F]: a failed task is run again up to spark.task.maxFailures (4) times, as on a cluster")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="extra Spark configuration")
    spark_restart_attempts: int = Field(5, ge=0, le=100, description="attempts to start a new SparkSession when Spark's JVM dies under a running node (with a backoff of up to 20 s between them); 0: none, health answers 503 and the node must be restarted")

    @field_validator("warehouse", mode="before")
    @classmethod
    def _warehouse_text(cls, value: Any) -> Any:
        value = os.fspath(value) if isinstance(value, os.PathLike) else value
        if isinstance(value, str):
            check_location(value)
        return value

    @field_validator("be_endpoints", "be_flight_endpoints")
    @classmethod
    def _check_endpoints(cls, value: list[str]) -> list[str]:
        for item in value:
            host, sep, port = item.rpartition(":")
            if not sep or not host or ":" in host or not port.isdigit():
                raise ValueError(f"{item!r} is not host:port (IPv6 literals are not understood by clients)")
        return value

    @field_validator("time_zone")
    @classmethod
    def _check_tz(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except ZoneInfoNotFoundError:  # a KeyError: pydantic would not report it as a bad value
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @field_validator("thrift_relay_port")
    @classmethod
    def _relay_ports_fit(cls, value: int, info: ValidationInfo) -> int:
        bes = len(info.data.get("be_endpoints") or []) or 1  # one port per BE (relay_ports)
        if value > 0 and value + bes - 1 > 65535:
            raise ValueError(f"{value} leaves no port for each of the {bes} BEs (it takes {value}-{value + bes - 1}): "
                             "set a lower thrift_relay_port")
        return value

    @field_validator("result_cache_tables")
    @classmethod
    def _table_patterns(cls, value: list[str]) -> list[str]:
        return table_patterns(value)

    @field_validator("jwt_algorithms", "result_cache_tables", "iceberg_namespaces", "hive_databases", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("be_endpoints", "be_flight_endpoints", "spark_conf", "iceberg_catalog", mode="before")
    @classmethod
    def _split_text(cls, value: Any, info: ValidationInfo) -> Any:
        # Conf files and env variables give text: "a:1, b:2" / "k=v; k2=v2".
        if isinstance(value, str):
            if info.field_name in ("be_endpoints", "be_flight_endpoints"):
                return [part.strip() for part in value.split(",") if part.strip()]
            return _parse_pairs(value)
        return value

    # ---- derived ----
    @property
    def gc_interval_s(self) -> float:
        if self.scan_context_gc_interval_s is not None:
            return self.scan_context_gc_interval_s
        return self.scan_context_gc_interval_min * 60.0

    @property
    def page_cache_bytes(self) -> int:
        """``page_cache_max_bytes``, its default resolved: a fifth of the machine's memory."""
        if self.page_cache_max_bytes is not None:
            return self.page_cache_max_bytes
        return machine_memory_bytes() // PAGE_CACHE_SHARE

    @property
    def routings(self) -> list[str]:
        return list(self.be_endpoints) or [f"{self.advertise_host}:{self.be_port}"]

    @property
    def relay_ports(self) -> list[int]:
        """The FE's Thrift relay port for each of ``routings`` (0s: free ones; [] when off)."""
        if self.thrift_relay_port < 0:
            return []
        return [self.thrift_relay_port + i if self.thrift_relay_port else 0 for i in range(len(self.routings))]

    @property
    def flight_routes(self) -> dict[str, str]:
        """Each BE's Thrift address (a routing of the FE's plans) -> its Flight address."""
        flights = list(self.be_flight_endpoints) or [f"{self.advertise_host}:{self.be_flight_port}"]
        return dict(zip(self.routings, flights))

    @property
    def warehouse_location(self) -> str:
        """The warehouse as text (a copy made with ``model_copy(update=...)`` may hold a Path)."""
        return os.fspath(self.warehouse)

    @property
    def warehouse_is_local(self) -> bool:
        return not is_uri(self.warehouse_location) or self.warehouse_location.startswith("file://")

    @property
    def warehouse_path(self) -> Path:
        """The warehouse folder of a local warehouse (ConfigError for object storage)."""
        if not self.warehouse_is_local:
            raise ConfigError(f"warehouse {self.warehouse_location} is not a local folder")
        return Path(local_path(self.warehouse_location))

    @property
    def state_path(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        if self.warehouse_is_local:
            return self.warehouse_path / "_starscan"
        return user_state_dir(self.warehouse_location)

    @property
    def storage_options(self) -> StorageOptions:
        return StorageOptions(
            endpoint=self.s3_endpoint, region=self.s3_region,
            access_key_id=self.s3_access_key_id.get_secret_value() if self.s3_access_key_id else None,
            secret_access_key=self.s3_secret_access_key.get_secret_value() if self.s3_secret_access_key else None,
            session_token=self.s3_session_token.get_secret_value() if self.s3_session_token else None,
            path_style=self.s3_path_style)

    @property
    def effective_audit_log(self) -> Path | None:
        """None means stderr."""
        if self.audit_log is not None and str(self.audit_log) == "-":
            return None
        return self.audit_log or self.state_path / "audit.log"

    @property
    def effective_users_file(self) -> Path:
        return self.users_file or self.state_path / "users.json"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _SparkConfAsDict(env_settings), _ConfFileSource(settings_cls))


def _parse_pairs(text: str) -> dict[str, str]:
    """``"k=v; k2=v2"`` -> ``{"k": "v", "k2": "v2"}``."""
    out = {}
    for pair in (x.strip() for x in text.split(";")):
        if not pair:
            continue
        key, eq, val = pair.partition("=")
        if not eq:
            raise ValueError(f"{pair!r} is not key=value")
        out[key.strip()] = val.strip()
    return out


def table_patterns(value: list[str] | str) -> list[str]:
    """``db.table``, ``db.*`` or ``*.*`` patterns, from a list or comma-separated text."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    for pattern in value:
        db, dot, table = pattern.partition(".")
        if not dot or not db or not table:
            raise ValueError(f"{pattern!r} is not db.table, db.* or *.*")
    return list(value)


class _SparkConfAsDict(PydanticBaseSettingsSource):
    """The environment gives ``spark_conf`` as text; as a dict it merges key by key with the
    other layers (file < env < overrides) instead of replacing some of them. Text that does
    not parse is left for the validator to report."""

    def __init__(self, source: PydanticBaseSettingsSource):
        super().__init__(source.settings_cls)
        self._source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - not used
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = self._source()
        text = values.get("spark_conf")
        if isinstance(text, str):
            try:
                values = {**values, "spark_conf": _parse_pairs(text)}
            except ValueError:
                pass
        return values


class _ConfFileSource(PydanticBaseSettingsSource):
    """Reads the file named by the ``_conf_file`` context variable (set by ``load_settings``)."""

    path: Path | None = None

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - not used
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if _ConfFileSource.path is None:
            return {}
        return parse_conf_file(_ConfFileSource.path)


def parse_conf_file(path: Path) -> dict[str, Any]:
    """Parse a StarRocks-style ``key = value`` file. ``spark.*`` keys go to ``spark_conf``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    values: dict[str, Any] = {}
    spark_conf: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ConfigError(f"{path}:{lineno}: expected `key = value`, got {raw!r}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if key.startswith("spark."):
            spark_conf[key] = value
            continue
        if key not in Settings.model_fields:
            raise ConfigError(f"{path}:{lineno}: unknown configuration key {key!r}")
        values[key] = value
    if "spark_conf" in values:
        try:
            values["spark_conf"] = _parse_pairs(values["spark_conf"])
        except ValueError as exc:
            raise ConfigError(f"{path}: bad value for 'spark_conf': {exc}") from None
    if spark_conf:
        values["spark_conf"] = {**values.get("spark_conf", {}), **spark_conf}
    return values


def _check_env_keys(environ: dict[str, str]) -> None:
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    for key in environ:
        if key.startswith(ENV_PREFIX) and key not in known and key != ENV_PREFIX + "CONF":
            raise ConfigError(f"unknown configuration key {key[len(ENV_PREFIX):].lower()!r} (environment variable {key})")


def load_settings(conf_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build the settings: defaults < conf file < STARSCAN_* env < ``overrides`` (CLI flags).

    ``conf_file`` defaults to ``$STARSCAN_CONF``, then ``./starscan.conf`` if it exists.
    """
    overrides = {k: v for k, v in overrides.items() if v is not None}
    _check_env_keys(dict(os.environ))
    if conf_file is None:
        conf_file = os.environ.get(ENV_PREFIX + "CONF")
        if conf_file is None and Path("starscan.conf").is_file():
            conf_file = "starscan.conf"
    if conf_file is not None and not Path(conf_file).is_file():
        raise ConfigError(f"config file {conf_file} does not exist")
    _ConfFileSource.path = Path(conf_file) if conf_file else None
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    finally:
        _ConfFileSource.path = None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "?"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown configuration key {key!r}")
        else:
            parts.append(f"bad value for {key!r}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)


def conf_text(value: Any) -> str:
    """A setting's value as a ``starscan.conf`` line writes it (``key = <this>``): nothing for
    none, ``true``/``false``, a list's items and a mapping's pairs joined."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return "; ".join(f"{k}={v}" for k, v in value.items())
    return str(value)

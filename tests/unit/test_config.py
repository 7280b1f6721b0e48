"""Settings (starscan/settings/config.py) and the CLI around them.

Precedence: defaults < conf file < STARSCAN_* environment < overrides (CLI flags).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from starscan.core.errors import ConfigError
from starscan.settings.config import Settings, load_settings, parse_conf_file


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """No STARSCAN_* variable and no ./starscan.conf around."""
    for key in list(os.environ):
        if key.startswith("STARSCAN_"):
            monkeypatch.delenv(key)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


def write_conf(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# =====================================================================================
# Defaults and precedence
# =====================================================================================
def test_defaults(clean):
    s = load_settings()
    assert s.http_port == 8030
    assert s.be_port == 9060
    assert s.bind_host == "127.0.0.1"
    assert s.advertise_host == "127.0.0.1"
    assert s.be_endpoints == []
    assert s.keep_alive_min == 5
    assert s.time_zone == "UTC"
    assert s.spark_conf == {}
    assert s.plan_secret is None
    assert s.routings == ["127.0.0.1:9060"]
    assert s.gc_interval_s == 5 * 60.0
    assert s.effective_users_file == s.warehouse_path / "_starscan" / "users.json"


def test_precedence(clean, monkeypatch):
    conf = write_conf(clean / "a.conf", "http_port = 8100\nbe_port = 9100\nkeep_alive_min = 7\nquery_timeout_s = 11\n")
    s = load_settings(conf)
    assert (s.http_port, s.be_port, s.keep_alive_min, s.query_timeout_s) == (8100, 9100, 7, 11)
    monkeypatch.setenv("STARSCAN_BE_PORT", "9200")
    monkeypatch.setenv("STARSCAN_KEEP_ALIVE_MIN", "8")
    s = load_settings(conf)
    assert (s.http_port, s.be_port, s.keep_alive_min, s.query_timeout_s) == (8100, 9200, 8, 11)
    s = load_settings(conf, keep_alive_min=9, http_port=None)  # None = flag not given
    assert (s.http_port, s.be_port, s.keep_alive_min, s.query_timeout_s) == (8100, 9200, 9, 11)
    # Without the file, the environment still beats the defaults.
    s = load_settings()
    assert (s.http_port, s.be_port, s.keep_alive_min) == (8030, 9200, 8)


def test_conf_file_from_environment_and_cwd(clean, monkeypatch):
    named = write_conf(clean / "named.conf", "http_port = 8101\n")
    monkeypatch.setenv("STARSCAN_CONF", str(named))
    assert load_settings().http_port == 8101
    monkeypatch.delenv("STARSCAN_CONF")
    write_conf(Path("starscan.conf"), "http_port = 8102\n")
    assert load_settings().http_port == 8102
    # An explicit file wins over ./starscan.conf.
    assert load_settings(named).http_port == 8101


def test_missing_conf_file(clean):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(clean / "nope.conf")


def test_conf_file_syntax(clean):
    conf = write_conf(clean / "s.conf", "\n".join([
        "# a comment",
        "",
        "   # an indented comment",
        "http_port=8110",
        "  be_port   =   9110  ",
        'advertise_host = "10.0.0.7"',
        "bind_host = '0.0.0.0'",
        'warehouse = "/tmp/with space/wh"',
        "plan_secret = a=b=c",
        "time_zone = Europe/Berlin",
        "be_endpoints = 10.0.0.1:9060, 10.0.0.2:9061",
        "scan_context_gc_interval_s = 2.5",
        "",
    ]))
    s = load_settings(conf)
    assert s.http_port == 8110 and s.be_port == 9110
    assert s.advertise_host == "10.0.0.7"
    assert s.bind_host == "0.0.0.0"
    assert s.warehouse_path == Path("/tmp/with space/wh")
    assert s.plan_secret.get_secret_value() == "a=b=c"  # split at the first "="
    assert s.time_zone == "Europe/Berlin"
    assert s.be_endpoints == ["10.0.0.1:9060", "10.0.0.2:9061"]
    assert s.routings == ["10.0.0.1:9060", "10.0.0.2:9061"]
    assert s.gc_interval_s == 2.5


def test_spark_keys_go_to_spark_conf(clean, monkeypatch):
    conf = write_conf(clean / "spark.conf", "\n".join([
        "spark.executor.memory = 4g",
        'spark.sql.shuffle.partitions = "8"',
        "spark_master = local[3]",
        "spark_conf = spark.a=1; spark.b = 2",
    ]))
    s = load_settings(conf)
    assert s.spark_master == "local[3]"
    assert s.spark_conf == {"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": "8", "spark.a": "1", "spark.b": "2"}
    assert "spark.executor.memory" not in Settings.model_fields
    # Key by key, the environment beats the file and overrides beat the environment; no
    # layer's other keys are lost.
    monkeypatch.setenv("STARSCAN_SPARK_CONF", "spark.executor.memory=8g; spark.x=y")
    file_keys = {"spark.sql.shuffle.partitions": "8", "spark.a": "1", "spark.b": "2"}
    assert load_settings(conf).spark_conf == {**file_keys, "spark.executor.memory": "8g", "spark.x": "y"}
    s = load_settings(conf, spark_conf={"spark.executor.memory": "16g", "spark.z": "z"})
    assert s.spark_conf == {**file_keys, "spark.executor.memory": "16g", "spark.x": "y", "spark.z": "z"}
    monkeypatch.delenv("STARSCAN_SPARK_CONF")
    s = load_settings(conf, spark_conf={"spark.a": "override"})
    assert s.spark_conf == {**file_keys, "spark.executor.memory": "4g", "spark.a": "override"}
    # spark_conf text alone in the file merges with overrides, too.
    only = write_conf(clean / "only.conf", "spark_conf = spark.p=1\n")
    assert load_settings(only, spark_conf={"spark.q": "2"}).spark_conf == {"spark.p": "1", "spark.q": "2"}
    # spark conf reaches the session builder's configuration.
    from starscan.spark.session import spark_conf

    conf_map = spark_conf(load_settings(conf, spark_conf={"spark.ui.enabled": "true"}))
    assert conf_map["spark.ui.enabled"] == "true"
    assert conf_map["spark.sql.session.timeZone"] == "UTC"


def test_environment_values(clean, monkeypatch):
    monkeypatch.setenv("STARSCAN_BE_ENDPOINTS", "h1:1,h2:2")
    monkeypatch.setenv("STARSCAN_SPARK_CONF", "spark.a=1;spark.b=2")
    monkeypatch.setenv("STARSCAN_TIME_ZONE", "Asia/Tokyo")
    monkeypatch.setenv("STARSCAN_PLAN_TTL_S", "60")
    s = load_settings()
    assert s.be_endpoints == ["h1:1", "h2:2"]
    assert s.spark_conf == {"spark.a": "1", "spark.b": "2"}
    assert s.time_zone == "Asia/Tokyo"
    assert s.plan_ttl_s == 60


def test_routings_default_to_advertise_host_and_be_port(clean):
    s = load_settings(advertise_host="192.168.1.5", be_port=9999)
    assert s.routings == ["192.168.1.5:9999"]
    s = load_settings(advertise_host="192.168.1.5", be_port=9999, be_endpoints=["a:1"])
    assert s.routings == ["a:1"]


def test_the_page_cache_defaults_to_a_fifth_of_the_memory(clean, monkeypatch):
    from starscan.settings import config

    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < config.machine_memory_bytes() <= physical
    monkeypatch.setattr(config, "machine_memory_bytes", lambda: 10 << 30)
    assert load_settings().page_cache_bytes == 2 << 30
    assert load_settings(page_cache_max_bytes=0).page_cache_bytes == 0
    assert load_settings(page_cache_max_bytes=12345).page_cache_bytes == 12345


# =====================================================================================
# Errors name the key
# =====================================================================================
def test_unknown_key_in_file(clean):
    conf = write_conf(clean / "u.conf", "http_port = 8030\nhttp_prot = 8031\n")
    with pytest.raises(ConfigError) as info:
        load_settings(conf)
    assert "http_prot" in info.value.message
    assert ":2:" in info.value.message  # the line number


def test_line_without_equals(clean):
    conf = write_conf(clean / "l.conf", "http_port 8030\n")
    with pytest.raises(ConfigError, match="key = value"):
        load_settings(conf)


def test_unknown_environment_variable(clean, monkeypatch):
    monkeypatch.setenv("STARSCAN_HTTP_PROT", "1")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "http_prot" in info.value.message
    assert "STARSCAN_HTTP_PROT" in info.value.message


def test_unknown_override(clean):
    with pytest.raises(ConfigError, match="no_such_flag"):
        load_settings(no_such_flag=1)


@pytest.mark.parametrize("key, value", [
    ("http_port", "abc"),
    ("http_port", "70000"),
    ("be_port", "-1"),
    ("time_zone", "Nowhere/Zone"),
    ("time_zone", "../etc/passwd"),
    ("be_endpoints", "h"),
    ("be_endpoints", "h:x"),
    ("be_endpoints", "::1:9060"),
    ("keep_alive_min", "0"),
    ("plan_ttl_s", "1.5x"),
    ("spark_conf", "novalue"),
    ("listing_cache_ttl_s", "-1"),
])
def test_bad_value_names_the_key(clean, monkeypatch, key, value):
    conf = write_conf(clean / "b.conf", f"{key} = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(conf)
    assert key in info.value.message
    # Same via the environment and via overrides.
    monkeypatch.setenv(f"STARSCAN_{key.upper()}", value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert key in info.value.message
    monkeypatch.delenv(f"STARSCAN_{key.upper()}")
    with pytest.raises(ConfigError) as info:
        load_settings(**{key: value})
    assert key in info.value.message


def test_bad_spark_conf_text_next_to_spark_keys(clean):
    conf = write_conf(clean / "sc.conf", "spark.x = 1\nspark_conf = novalue\n")
    with pytest.raises(ConfigError, match="spark_conf"):
        load_settings(conf)


def test_parse_conf_file_directly(clean):
    conf = write_conf(clean / "p.conf", "# x\nhttp_port = 1\nspark.k = v\n")
    assert parse_conf_file(conf) == {"http_port": "1", "spark_conf": {"spark.k": "v"}}
    with pytest.raises(ConfigError, match="cannot read"):
        parse_conf_file(clean / "missing.conf")


# =====================================================================================
# The CLI
# =====================================================================================
def _cli(*args, cwd, timeout=120, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    env["COLUMNS"] = "200"
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "starscan", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_cli_serve_rejects_bad_conf_before_spark(tmp_path):
    conf = write_conf(tmp_path / "bad.conf", "http_port = 8030\nno_such_key = 1\n")
    started = time.monotonic()
    out = _cli("serve", "--conf", str(conf), "--warehouse", str(tmp_path / "wh"), cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert out.returncode != 0
    assert "no_such_key" in out.stderr
    assert "Traceback" not in out.stderr
    assert elapsed < 30  # no SparkSession was started
    assert not (tmp_path / "wh").exists()


def test_cli_serve_rejects_bad_value(tmp_path):
    conf = write_conf(tmp_path / "bad.conf", "time_zone = Nowhere/Zone\n")
    out = _cli("serve", "--conf", str(conf), cwd=tmp_path, timeout=60)
    assert out.returncode != 0
    assert "time_zone" in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_serve_rejects_unknown_env(tmp_path):
    out = _cli("serve", cwd=tmp_path, timeout=60, env_extra={"STARSCAN_NOPE": "1"})
    assert out.returncode != 0
    assert "STARSCAN_NOPE" in out.stderr


def test_cli_version(tmp_path):
    from starscan import __version__

    out = _cli("version", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"starscan {__version__}"


def test_the_configuration_reference_is_generated_from_the_model():
    """docs/configuration.md is `starscan config reference`: regenerate it when a field changes."""
    from pathlib import Path

    from starscan.settings.reference import render

    path = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert path.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: run `starscan config reference > docs/configuration.md`")


def test_runtime_keys_are_the_marked_fields():
    from starscan.settings.config import Settings
    from starscan.settings.runtime import RUNTIME_KEYS, LiveSettings

    assert "scan_engine" in RUNTIME_KEYS and "http_port" not in RUNTIME_KEYS
    live = LiveSettings(Settings(warehouse="/tmp/x"))
    heard = []
    live.subscribe(["log_level"], lambda s, changed: heard.append((s.log_level, dict(changed))))
    live.apply({"scan_engine": "sql"})
    assert heard == [] and live.current.scan_engine == "sql"
    live.apply({"log_level": "DEBUG"})
    assert heard == [("DEBUG", {"log_level": "DEBUG"})]


def test_settings_are_immutable_and_a_change_is_a_new_validated_object():
    from pydantic import ValidationError

    from starscan.core.errors import ConfigChangeRefused
    from starscan.settings.runtime import LiveSettings

    first = Settings(warehouse="/tmp/x", jwt_key="k", be_endpoints="a:1, b:2", spark_conf="x=1")
    with pytest.raises(ValidationError):
        first.max_scanners = 3
    live = LiveSettings(first)
    assert LiveSettings.of(live) is live and LiveSettings.of(first).current is first
    seen = []
    live.subscribe(["max_scanners"], lambda s, changed: seen.append(s))
    live.apply({"max_scanners": "7", "result_cache_tables": "db.t, other.*"})
    new = live.current
    assert new is not first and first.max_scanners == 256  # the old object is untouched
    assert (new.max_scanners, new.result_cache_tables) == (7, ["db.t", "other.*"])  # field validators ran
    assert seen == [new]
    # The rest is carried over as it was, secrets included.
    assert new.jwt_key is not None and new.jwt_key.get_secret_value() == "k"
    assert (new.be_endpoints, new.spark_conf) == (["a:1", "b:2"], {"x": "1"})
    # A change is all or nothing: one bad value, nothing changes.
    with pytest.raises(ConfigChangeRefused, match="bad value for 'result_cache_tables'"):
        live.apply({"max_scanners": "9", "result_cache_tables": "no pattern"})
    assert live.current is new
    with pytest.raises(ConfigChangeRefused, match="cannot change at run time"):
        live.apply({"http_port": "1"})
    live.bound(be_port=4321)  # what the server found at start is kept through later changes
    live.apply({"max_scanners": "8"})
    assert (live.current.be_port, live.current.max_scanners) == (4321, 8)


def test_an_object_store_warehouses_state_is_in_the_users_state_directory(clean, monkeypatch, tmp_path):
    """Never the working directory (a `git add -A` there would commit the plan secret), one
    folder per warehouse; an explicit state_dir wins."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    a = load_settings(warehouse="s3://bucket/lake/prod").state_path
    b = load_settings(warehouse="s3://bucket/lake/test").state_path
    assert a.is_absolute() and a.parent == tmp_path / "state" / "starscan"
    assert a.name.startswith("bucket_lake_prod-") and a != b
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_settings(warehouse="s3://bucket/lake/prod").state_path.parent == tmp_path / "home" / ".local" / "state" / "starscan"
    assert load_settings(warehouse="s3://bucket/x", state_dir=tmp_path / "shared").state_path == tmp_path / "shared"
    assert load_settings(warehouse=tmp_path / "wh").state_path == tmp_path / "wh" / "_starscan"


def test_the_s3_endpoint_defaults_from_the_aws_sdk_variables(monkeypatch):
    from starscan.storage.stores import StorageOptions

    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio.internal:9000")
    assert StorageOptions().endpoint == "http://minio.internal:9000"
    assert StorageOptions().path_style_requests  # an endpoint, so path-style as for s3_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3only.internal:9000")
    assert StorageOptions().endpoint == "http://s3only.internal:9000"
    assert StorageOptions(endpoint="http://set.internal:1").endpoint == "http://set.internal:1"
    assert Settings(s3_endpoint=None).storage_options.endpoint == "http://s3only.internal:9000"


def test_the_thrift_relay_takes_a_port_per_be_and_a_range_past_65535_is_refused(clean):
    two = ["be1:9060", "be2:9060"]
    assert Settings(thrift_relay_port=9070, be_endpoints=two).relay_ports == [9070, 9071]
    assert Settings(thrift_relay_port=0, be_endpoints=two).relay_ports == [0, 0]  # free ports
    assert Settings().relay_ports == []  # off by default
    with pytest.raises(ValueError, match="thrift_relay_port.*65535-65536|65535-65536.*thrift_relay_port"):
        Settings(thrift_relay_port=65535, be_endpoints=two)

"""starscan.storage.stores without a store: local folders, location spelling, error kinds."""

from __future__ import annotations

import os

import pytest

from starscan.core.errors import StorageDenied, StorageUnavailable
from starscan.storage.stores import LOCAL, StorageOptions, is_uri, open_storage, store_error


def test_locations_and_schemes():
    assert is_uri("s3://b/p") and is_uri("file:///x") and not is_uri("/data/wh") and not is_uri("C:/wh")
    assert open_storage("/data/wh") is LOCAL and open_storage("file:///data/wh") is LOCAL
    s3 = open_storage("s3://bucket/wh", StorageOptions(endpoint="http://127.0.0.1:9", region="us-east-1",
                                                       access_key_id="k", secret_access_key="s"))
    assert (s3.scheme, s3.authority, s3.is_local) == ("s3", "bucket", False)
    table = s3.join("s3://bucket/wh", "d.db", "t")
    assert table == "s3://bucket/wh/d.db/t"
    assert s3.spark_path(table) == "s3a://bucket/wh/d.db/t"
    assert s3.arrow_path(s3.join(table, "a=1/part-0.parquet"))[1] == "bucket/wh/d.db/t/a=1/part-0.parquet"
    assert LOCAL.spark_path("/data/wh") == "/data/wh" and LOCAL.join("/data/wh/", "t") == "/data/wh/t"


def test_the_secret_is_in_no_text_of_the_options():
    options = StorageOptions(endpoint="http://h:9000", access_key_id="AKIA", secret_access_key="very-secret",
                             session_token="tok-secret")
    assert "very-secret" not in repr(options) and "tok-secret" not in repr(options)
    conf = options.hadoop_conf()
    assert conf["fs.s3a.path.style.access"] == "true" and conf["fs.s3a.endpoint"] == "http://h:9000"


def test_local_walk_skips_hidden_folders_and_reports_identity(tmp_path):
    (tmp_path / "a=1").mkdir()
    (tmp_path / "a=1" / "part-0.parquet").write_bytes(b"x" * 10)
    (tmp_path / "_temporary" / "0").mkdir(parents=True)
    (tmp_path / "_temporary" / "0" / "part-9.parquet").write_bytes(b"y")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "f").write_bytes(b"z")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    walked = {e.name: e for e in LOCAL.walk_files(str(tmp_path))}
    assert set(walked) == {"a=1/part-0.parquet", "_SUCCESS"}  # hidden files are the catalog's rule
    st = os.stat(tmp_path / "a=1" / "part-0.parquet")
    assert walked["a=1/part-0.parquet"].size == 10
    assert LOCAL.file_identity(str(tmp_path / "a=1" / "part-0.parquet")) == (10, st.st_mtime_ns)
    assert LOCAL.file_identity(str(tmp_path / "a=1")) is None and LOCAL.file_identity(str(tmp_path / "no")) is None
    assert [e.name for e in LOCAL.list_dir(str(tmp_path))] == [".hidden", "_SUCCESS", "_temporary", "a=1"]
    assert LOCAL.list_dir(str(tmp_path / "missing")) == [] and LOCAL.dir_stamp(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("text, kind", [
    ("When listing objects: AWS Error INVALID_ACCESS_KEY_ID during ListObjectsV2 operation: nope", StorageDenied),
    ("When getting information for key 'wh': AWS Error ACCESS_DENIED during HeadObject operation", StorageDenied),
    ("When connecting: AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode 7", StorageUnavailable),
])
def test_store_errors_are_told_apart(text, kind):
    error = store_error("s3://lake", OSError(text))
    assert isinstance(error, kind) and error.message.startswith("s3://lake")


def test_a_warehouse_of_a_scheme_starscan_cannot_serve_stops_the_configuration():
    from starscan.core.errors import ConfigError
    from starscan.settings.config import load_settings

    with pytest.raises(ConfigError, match="cannot serve the scheme foo://"):
        load_settings(warehouse="foo://bucket/x")
    with pytest.raises(ConfigError, match="names no bucket"):
        load_settings(warehouse="s3:///x")
    assert load_settings(warehouse="s3://bucket/wh").warehouse_is_local is False
    assert load_settings(warehouse="file:///data/wh").warehouse_path.as_posix() == "/data/wh"

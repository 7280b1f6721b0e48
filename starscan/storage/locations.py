"""Warehouse locations and the options of an object store: what the settings check and
keep, without ``pyarrow`` (starscan.storage.stores reads the stores themselves; a CLI
command that only reads its settings, such as ``starscan user``, does not import pyarrow)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import pyarrow.fs as pafs


SCHEMES = ("file", "s3", "s3a", "gs", "gcs", "hdfs", "viewfs")


def check_location(location: str) -> None:
    """A warehouse location starscan can serve, or ValueError saying what to use instead."""
    if not is_uri(location):
        return
    scheme = urlsplit(location).scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"{location!r}: starscan cannot serve the scheme {scheme}://; use a local folder, "
                         "s3://bucket/prefix (S3 and S3-compatible stores), gs://bucket/prefix or hdfs://host/path")
    if not urlsplit(location).netloc and scheme != "file":
        raise ValueError(f"{location!r} names no bucket or host")


def is_uri(location: str) -> bool:
    """``scheme://...`` (a single letter is a Windows drive, not a scheme)."""
    scheme = urlsplit(location).scheme
    return len(scheme) > 1 and "://" in location


@dataclass(frozen=True)
class StorageOptions:
    """How to reach an S3-compatible store; unset fields fall back to the AWS environment."""

    endpoint: str | None = None          # http://127.0.0.1:9000 for MinIO or a test server
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool | None = None       # None: path-style when an endpoint is set

    def __post_init__(self) -> None:
        # As the AWS SDKs and CLI do: the S3 service's own variable, then the general one.
        if not self.endpoint:
            from_env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if from_env:
                object.__setattr__(self, "endpoint", from_env)

    @property
    def path_style_requests(self) -> bool:
        """Path-style requests (bucket in the path): as set, else when an endpoint is set."""
        return self.path_style if self.path_style is not None else bool(self.endpoint)

    def s3_filesystem(self) -> pafs.S3FileSystem:
        import pyarrow.fs as pafs  # here: the settings (and so every CLI command) import this module

        kwargs: dict[str, Any] = {}
        if self.endpoint:
            parts = urlsplit(self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}")
            kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
            kwargs["scheme"] = parts.scheme or "https"
        if self.region:
            kwargs["region"] = self.region
        if self.access_key_id or self.secret_access_key:
            kwargs["access_key"] = self.access_key_id or ""
            kwargs["secret_key"] = self.secret_access_key or ""
            if self.session_token:
                kwargs["session_token"] = self.session_token
        kwargs["force_virtual_addressing"] = not self.path_style_requests
        # A table read must not wait minutes on a store that does not answer.
        kwargs["connect_timeout"] = 10
        kwargs["request_timeout"] = 60
        return pafs.S3FileSystem(**kwargs)

    def hadoop_conf(self) -> dict[str, str]:
        """The same options for Hadoop's s3a client (the Spark SQL path)."""
        conf: dict[str, str] = {}
        if self.endpoint:
            conf["fs.s3a.endpoint"] = self.endpoint
            conf["fs.s3a.connection.ssl.enabled"] = str(self.endpoint.startswith("https")).lower()
        conf["fs.s3a.path.style.access"] = str(self.path_style_requests).lower()
        return conf | self._named("fs.s3a.endpoint.region", "fs.s3a.access.key", "fs.s3a.secret.key",
                                  "fs.s3a.session.token")

    def delta_options(self) -> dict[str, str]:
        """The same options for ``deltalake`` (delta-rs names them as AWS does)."""
        out: dict[str, str] = {}
        if self.endpoint:
            out["AWS_ENDPOINT_URL"] = self.endpoint
            out["AWS_ALLOW_HTTP"] = str(self.endpoint.startswith("http://")).lower()
        out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not self.path_style_requests).lower()
        return out | self._named("AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

    def _named(self, region: str, access_key_id: str, secret_access_key: str, session_token: str) -> dict[str, str]:
        """The region and credentials that are set, under another client's names for them."""
        values = {region: self.region, access_key_id: self.access_key_id,
                  secret_access_key: self.secret_access_key, session_token: self.session_token}
        return {name: value for name, value in values.items() if value}


def local_path(location: str) -> str:
    """A local location as a plain path (``file:///x`` -> ``/x``)."""
    return urlsplit(location).path if location.startswith("file:") else location  # file:///x and Hadoop's file:/x

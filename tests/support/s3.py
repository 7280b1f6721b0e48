"""moto's standalone S3 server on 127.0.0.1 with an IAM user allowed s3:*, for the
object-storage benchmark and tests (tests/integration/test_object_storage.py imports it).

Authentication starts after the three IAM calls that create the user, so wrong keys are
refused as AWS refuses them."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import IO

from support.waits import free_port


def start_moto(log: IO[bytes] | int = subprocess.DEVNULL, timeout_s: float = 60.0
               ) -> tuple[subprocess.Popen, str, dict[str, str]]:
    """``(process, endpoint, starscan's s3_* settings)``; stop with ``process.terminate()``."""
    proc, endpoint, creds, _ = start_moto_with_reader(log, timeout_s, reader=False)
    return proc, endpoint, creds


def start_moto_with_reader(log: IO[bytes] | int = subprocess.DEVNULL, timeout_s: float = 60.0, reader: bool = True
                           ) -> tuple[subprocess.Popen, str, dict[str, str], dict[str, str] | None]:
    """As ``start_moto``, and the keys of a second IAM user, ``reader``, who may only get
    objects and list buckets (a client reading files with keys of its own), as
    ``StorageOptions`` fields."""
    port = free_port()
    # The IAM calls below are made before authentication is on (3 per user).
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(6 if reader else 3), "AWS_ACCESS_KEY_ID": "setup",
           "AWS_SECRET_ACCESS_KEY": "setup"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.terminate()
                raise RuntimeError(f"moto's S3 server did not start on {endpoint}") from None
            time.sleep(0.1)
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
                       aws_secret_access_key="setup")

    def user(name: str, actions: str | list[str]) -> dict[str, str]:
        iam.create_user(UserName=name)
        key = iam.create_access_key(UserName=name)["AccessKey"]
        iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}))
        return key

    key = user("starscan", "s3:*")
    creds = {"s3_endpoint": endpoint, "s3_region": "us-east-1", "s3_access_key_id": key["AccessKeyId"],
             "s3_secret_access_key": key["SecretAccessKey"]}
    readers = None
    if reader:
        key = user("reader", ["s3:GetObject", "s3:ListBucket"])
        readers = {"endpoint": endpoint, "region": "us-east-1", "access_key_id": key["AccessKeyId"],
                   "secret_access_key": key["SecretAccessKey"]}
    return proc, endpoint, creds, readers


def filesystem(creds: dict[str, str]):
    """A pyarrow S3 filesystem for the test or benchmark itself (buckets may be made and deleted)."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(access_key=creds["s3_access_key_id"], secret_key=creds["s3_secret_access_key"],
                             endpoint_override=creds["s3_endpoint"].split("://", 1)[1], scheme="http",
                             region="us-east-1", force_virtual_addressing=False, allow_bucket_creation=True,
                             allow_bucket_deletion=True)


def upload_folder(fs, local, target: str) -> None:
    """Every data file under the local folder ``local`` to ``target`` (bucket/prefix), as a
    Spark job writing to S3 leaves them (hidden and ``_``-prefixed files stay behind)."""
    import pyarrow.fs as pafs

    for path in sorted(local.rglob("*")):
        if path.is_file() and not path.name.startswith((".", "_")):
            pafs.copy_files(str(path), f"{target}/{path.relative_to(local).as_posix()}", pafs.LocalFileSystem(), fs)


@contextlib.contextmanager
def moto_bucket(log_path, bucket: str, reader: bool = False):
    """moto's server with ``bucket`` made, for a test module: yields ``creds`` (starscan's
    s3_* settings), ``fs`` (a filesystem that may write), ``endpoint`` and, with ``reader``,
    ``reader`` (read-only keys of a second user, as ``StorageOptions`` fields)."""
    with open(log_path, "wb") as log:
        proc, endpoint, creds, readers = start_moto_with_reader(log, reader=reader)
        try:
            fs = filesystem(creds)
            fs.create_dir(bucket)
            yield {"creds": creds, "fs": fs, "endpoint": endpoint, "reader": readers}
        finally:
            proc.terminate()
            proc.wait(30)

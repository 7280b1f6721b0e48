"""Reading from a StarRocks-protocol server (starscan, or a StarRocks FE and its BEs) in
Python, without Spark or a server's modules: pyarrow, numpy, thriftpy2 and httpx only (`pip install starscan`).

- ``connect(fe, user, password, **options)`` -> ``Connection``: ``read_arrow`` (a
  ``pyarrow.Table``) and ``read_batches`` (a ``pyarrow.RecordBatchReader`` that streams with
  bounded memory), reading tablets in parallel with failover (starscan.client.reader);
- ``StarscanClient``: the protocol step by step (plans, scanners, incremental reads and
  consumers; starscan.client.protocol); ``AdminClient``: a running server's scanners and
  configuration (starscan.client.fe);
- direct reads: tablets read from their files by the client itself, with the server's own
  read rules (``direct="auto"``; starscan.client.direct);
- one exception tree, ``ReadError``, with a class per kind of failure (starscan.client.errors).
"""

from starscan.client.errors import (
    AuthenticationError,
    DirectReadDenied,
    DirectReadError,
    FailoverMismatch,
    NetworkError,
    OptionError,
    PermissionDenied,
    QueryError,
    ReadError,
    ScanIntegrityError,
    ServerError,
    SnapshotGoneError,
)
from starscan.client.fe import AdminClient
from starscan.client.options import ReadOptions
from starscan.client.protocol import Followed, ScanStats, StarscanClient, thrift_client
from starscan.client.reader import Connection, connect

__all__ = [
    "AdminClient", "AuthenticationError", "Connection", "DirectReadDenied", "DirectReadError", "FailoverMismatch",
    "Followed", "NetworkError", "OptionError", "PermissionDenied", "QueryError", "ReadError", "ReadOptions",
    "ScanIntegrityError", "ScanStats", "ServerError", "SnapshotGoneError", "StarscanClient", "connect",
    "thrift_client",
]

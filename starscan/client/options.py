"""The read options, with the names and defaults of the StarRocks Spark connector (and the
StarRocks catalog that reads the same way), so a configuration moves between them as is.

Each option is given by its StarRocks name (``"starrocks.batch.size"``) or as a Python
keyword without the prefix (``batch_size``). Unknown names are an error, not ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from starscan.client.errors import OptionError

#: StarRocks name -> field
NAMES = {
    "starrocks.request.retries": "request_retries",
    "starrocks.request.connect.timeout.ms": "request_connect_timeout_ms",
    "starrocks.request.read.timeout.ms": "request_read_timeout_ms",
    "starrocks.request.query.timeout.s": "request_query_timeout_s",
    "starrocks.request.tablet.size": "request_tablet_size",
    "starrocks.batch.size": "batch_size",
    "starrocks.exec.mem.limit": "exec_mem_limit",
    "starrocks.request.keep.alive.min": "request_keep_alive_min",
}


@dataclass(frozen=True)
class ReadOptions:
    request_retries: int = 3                  # a BE call repeated on a new connection; a scanner moved to the next routing
    request_connect_timeout_ms: int = 30_000  # connecting to the FE or a BE
    request_read_timeout_ms: int = 30_000     # waiting for an FE or BE answer
    request_query_timeout_s: int = 3600       # the scan's time limit on the BE
    request_tablet_size: int = 2**31 - 1      # tablets read by one scanner at most
    batch_size: int = 4096                    # rows per get_next reply
    exec_mem_limit: int = 2_147_483_648       # bytes the BE may hold for one scanner
    request_keep_alive_min: int | None = None  # idle minutes before the BE drops a scanner (server default)

    @classmethod
    def of(cls, given: dict[str, Any]) -> ReadOptions:
        values: dict[str, Any] = {}
        known = {f.name: f for f in fields(cls)}
        for key, value in given.items():
            name = NAMES.get(key, key.removeprefix("starrocks.").replace(".", "_"))
            if name not in known:
                raise OptionError(f"unknown read option {key!r}; the options are {', '.join(sorted(NAMES))}")
            try:
                values[name] = None if value is None else int(value)
            except (TypeError, ValueError):
                raise OptionError(f"read option {key!r} must be an integer, not {value!r}") from None
            if values[name] is not None and values[name] < (0 if name == "request_retries" else 1):
                raise OptionError(f"read option {key!r} must be positive, not {value!r}")
        return cls(**values)

"""Application logging: human-readable lines by default, one JSON object per line with
``log_format = json`` (``--log-format json``). Standard library only.

Every line about a scan carries ``context_id``, ``query_id``, ``user`` and ``table``
(``db.table``): callers pass ``extra=scan_fields(ctx)``; the JSON formatter writes them as
keys, the human one appends ``key=value`` for those the message does not already name.
Spark and py4j are kept at WARN, and the lines Spark logs when a scan is cancelled on
purpose (close, GC, timeout: killed tasks, broken local sockets) are dropped.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def scan_fields(ctx: Any = None, *, context_id: str | None = None, query_id: str | None = None,
                user: str | None = None, table: str | None = None) -> dict[str, str | None]:
    """The fields every scan line carries, from a ScanContext (or given one by one)."""
    if ctx is not None:
        info = ctx.info  # provider.contexts.ScanInfo
        context_id = context_id or ctx.context_id
        query_id = query_id or info.query_id
        user = user or ctx.user or info.user
        table = table or ctx.table or info.table
    return {"context_id": context_id, "query_id": query_id, "user": user or None, "table": table or None}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _extras(record).items():
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class HumanFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        message = record.getMessage()
        tail = [f"{k}={v}" for k, v in _extras(record).items() if v is not None and f"{k}=" not in message]
        if tail:
            head, nl, rest = line.partition("\n")  # keep a traceback below the fields
            line = head + " " + " ".join(tail) + nl + rest
        return line


_PY4J_DIR = f"{os.sep}py4j{os.sep}"


def _not_py4j_chatter(record: logging.LogRecord) -> bool:
    """py4j logs some lines on the root logger itself (``logging.info(..., exc_info=True)``
    with a traceback each time it retries a call on a new connection, e.g. after Spark's JVM
    died), past the level its own loggers are kept at: below WARNING they are dropped too."""
    return record.levelno >= logging.WARNING or record.name != "root" or _PY4J_DIR not in record.pathname


def setup_logging(fmt: str = "human", level: str = "INFO", stream: IO[str] | None = None) -> None:
    """Configure the root logger once for the process (the CLI calls this)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else HumanFormatter())
    handler.addFilter(_not_py4j_chatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("py4j", "pyspark", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def set_level(level: str) -> None:
    logging.getLogger().setLevel(level)


def quiet_spark(spark: SparkSession) -> None:
    """Spark's JVM logs at WARN. Nothing more is silenced: a scan closed early or reaped
    ends without an error in Spark's log (provider/spark_scan.py stops it cleanly), and a
    real task failure must stay visible there."""
    try:
        spark.sparkContext.setLogLevel("WARN")
    except Exception:  # noqa: BLE001 - a remote or stopping Spark: leave its logging alone
        logging.getLogger("starscan").debug("could not adjust Spark's log levels", exc_info=True)

"""The body of a ``_query_plan`` request, as StarRocks' FE reads it (steps 2-4 of its ladder:
a JSON object with a non-empty ``sql``), with starscan's own keys: an incremental read's
``since_version`` or ``consumer``, a ``direct`` plan."""

from __future__ import annotations

import json
from dataclasses import dataclass

from starscan.core.errors import BadRequest, RequestTooLarge
from starscan.tables.consumers import check_consumer_name


@dataclass(frozen=True)
class PlanRequest:
    sql: str
    since_version: int | None = None  # only the data appended after this version (starscan.tables.versions)
    consumer: str | None = None       # a named consumer: from its committed version (starscan.tables.consumers)
    cursor: bool = False              # "since_version" was sent (null: from the start): answer with "version"
    direct: bool = False              # a direct plan: name the storage of each tablet (starscan.arrow.direct)
    # The reader applies row-level deletes itself (a client that predates them would not, and
    # would return deleted rows): only then are tablets with deletes direct.
    direct_row_deletes: bool = False


def table_version(value: object, what: str = "version") -> int:
    """A table version a client sends back (a plan's ``"version"``): an int of 31 bits."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        raise BadRequest(f"{what} must be a table version (an integer from a plan's \"version\"), not {value!r}")
    return value


def read_plan_body(body: bytes, max_sql_length: int | None = None) -> PlanRequest:
    """The request body: a JSON object with a non-empty `sql` and, optionally, an integer
    `since_version` (an incremental read)."""
    if not body or not body.strip():
        raise BadRequest("POST body must contains [sql] root object")
    text = body.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise BadRequest(f"malformed json [ {text} ]") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"malformed json [ {text} ]")
    sql = doc.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise BadRequest("POST body must contains [sql] root object")
    if max_sql_length is not None and len(sql) > max_sql_length:
        raise RequestTooLarge(f"sql is {len(sql)} characters, more than max_sql_length={max_sql_length}")
    since = doc.get("since_version")
    if since is not None:
        since = table_version(since, "since_version")
    consumer = doc.get("consumer")
    direct = doc.get("direct", False)
    if not isinstance(direct, bool):
        raise BadRequest(f'"direct" must be true or false, not {direct!r}')
    row_deletes = doc.get("direct_row_deletes", False)
    if not isinstance(row_deletes, bool):
        raise BadRequest(f'"direct_row_deletes" must be true or false, not {row_deletes!r}')
    return PlanRequest(sql, since, check_consumer_name(consumer) if consumer is not None else None,
                       cursor="since_version" in doc, direct=direct, direct_row_deletes=row_deletes)

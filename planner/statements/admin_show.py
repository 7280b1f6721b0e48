"""``ADMIN SHOW FRONTEND CONFIG [LIKE 'pattern']``, as StarRocks answers it (an administrator's
view of the FE's configuration): the node's run-time settings with their values, and
``run_mode``, which StarRocks' own clients read on connect (its SQLAlchemy dialect asks
whether the cluster is shared-data). starscan's nodes keep no tablets of their own, but the
tablets a plan names are served by any BE from the shared warehouse the way StarRocks'
shared-nothing clusters route them (a tablet's BEs in the plan): ``shared_nothing``.

sqlglot does not parse StarRocks' ADMIN statements, so this one is recognised by its shape.
"""

from __future__ import annotations

import re
import typing

import pyarrow as pa

from starscan.planner.statements.show import like_pattern, table
from starscan.settings.config import Settings, conf_text
from starscan.settings.runtime import RUNTIME_KEYS

_STATEMENT = re.compile(r"\s*ADMIN\s+SHOW\s+FRONTEND\s+CONFIG(?:\s+LIKE\s+'((?:[^'\\]|\\.|'')*)')?\s*;?\s*",
                        re.IGNORECASE | re.DOTALL)
HEADER = ["Key", "AliasNames", "Value", "Type", "IsMutable", "Comment"]


def match(sql: str) -> tuple[bool, str | None]:
    """(whether ``sql`` is ADMIN SHOW FRONTEND CONFIG, its LIKE pattern or None)."""
    found = _STATEMENT.fullmatch(sql)
    if found is None:
        return False, None
    pattern = found.group(1)
    return True, None if pattern is None else pattern.replace("''", "'")


def frontend_config(pattern: str | None, settings: Settings) -> pa.Table:
    """The rows of ADMIN SHOW FRONTEND CONFIG: ``run_mode``, then every run-time setting
    (``POST /api/update_config`` changes them), with their current values."""
    values = settings.model_dump(mode="json")
    rows = [("run_mode", "[]", "shared_nothing", "String", "false",
             "where a table's data lives: in the shared warehouse, read by any BE the plan names")]
    for key in RUNTIME_KEYS:
        field = Settings.model_fields[key]
        rows.append((key, "[]", conf_text(values.get(key)), _type_name(field.annotation), "true", field.description or ""))
    return table([row for row in rows if like_pattern(pattern, row[0], case_sensitive=False)], HEADER)


def _type_name(annotation) -> str:
    """A setting's type as StarRocks names a config's (int, long, double, boolean, String,
    String[]): an optional value is its type's."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is list:
        return "String[]"
    if args and origin is not typing.Literal:
        return _type_name(args[0])
    return {int: "long", float: "double", bool: "boolean"}.get(annotation, "String")

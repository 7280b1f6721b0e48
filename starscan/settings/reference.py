"""docs/configuration.md, generated from the ``Settings`` model: every key, its type, default,
whether it changes at run time, and its description (``starscan config reference``; a test
fails when the file in the repository is stale)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, cast

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from starscan.settings.config import ENV_PREFIX, Settings
from starscan.settings.runtime import RUNTIME_KEYS

HEADER = f"""# Configuration reference

Generated from the settings model (`starscan/settings/config.py`) by `starscan config reference`; do
not edit by hand (a test compares this file with the model).

Every key can be set, from lowest to highest precedence, by its default, a line
`key = value` in `starscan.conf` (`--conf FILE`, `$STARSCAN_CONF`, or `./starscan.conf`;
`#` starts a comment; `spark.*` keys go to Spark unchanged), the environment variable
`{ENV_PREFIX}<KEY>`, and a command-line flag where `starscan serve` has one. Unknown keys and
bad values stop the server at start, naming the key. Keys marked **run time** also change on
a running server: `starscan config set KEY VALUE` or `POST /api/update_config?KEY=VALUE`
(admins); every other key needs a restart. `GET /varz` shows the effective values, secrets
masked.

| key | type | default | run time | meaning |
|---|---|---|---|---|
"""


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "").replace("pathlib.", "").replace("pydantic.types.", "")
    return text.replace("NoneType", "None")


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = cast(Callable[[], Any], field.default_factory)()  # Settings' factories take no data
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "—"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{v}`" for v in value) if value else "—"
    if isinstance(value, dict):
        return "—" if not value else ", ".join(f"`{k}={v}`" for k, v in value.items())
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    rows = []
    for name, field in Settings.model_fields.items():
        rows.append(f"| `{name}` | {_cell(_type_name(field.annotation))} | {_cell(_default(field))} | "
                    f"{'**run time**' if name in RUNTIME_KEYS else ''} | {_cell(field.description or '')} |")
    return HEADER + "\n".join(rows) + "\n"

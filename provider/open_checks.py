"""open_scanner's checks, in the order StarRocks' BE makes them (docs/protocol.md 4.2):
the request's fields, the signed plan, who sends it, and the tablets it asks for. What
passes is an ``CheckedOpen``: everything the later steps need, checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starscan.core.errors import InvalidArgument, NotFound
from starscan.core.protocol_extensions import ARROW_TYPES_PROPERTY, EOS_ROWS_PROPERTY, ORDERED_PROPERTY
from starscan.plans import codec as plan_codec
from starscan.plans.tablet_lists import TabletLists, planned_tablets
from starscan.provider.admission import Admission
from starscan.provider.open_request import OpenRequest
from starscan.settings.config import Settings
from starscan.tables.catalog import Warehouse

MAX_BATCH_SIZE = 65536


@dataclass(frozen=True)
class CheckedOpen:
    """A checked open_scanner request: the plan, its tablets, and what the reader asked for."""

    plan: Any                    # the decoded, verified plan (starscan.plans.codec)
    plan_tablets: list           # every tablet the plan names (Tablet)
    tablet_ids: list[int]        # those this scanner reads, each once, in the reader's order
    batch_size: int
    ordered: bool                # rows in a fixed order (the reader asked, or scans are resumable)
    report_rows: bool            # the row count at eos (protocol_extensions)
    mem_limit: int | None
    query_timeout: int | None
    arrow_types: bool = False    # Spark's values in Arrow's own types (protocol_extensions.ARROW_TYPES_PROPERTY)

    @property
    def table(self) -> str:
        return f"{self.plan.database}.{self.plan.table}"

    @property
    def columns(self) -> list[tuple[str, int]]:
        return [(c.name, c.primitive_type) for c in self.plan.columns]


def check_text(value: Any, name: str) -> None:
    """thriftpy2 hands over a string field that is not valid UTF-8 as bytes."""
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{name} is not valid UTF-8 text")


def text(params: OpenRequest, name: str) -> str | None:
    """The request's text field ``name``, refused when it is not valid UTF-8."""
    value = getattr(params, name)
    check_text(value, name)
    return value if isinstance(value, str) else None


def read_plan(params: OpenRequest, signer: plan_codec.Signer) -> Any:
    """The request's own fields checked and its plan decoded and verified (first, so that a
    refusal after this names the plan's query, user and table)."""
    if params.batch_size is None:
        raise InvalidArgument("batch_size is not set")
    if params.batch_size <= 0 or params.batch_size > MAX_BATCH_SIZE:
        raise InvalidArgument(
            f"batch_size is out of range, it must be in the range (0, {MAX_BATCH_SIZE}], current value is [{params.batch_size}]"
        )
    for name in ("opaqued_query_plan", "user", "passwd", "database", "table", "cluster"):
        check_text(getattr(params, name, None), name)
    return plan_codec.decode(text(params, "opaqued_query_plan") or "", signer)


def check_open(plan: Any, params: OpenRequest, settings: Settings, admission: Admission, tablet_lists: TabletLists,
               warehouse: Warehouse | None, client: str, always_ordered: bool = False) -> CheckedOpen:
    """The request ``params`` for ``plan`` (``read_plan``) checked, or the
    StarscanError that refuses it. The scanner caps are admission's, checked under its lock."""
    admission.check_identity(plan, text(params, "user"), text(params, "passwd"), client)
    database, table = text(params, "database"), text(params, "table")
    if (database and database != plan.database) or (table and table != plan.table):
        raise InvalidArgument(f"the plan is for {plan.database}.{plan.table}, not {database}.{table}")
    tablet_ids = list(params.tablet_ids or [])
    if not tablet_ids:
        raise InvalidArgument("tablet_ids is empty")
    if len(tablet_ids) > settings.max_tablets_per_scanner:
        raise InvalidArgument(
            f"{len(tablet_ids)} tablet_ids in one open_scanner, more than max_tablets_per_scanner="
            f"{settings.max_tablets_per_scanner}: split them over several scanners")
    plan_tablets = planned_tablets(plan, tablet_lists, warehouse)
    planned = {t.tablet_id for t in plan_tablets}
    for tid in tablet_ids:
        if tid not in planned:
            raise NotFound(f"tablet_id: {tid} not found")
    assert params.batch_size is not None  # read_plan refused a request without one
    return CheckedOpen(
        plan=plan, plan_tablets=plan_tablets, tablet_ids=list(dict.fromkeys(tablet_ids)),
        batch_size=params.batch_size, ordered=params.wants(ORDERED_PROPERTY) or always_ordered,
        report_rows=params.wants(EOS_ROWS_PROPERTY), mem_limit=params.mem_limit, query_timeout=params.query_timeout,
        arrow_types=params.wants(ARROW_TYPES_PROPERTY))

"""What a reader asks ``open_scanner`` for, whatever its wire: the one input of
``ScanService.open``. Each front builds it from its own wire (the Thrift handler from
``TScanOpenParams``, the Flight front from its ticket, a resumed scan from its record), so
the scan core never sees a wire's structs. The fields keep the external scan protocol's
names; text fields are as the wire gave them (thriftpy2 hands over text that is not UTF-8 as
bytes: the checks refuse it, naming the field)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starscan.core.protocol_extensions import asked

Text = str | bytes | None


@dataclass(frozen=True)
class OpenRequest:
    opaqued_query_plan: Text            # the FE's signed plan
    tablet_ids: list[int] | None        # the plan's tablets this scanner reads
    batch_size: int | None              # rows per get_next reply, at most
    properties: dict[Any, Any] = field(default_factory=dict)  # the reader's wishes (protocol_extensions)
    user: Text = None
    passwd: Text = None
    database: Text = None               # must name the plan's table, when set
    table: Text = None
    cluster: Text = None
    keep_alive_min: int | None = None   # idle minutes before the scanner is reaped (the server's default: unset)
    query_timeout: int | None = None
    mem_limit: int | None = None

    @classmethod
    def of_thrift(cls, params: Any) -> OpenRequest:
        """The request a ``TScanOpenParams`` makes (unset fields: unset)."""
        return cls(opaqued_query_plan=params.opaqued_query_plan, tablet_ids=params.tablet_ids,
                   batch_size=params.batch_size, properties=dict(params.properties or {}), user=params.user,
                   passwd=params.passwd, database=params.database, table=params.table, cluster=params.cluster,
                   keep_alive_min=params.keep_alive_min, query_timeout=params.query_timeout,
                   mem_limit=params.mem_limit)

    def wants(self, name: str) -> bool:
        """A ``"true"`` property (protocol_extensions)."""
        return asked(self.properties, name)

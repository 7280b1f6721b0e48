"""A Flight SQL statement's answer (the statement service's) as its result schema and
endpoints (docs/flight-sql.md).

* A plain single-table SELECT without LIMIT is a tablet-parallel scan: its tablets become
  endpoints, one or more per BE's tablets, each ticket the signed plan and the group's
  tablets. An endpoint's locations are every BE that holds its tablets (a client that loses
  one tries the next), or the FE itself when it relays the BEs' streams (``flight_proxy``).
* Every other answer (a query Spark SQL runs, a scan with a LIMIT, SHOW/DESC,
  information_schema) is one endpoint at the FE, whose ticket names the statement: the FE
  streams its rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from starscan.flight import tickets
from starscan.planner.statements import Answer, ScanAnswer, StatementService
from starscan.plans import codec as plan_codec
from starscan.settings.config import Settings


@dataclass(frozen=True)
class Endpoint:
    ticket: bytes
    locations: list[str]     # Flight URIs; empty: the FE that answered GetFlightInfo


@dataclass(frozen=True)
class Planned:
    schema: pa.Schema
    endpoints: list[Endpoint]
    rows: int = -1


def planned(answer: Answer, service: StatementService, settings: Settings, signer: plan_codec.Signer, fe_uri: str,
            user: str, sql: str, database: str | None) -> Planned:
    """The schema and endpoints of ``answer`` (to ``sql`` of ``user``)."""
    schema = service.schema(answer)
    if not isinstance(answer, ScanAnswer) or answer.limit is not None:
        ticket = tickets.encode(tickets.query_ticket(user, sql, database), signer)
        return Planned(schema, [Endpoint(ticket, [])])
    plan = answer.plan
    if not plan.encoded:
        return Planned(schema, [], 0)
    uris = service.reads.flight_uris()
    endpoints = []
    for scan in service.reads.tickets_of(plan.encoded, plan.routings, settings.flight_endpoints_per_be):
        locations = [fe_uri] if settings.flight_proxy else [uris[r] for r in scan.routings if r in uris]
        endpoints.append(Endpoint(tickets.encode(scan, signer), locations))
    return Planned(schema, endpoints)

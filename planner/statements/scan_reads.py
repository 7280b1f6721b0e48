"""A planned scan's rows read on the FE: each group of tablets from the first of its BEs that
answers (the plan's BEs for them first, then the other live BEs, the rest last), over the
BEs' Flight ports; a node that is its FE's BE too reads its own tablets in its process.

Used where the FE itself hands a scan's rows on: the MySQL port's plain SELECTs and Flight
SQL's proxy (``flight_proxy``). The rows are those every reader of the plan gets: the BE's
scan core reads them, with its engine choice."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.flight as flight

from starscan.flight import tickets
from starscan.planner.be_membership import BeMembership
from starscan.planner.statements import relay
from starscan.plans import codec as plan_codec
from starscan.settings.runtime import LiveSettings

SCAN_BATCH_ROWS = 65_536   # rows per record batch of a scan's stream

Batches = tuple[pa.Schema, Iterator[pa.RecordBatch]]


class ScanReads:
    def __init__(self, live: LiveSettings, signer: plan_codec.Signer, membership: BeMembership | None,
                 client_options: dict | None = None):
        self.live = live
        self.signer = signer
        self.membership = membership
        self.client_options = client_options or {}  # the FE's Flight client of the BEs (TLS)
        # A node that is this FE's BE too (--role all): its routing, and its Flight front's
        # rows of a ticket read in this process (set by the node's wiring).
        self.local_be: Callable[[], str | None] = lambda: None
        self.local_batches: Callable[[tickets.ScanTicket, str], Batches] | None = None

    def scheme(self) -> str:
        return "grpc+tls" if self.live.current.flight_tls else "grpc"

    def flight_uris(self) -> dict[str, str]:
        """Each BE's Thrift address (a plan's routing) -> its Flight URI."""
        return {be: f"{self.scheme()}://{uri}" for be, uri in self.live.current.flight_routes.items()}

    def tickets_of(self, encoded: str, routings: dict[int, list[str]], per_be: int) -> list[tickets.ScanTicket]:
        """The plan's tablets as tickets: its tablets grouped by their BEs, each group cut into
        at most ``per_be`` tickets."""
        by_be: dict[tuple[str, ...], list[int]] = {}
        for tablet_id, tablet_bes in routings.items():
            by_be.setdefault(tuple(tablet_bes), []).append(int(tablet_id))
        out = []
        for bes, tablet_ids in by_be.items():
            tablet_ids.sort()
            size = max(1, math.ceil(len(tablet_ids) / per_be))
            for start in range(0, len(tablet_ids), size):
                out.append(tickets.ScanTicket(encoded, tuple(tablet_ids[start:start + size]), SCAN_BATCH_ROWS,
                                              routings=bes))
        return out

    def order(self, routings: Sequence[str]) -> list[str]:
        """The BEs to try for tablets planned on ``routings``: those first (when live), then
        the other live BEs, the rest last."""
        routes = self.live.current.flight_routes
        live = self.membership.live() if self.membership is not None else tuple(routes)
        preferred = [be for be in routings if be in routes and be in live]
        return preferred + [be for be in routes if be in live and be not in preferred] + \
            [be for be in routes if be not in live]

    def read(self, ticket: tickets.ScanTicket, client: str) -> Batches:
        """The ticket's rows, from this node's own BE when it is the first to try, else from
        the first BE that answers (going on from the next when one is lost on the way)."""
        order = self.order(ticket.routings)
        own = self.local_be()
        if own is not None and order and own == order[0] and self.local_batches is not None:
            return self.local_batches(ticket, client)
        uris = self.flight_uris()
        # Rows in a fixed order, so that a BE lost on the way is replaced by the next (relay.py).
        ordered = flight.Ticket(tickets.encode(dataclasses.replace(ticket, ordered=True), self.signer))
        return relay.relay([(be, uris[be]) for be in order], ordered, self.client_options)

    def can_read(self) -> bool:
        """Whether every BE's rows can be read here: each routing has a Flight address with a
        port (``be_flight_endpoints``, or this node's bound ``be_flight_port``)."""
        settings = self.live.current
        routes = settings.flight_routes
        return all(be in routes and routes[be].rsplit(":", 1)[-1] not in ("0", "-1") for be in settings.routings)

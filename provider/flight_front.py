"""The BE's Arrow Flight front (``be_flight_port``, StarRocks' BE arrow_flight_port): ``DoGet``
of a ticket the FE's Flight SQL front issued (starscan.flight.tickets) streams the ticket's
tablets from the scan core, Spark's values in Arrow's own types (docs/flight-sql.md).

The front adds no scheduling, no checks and no counting of its own: it opens a scanner on
``ScanService`` as a Thrift reader's open_scanner does (the plan's signature and expiry, its
user's grant, the tablets, the scanner caps, the queue's memory limit, the audit line; the
metrics and profile, by the service's observer), asks
for Arrow's own types (``ARROW_TYPES_PROPERTY``), reads it to the end through the same
offset protocol, and closes it, also when the client goes away. gRPC's flow control is the
back-pressure: a batch is taken from the scan's queue only when the client takes the last.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.flight as flight

from starscan.arrow.wire import IpcStream
from starscan.core.errors import InvalidArgument
from starscan.core.protocol_extensions import ARROW_TYPES_PROPERTY, ORDERED_PROPERTY
from starscan.flight import tickets
from starscan.flight.errors import as_flight, to_flight
from starscan.plans.codec import Signer
from starscan.provider.open_request import OpenRequest
from starscan.provider.service import ScanService
from starscan.security.tls import FlightTls

log = logging.getLogger("starscan.provider")


class BeFlightServer(flight.FlightServerBase):
    def __init__(self, location: str, service: ScanService, signer: Signer, tls: FlightTls | None = None):
        super().__init__(location, **(tls.server_options() if tls is not None else {}))
        self.service = service
        self.signer = signer

    def do_get(self, context, ticket):
        try:
            found = tickets.decode(ticket.ticket, self.signer)
            if not isinstance(found, tickets.ScanTicket):
                raise InvalidArgument("this ticket is answered by the FE (its location in the endpoint), not a BE")
            return self.stream(found, context.peer())
        except Exception as exc:  # noqa: BLE001 - every failure becomes a gRPC status
            raise to_flight(exc) from None

    def stream(self, ticket: tickets.ScanTicket, client: str) -> flight.FlightDataStream:
        """The ticket's rows as a Flight stream."""
        schema, batches = self.batches(ticket, client)
        return flight.GeneratorStream(schema, as_flight(batches))

    def batches(self, ticket: tickets.ScanTicket, client: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The ticket's rows, their schema then their batches (also what the FE reads of a
        node that is FE and BE at once: its own tablets read in its own process)."""
        properties = {ARROW_TYPES_PROPERTY: "true"}
        if ticket.ordered:  # the FE's proxy, which can then go on from another BE
            properties[ORDERED_PROPERTY] = "true"
        request = OpenRequest(opaqued_query_plan=ticket.plan, tablet_ids=list(ticket.tablet_ids),
                              batch_size=ticket.batch_rows, properties=properties)
        opened = self.service.open(request, client=client)
        if opened.error is not None:
            self.service.close(opened.context_id)
            raise opened.error
        first = None
        if opened.schema is not None:
            schema = opened.schema
        else:  # answered from the result cache: its replies carry their schema
            first = self.service.next(opened.context_id, 0)
            schema = _schema_of(first.rows) if first.rows is not None else pa.schema([])
        return schema, _batches(self.service, opened.context_id, schema, first)


def _batches(service: ScanService, context_id: str, schema: pa.Schema, first) -> Iterator[pa.RecordBatch]:
    """The scanner's rows to its eos; the scanner is closed whatever ends the stream (the
    end, an error, the client gone: gRPC then stops pulling and the generator is closed)."""
    offset = 0
    try:
        while True:
            result, first = (first, None) if first is not None else (service.next(context_id, offset, as_batch=True), None)
            if result.eos:
                return
            batches = [result.batch] if result.batch is not None else \
                _record_batches(result.rows, schema) if result.rows is not None else []  # a reply of the result cache
            if not batches:
                return
            for batch in batches:
                offset += batch.num_rows
                yield batch
    finally:
        service.close(context_id)


def _record_batches(rows: bytes | IpcStream, schema: pa.Schema) -> list[pa.RecordBatch]:
    if isinstance(rows, IpcStream):  # schema message, one batch, end marker: the batch read in place
        return [pa.ipc.read_record_batch(pa.py_buffer(rows.parts[1]), schema)]
    return list(pa.ipc.open_stream(pa.py_buffer(rows)))


def _schema_of(rows: bytes | IpcStream) -> pa.Schema:
    return pa.ipc.open_stream(pa.py_buffer(bytes(rows))).schema

"""The FE's reader of a scan ticket: the ticket's rows read from the first of its BEs that
answers, for the MySQL port's plain SELECTs and for Flight SQL's proxy (``flight_proxy``,
StarRocks' arrow_flight_proxy: streamed on to a client that cannot reach the BEs itself).

A BE lost in the middle of the stream does not end it: the proxy asks every BE for the rows
in a fixed order (the ticket's ``ordered``, the scan protocol's ``ORDERED_PROPERTY``: the
order depends only on the plan and its tablets, so every BE of the deployment sends the
same rows in the same order), and when the BE it reads from goes away it redeems the ticket
at the next BE, skips the rows it has already sent and goes on. The client sees one stream,
every row once (as the bundled Thrift client's failover does, docs/scaling.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.flight as flight

from starscan.core.errors import NoLiveBackend, NotFound

log = logging.getLogger("starscan.planner")


def relay(bes: Sequence[tuple[str, str]], ticket: flight.Ticket,
          options: dict) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The ticket's rows (their schema, then their batches) from the first of ``bes``
    ((name, Flight URI), in the order to try) that answers, going on from the next ones if
    that BE is lost on the way. Closing the batches' generator closes the BE's stream."""
    failures: list[str] = []
    for i, (be, uri) in enumerate(bes):
        opened = _open(be, uri, ticket, options, failures)
        if opened is not None:
            client, reader = opened
            return reader.schema, _relayed(bes[i + 1:], ticket, options, client, reader, failures)
    raise NotFound(f"no BE answered for the ticket's tablets: {'; '.join(failures)}")


def _open(be: str, uri: str, ticket: flight.Ticket, options: dict,
          failures: list[str]) -> tuple[flight.FlightClient, flight.FlightStreamReader] | None:
    """The BE's stream of the ticket, its schema read; None (the reason kept) when the BE
    cannot be reached."""
    client = flight.connect(uri, **options)
    try:
        reader = client.do_get(ticket)
        reader.schema  # noqa: B018 - the first message: the BE has opened the scan
    except flight.FlightUnavailableError as exc:
        client.close()
        log.info("the BE at %s cannot be reached over Flight: %s", be, exc)
        failures.append(f"{be} cannot be reached")
        return None
    except BaseException:
        client.close()
        raise
    return client, reader


def _relayed(rest: Sequence[tuple[str, str]], ticket: flight.Ticket, options: dict, client: flight.FlightClient,
             reader: flight.FlightStreamReader, failures: list[str]) -> Iterator[pa.RecordBatch]:
    sent = 0   # rows handed on to the client
    skip = 0   # rows of the current BE's stream that the client already has
    while True:
        try:
            try:
                for chunk in reader:
                    batch = chunk.data
                    if skip:
                        if batch.num_rows <= skip:
                            skip -= batch.num_rows
                            continue
                        batch, skip = batch.slice(skip), 0
                    sent += batch.num_rows
                    yield batch
                return
            finally:
                client.close()
        except flight.FlightUnavailableError as exc:
            log.info("the BE stream of a ticket was lost after %d rows: %s", sent, exc)
            failures.append(f"lost after {sent} rows")
        opened = None
        while opened is None and rest:
            (be, uri), rest = rest[0], rest[1:]
            opened = _open(be, uri, ticket, options, failures)
            if opened is not None:
                log.warning("flight proxy: the BE of a stream was lost after %d rows; going on from %s", sent, be)
        if opened is None:
            raise NoLiveBackend(f"the BE streaming this ticket was lost and no other BE answered: {'; '.join(failures)}")
        client, reader = opened
        skip = sent

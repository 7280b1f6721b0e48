"""The thriftpy2 handler: methods match the IDL and delegate to ScanService.

Nothing raises into thriftpy2 (an undeclared exception drops the connection): every
outcome is a TStatus in the reply.
"""

from __future__ import annotations

import logging

from starscan.core.protocol_extensions import EOS_ROWS_PREFIX, ERROR_KIND_PROPERTY, ORDERED_ACK, ORDERED_PROPERTY
from starscan.core.thrift_defs import wire
from starscan.provider.open_request import OpenRequest
from starscan.provider.service import ScanService
from starscan.thrift import status
from starscan.thrift.peer import current_peer, named_context

log = logging.getLogger("starscan.provider")


class ExternalServiceHandler:
    def __init__(self, service: ScanService):
        self.service = service

    # A call without its params struct reads as one with every field unset, as the BE's C++
    # default-constructed struct does.

    def open_scanner(self, params):
        params = params if params is not None else wire.TScanOpenParams()
        request = OpenRequest.of_thrift(params)
        kinds = request.wants(ERROR_KIND_PROPERTY)
        try:
            result = self.service.open(request, client=current_peer())
        except Exception as exc:  # pragma: no cover - service.open already catches
            log.exception("open_scanner")
            return wire.TScanOpenResult(status=status.from_error(exc, kinds), context_id="", selected_columns=[])
        named_context(result.context_id)
        columns = [wire.TScanColumnDesc(name=n, type=t) for n, t in result.columns]
        st = status.ok() if result.error is None else status.from_error(result.error, kinds)
        if result.error is None and request.wants(ORDERED_PROPERTY):
            st.error_msgs = [ORDERED_ACK]  # the rows come in a fixed order (protocol_extensions)
        return wire.TScanOpenResult(status=st, context_id=result.context_id, selected_columns=columns)

    def get_next(self, params):
        params = params if params is not None else wire.TScanNextBatchParams()
        named_context(params.context_id if isinstance(params.context_id, str) else None)
        try:
            result = self.service.next(params.context_id, params.offset)
        except Exception as exc:
            if not hasattr(exc, "status_code"):
                log.exception("get_next")
            return wire.TScanBatchResult(status=status.from_error(exc, self.service.reports_error_kinds(params.context_id)))
        st = status.ok()
        if result.rows_total is not None:  # opt-in row count at eos (service.EOS_ROWS_PROPERTY)
            st.error_msgs = [f"{EOS_ROWS_PREFIX}{result.rows_total}"]
        return wire.TScanBatchResult(status=st, eos=result.eos, rows=result.rows)

    def close_scanner(self, params):
        params = params if params is not None else wire.TScanCloseParams()
        try:
            self.service.close(params.context_id)
        except Exception:
            log.exception("close_scanner")
        return wire.TScanCloseResult(status=status.ok())

"""starscan's opt-in additions to the StarRocks scan protocol, shared by the BE and clients.

End-of-scan integrity (docs/operations.md "End-of-scan row count"): a client that sends
``EOS_ROWS_PROPERTY`` = ``"true"`` in open_scanner's ``properties`` gets the eos reply's OK
status with one ``error_msgs`` entry ``starscan:rows=<N>``, N = the rows the scan produced.
StarRocks' clients never send it, and its Java clients ignore ``error_msgs`` on OK anyway;
without it the eos reply is StarRocks' own.

Rows in a fixed order (docs/operations.md, docs/scaling.md "Failover"): a client that sends
``ORDERED_PROPERTY`` = ``"true"`` gets the scan's rows in an order that depends only on the
plan, the tablets and the engine: the scanner reads its splits one at a time, in split
order, each from its start to its end. Two BEs of one deployment then send the same rows in
the same order, so a client whose BE was lost can open the scanner on another and skip the
rows it already has. It costs the scanner its parallel tasks. The BE says it honours the
property: the open reply's OK status carries ``ORDERED_ACK`` in ``error_msgs``. A server that
does not (StarRocks ignores ``properties``) gives no order a client may rely on, so a client
must not resume by skipping rows there.

Error kinds (``StarscanError.kind``): an HTTP error answer names its kind in the
``X-Starscan-Error`` header; a client that sends ``ERROR_KIND_PROPERTY`` = ``"true"`` in
open_scanner's ``properties`` gets, in every error status of that scanner (open_scanner,
and get_next while the BE holds the scanner), one more ``error_msgs`` entry
``starscan:error=<Kind>`` after the message. StarRocks' readers send neither and see
StarRocks' own shapes.
"""

from __future__ import annotations

from typing import Any


def asked(properties: dict[Any, Any] | None, name: str) -> bool:
    """Whether an open_scanner's ``properties`` ask for the extension ``name`` (``"true"``)."""
    return str((properties or {}).get(name, "")).lower() == "true"


EOS_ROWS_PROPERTY = "starscan.eos_row_count"
EOS_ROWS_PREFIX = "starscan:rows="
ORDERED_PROPERTY = "starscan.ordered"
ORDERED_ACK = "starscan:ordered"

# Arrow's own types (docs/flight-sql.md): a scanner opened with ``ARROW_TYPES_PROPERTY`` =
# ``"true"`` sends Spark SQL's values in Arrow's types (date32, timestamps, decimal128, nested
# types as they are) instead of StarRocks' wire forms (dates and datetimes as text). The
# BE's Arrow Flight SQL front opens its scans so.
ARROW_TYPES_PROPERTY = "starscan.arrow_types"

ERROR_KIND_HEADER = "X-Starscan-Error"
ERROR_KIND_PROPERTY = "starscan.error_kind"
ERROR_KIND_PREFIX = "starscan:error="

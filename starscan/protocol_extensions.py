"""starscan's opt-in additions to the StarRocks scan protocol, shared by the BE and clients.

End-of-scan integrity (docs/operations.md "End-of-scan row count"): a client that sends
``EOS_ROWS_PROPERTY`` = ``"true"`` in open_scanner's ``properties`` gets the eos reply's OK
status with one ``error_msgs`` entry ``starscan:rows=<N>``, N = the rows the scan produced.
StarRocks' clients never send it, and its Java clients ignore ``error_msgs`` on OK anyway;
without it the eos reply is StarRocks' own.
"""

EOS_ROWS_PROPERTY = "starscan.eos_row_count"
EOS_ROWS_PREFIX = "starscan:rows="

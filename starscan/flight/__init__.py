"""Arrow Flight SQL's messages (``flight_sql_pb2``, generated from idl/flight_sql.proto) and
the tickets starscan's FE hands out and its BEs and FE redeem (``tickets``): what both
sides of the Flight SQL front share (docs/flight-sql.md)."""

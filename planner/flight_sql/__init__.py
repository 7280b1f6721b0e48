"""The FE's Arrow Flight SQL front (``flight_sql_port``, StarRocks' arrow_flight_port): the
way ADBC, the Flight SQL JDBC driver and polars read starscan (docs/flight-sql.md).

``server`` answers Flight SQL's RPCs, ``auth`` says who calls (Basic, then a bearer token;
JWTs as on the HTTP port), ``statements`` turns a statement into endpoints (tablet-parallel
scans on the BEs, or a query the FE answers on Spark SQL), ``catalog`` answers the metadata
commands and SHOW/DESC."""

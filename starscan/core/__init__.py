"""The bottom layer: what every other part of starscan shares and that depends on nothing of
starscan's own: the error tree and its wire codes (``errors``), the column types of a
plan's Spark schema (``sql_types``), the Thrift IDL as loaded once (``thrift_defs``) and the
protocol fields starscan adds to StarRocks' (``protocol_extensions``). No Spark here."""

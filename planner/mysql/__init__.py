"""The FE's MySQL protocol port (``query_port``, StarRocks' 9030), built on mysql-mimic.

It answers what StarRocks clients ask over MySQL — the Spark connector's and Trino's
information_schema queries, JDBC connect-time chatter, SHOW/DESC/USE — and
SELECT queries, run on Spark with a row limit. Everything else is a MySQL error and
the connection stays usable.
"""

from starscan.planner.mysql.port import MysqlPort

__all__ = ["MysqlPort"]

"""Server variables a MySQL client reads on connect, with StarRocks' values."""

from __future__ import annotations

from mysql_mimic.variables import SYSTEM_VARIABLES, GlobalVariables

from starscan import __version__

# StarRocks 3.x answers version() / the handshake with a MySQL 8 version and names itself
# in version_comment (select @@version_comment, current_version()).
MYSQL_VERSION = "8.0.33"
STARROCKS_VERSION = "3.3.0"
VERSION_COMMENT = f"StarRocks version {STARROCKS_VERSION} (starscan {__version__})"


def global_variables(time_zone: str) -> GlobalVariables:
    schema = dict(SYSTEM_VARIABLES)
    schema.update({
        # name: (type, default, settable in a session)
        "version": (str, MYSQL_VERSION, False),
        "version_comment": (str, VERSION_COMMENT, False),
        "default_storage_engine": (str, "StarRocks", True),
        "default_tmp_storage_engine": (str, "StarRocks", True),
        "sql_mode": (str, "ONLY_FULL_GROUP_BY", True),
        "transaction_isolation": (str, "REPEATABLE-READ", True),
        "tx_isolation": (str, "REPEATABLE-READ", True),
        "tx_read_only": (bool, False, True),
        "query_cache_size": (int, 1048576, False),
        "query_cache_type": (int, 0, True),
        "have_query_cache": (str, "YES", False),
        "character_set_system": (str, "utf8", False),
        "language": (str, "/starrocks/share/english/", False),
        "license": (str, "Apache License 2.0", False),
        "query_timeout": (int, 300, True),
        "query_mem_limit": (int, 0, True),
        "net_read_timeout": (int, 60, True),
        "div_precision_increment": (int, 4, True),
        "lower_case_table_names": (int, 0, False),
        "system_time_zone": (str, time_zone, False),
        "time_zone": (str, time_zone, True),
        "init_connect": (str, "", False),
        "storage_engine": (str, "StarRocks", True),
        "character_set_filesystem": (str, "binary", False),
    })
    return GlobalVariables(schema)

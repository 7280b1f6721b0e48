"""SHOW and DESC, answered from what one user may see (``CatalogView``), as StarRocks answers
them: SHOW DATABASES / TABLES / [FULL] COLUMNS / CREATE TABLE, DESC, and the few fixed
answers clients ask for on connect (ENGINES, CHARSET, COLLATION, GRANTS, PROCESSLIST,
INDEX). One answer for every SQL door; the session's own (VARIABLES, STATUS, WARNINGS,
ERRORS) are the MySQL door's."""

from __future__ import annotations

import re

import pyarrow as pa
from sqlglot import exp
from sqlglot.executor import Table, execute

from starscan.core.errors import BadRequest, NoDatabaseSelected, TableNotFound
from starscan.planner.statements.catalog_view import INFORMATION_SCHEMA, CatalogView, describe
from starscan.security.users import GRANT_PREFIX

# What a SHOW of each kind answers without the catalog.
_FIXED: dict[str, tuple[list[tuple], list[str]]] = {
    "ENGINES": ([("StarRocks", "YES", "Default storage engine of StarRocks", "NO", "NO", "NO")],
                ["Engine", "Support", "Comment", "Transactions", "XA", "Savepoints"]),
    "CHARSET": ([("utf8", "UTF-8 Unicode", "utf8_general_ci", 3)], ["Charset", "Description", "Default collation", "Maxlen"]),
    "COLLATION": ([("utf8_general_ci", "utf8", 33, "Yes", "Yes", 1)],
                  ["Collation", "Charset", "Id", "Default", "Compiled", "Sortlen"]),
    "PROCESSLIST": ([], ["Id", "User", "Host", "db", "Command", "Time", "State", "Info"]),
    "INDEX": ([], ["Table", "Non_unique", "Key_name", "Seq_in_index", "Column_name"]),
    "KEYS": ([], ["Table", "Non_unique", "Key_name", "Seq_in_index", "Column_name"]),
}
# MySQL's (and StarRocks') SHOW TABLE STATUS columns.
TABLE_STATUS = ["Name", "Engine", "Version", "Row_format", "Rows", "Avg_row_length", "Data_length", "Max_data_length",
                "Index_length", "Data_free", "Auto_increment", "Create_time", "Update_time", "Check_time", "Collation",
                "Checksum", "Create_options", "Comment"]
SESSION_KINDS = frozenset({"VARIABLES", "STATUS", "WARNINGS", "ERRORS"})


def answer(show: exp.Show, database: str | None, view: CatalogView, info_schema_tables: list[str]) -> pa.Table:
    """The rows of ``show`` for ``view``'s user; ``database``: the current one. A ``WHERE``
    filters them as MySQL's does, on the answer's own columns."""
    rows = _answer(show, database, view, info_schema_tables)
    where = show.args.get("where")
    return rows if where is None else _filtered(rows, where)


def _filtered(rows: pa.Table, where: exp.Where) -> pa.Table:
    names = {name.lower(): name for name in rows.column_names}
    condition = where.this.copy()
    for column in condition.find_all(exp.Column):
        if column.name.lower() not in names:
            raise BadRequest(f"Unknown column '{column.name}' in 'where clause'")
        column.replace(exp.column(f"c{rows.column_names.index(names[column.name.lower()])}"))
    data = Table(tuple(f"c{i}" for i in range(rows.num_columns)), rows=[tuple(r.values()) for r in rows.to_pylist()])
    query = exp.select("*").from_("shown").where(condition)
    kept = execute(query, tables={"shown": data}).rows
    return table(list(kept), rows.column_names)


def _answer(show: exp.Show, database: str | None, view: CatalogView, info_schema_tables: list[str]) -> pa.Table:
    kind = show.name.upper()
    if kind == "DATABASES":
        names = [INFORMATION_SCHEMA] + view.databases()
        return table([(n,) for n in names if like(show, n)], ["Database"])
    if kind == "TABLES":
        db = show.text("db") or database
        if not db:
            raise NoDatabaseSelected("No database selected: SHOW TABLES FROM db")
        names = info_schema_tables if db.lower() == INFORMATION_SCHEMA else _tables_of(db, view)
        full = bool(show.args.get("full"))
        rows: list[tuple] = [(n, "BASE TABLE") if full else (n,) for n in names if like(show, n)]
        return table(rows, [f"Tables_in_{db}"] + (["Table_type"] if full else []))
    if kind == "COLUMNS":
        db, name = visible_table(show.text("db") or database, show.text("target"), view)
        return table(*describe([c for c in view.columns(db, name) if like(show, c.name)], bool(show.args.get("full"))))
    if kind == "CREATE TABLE":
        db, name = visible_table(show.text("db") or database, show.text("target"), view)
        return table([(name, create_table(view, db, name))], ["Table", "Create Table"])
    if kind == "TABLE STATUS":
        db = show.text("db") or database
        if not db:
            raise NoDatabaseSelected("No database selected: SHOW TABLE STATUS FROM db")
        names = info_schema_tables if db.lower() == INFORMATION_SCHEMA else _tables_of(db, view)
        return table([(n, "StarRocks") + (None,) * 12 + ("utf8_general_ci", None, "", "") for n in names
                      if like(show, n)], TABLE_STATUS)
    if kind == "GRANTS":
        return table([(_grant_statement(g, view.user),) for g in view.grants()], [f"Grants for {view.user}@%"])
    if kind in _FIXED:
        return table(*_FIXED[kind])
    raise BadRequest(f"SHOW {kind} is not supported by starscan")


def _tables_of(db: str, view: CatalogView) -> list[str]:
    view.require_database(db)
    return view.tables(db)


def describe_table(target: exp.Expression, database: str | None, view: CatalogView) -> pa.Table:
    """DESC [db.]table."""
    if not isinstance(target, exp.Table):
        raise BadRequest("DESC takes a table: DESC db.table (EXPLAIN is not supported by starscan)")
    db, name = visible_table(target.text("db") or database, target.name, view)
    return table(*describe(view.columns(db, name)))


def visible_table(db: str | None, name: str, view: CatalogView) -> tuple[str, str]:
    """``db`` and ``name`` when the user may see the table; a table without a grant reads as
    missing (grants hide tables)."""
    if not db:
        raise NoDatabaseSelected("No database selected: name the table as db.table")
    if not name:
        raise BadRequest("Table name is missing")
    if not (view.can_select(db, name) and view.warehouse.has_table(db, name)):
        raise TableNotFound(f"{db}.{name}")
    return db, name


def create_table(view: CatalogView, db: str, name: str) -> str:
    snap = view.warehouse.snapshot(db, name)
    lines = [f"  `{c.name}` {c.column_type} {'NULL' if c.nullable else 'NOT NULL'} COMMENT {_quote(c.comment)}"
             for c in view.columns(db, name)]
    ddl = f"CREATE TABLE `{name}` (\n" + ",\n".join(lines) + "\n) ENGINE=StarRocks"
    if snap.partition_columns:
        ddl += "\nPARTITION BY (" + ", ".join(f"`{c}`" for c in snap.partition_columns) + ")"
    ddl += (f"\nCOMMENT {_quote('Parquet table served by starscan')}"
            f"\nPROPERTIES (\n\"starscan.version\" = \"{snap.version}\",\n\"starscan.tables.tablets\" = \"{len(snap.tablets)}\"\n);")
    return ddl


def table(rows: list[tuple], header: list[str]) -> pa.Table:
    """Rows as an Arrow table: each column's type from its values (text when all are null)."""
    columns = []
    for i in range(len(header)):
        array = pa.array([row[i] for row in rows])
        columns.append(array.cast(pa.utf8()) if pa.types.is_null(array.type) else array)
    return pa.Table.from_arrays(columns, names=list(header))


def like(show: exp.Show, value: str) -> bool:
    """SHOW's ``LIKE 'pattern'``: MySQL's LIKE, case-insensitive (names)."""
    return like_pattern(show.text("like") or None, value, case_sensitive=False)


def like_pattern(pattern: str | None, value: str, case_sensitive: bool = True) -> bool:
    """SQL LIKE (``%``, ``_``, ``\\`` escapes); no pattern matches everything."""
    if pattern is None:
        return True
    regex, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            regex.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        regex.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    flags = re.DOTALL if case_sensitive else re.IGNORECASE | re.DOTALL
    return re.fullmatch("".join(regex), value, flags) is not None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _grant_statement(grant: str, user: str) -> str:
    """A users-file grant as StarRocks' SHOW GRANTS writes one (DIRECT_READ is starscan's own)."""
    if grant.startswith(GRANT_PREFIX):
        return f"GRANT DIRECT_READ ON {grant[len(GRANT_PREFIX):]} TO '{user}'@'%'"
    return f"GRANT SELECT ON {grant} TO '{user}'@'%'"

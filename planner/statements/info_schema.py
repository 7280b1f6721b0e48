"""information_schema.SCHEMATA / TABLES / COLUMNS as StarRocks fills them, for one user,
queried with sqlglot's executor (any projection, WHERE, ORDER BY a client sends).

Only the rows a query can need are built: equality and IN constraints on TABLE_SCHEMA /
SCHEMA_NAME and TABLE_NAME at the top of the WHERE clause limit which tables are described
(describing a table reads its schema through Spark). Column names are case-insensitive and
come back as the client wrote them (``COLUMN_NAME`` stays ``COLUMN_NAME``).
"""

from __future__ import annotations

from mysql_mimic.constants import INFO_SCHEMA as MIMIC_INFO_SCHEMA
from sqlglot import exp
from sqlglot.executor import Table, execute

from starscan.core.errors import BadRequest
from starscan.planner.statements.catalog_view import INFORMATION_SCHEMA, CatalogView

_TEXT, _INT = "TEXT", "BIGINT"

# StarRocks' column lists (be/src/exec/schema_scanner), in order.
SCHEMATA = [("CATALOG_NAME", _TEXT), ("SCHEMA_NAME", _TEXT), ("DEFAULT_CHARACTER_SET_NAME", _TEXT),
            ("DEFAULT_COLLATION_NAME", _TEXT), ("SQL_PATH", _TEXT)]
TABLES = [("TABLE_CATALOG", _TEXT), ("TABLE_SCHEMA", _TEXT), ("TABLE_NAME", _TEXT), ("TABLE_TYPE", _TEXT),
          ("ENGINE", _TEXT), ("VERSION", _INT), ("ROW_FORMAT", _TEXT), ("TABLE_ROWS", _INT),
          ("AVG_ROW_LENGTH", _INT), ("DATA_LENGTH", _INT), ("MAX_DATA_LENGTH", _INT), ("INDEX_LENGTH", _INT),
          ("DATA_FREE", _INT), ("AUTO_INCREMENT", _INT), ("CREATE_TIME", _TEXT), ("UPDATE_TIME", _TEXT),
          ("CHECK_TIME", _TEXT), ("TABLE_COLLATION", _TEXT), ("CHECKSUM", _INT), ("CREATE_OPTIONS", _TEXT),
          ("TABLE_COMMENT", _TEXT)]
COLUMNS = [("TABLE_CATALOG", _TEXT), ("TABLE_SCHEMA", _TEXT), ("TABLE_NAME", _TEXT), ("COLUMN_NAME", _TEXT),
           ("ORDINAL_POSITION", _INT), ("COLUMN_DEFAULT", _TEXT), ("IS_NULLABLE", _TEXT), ("DATA_TYPE", _TEXT),
           ("CHARACTER_MAXIMUM_LENGTH", _INT), ("CHARACTER_OCTET_LENGTH", _INT), ("NUMERIC_PRECISION", _INT),
           ("NUMERIC_SCALE", _INT), ("DATETIME_PRECISION", _INT), ("CHARACTER_SET_NAME", _TEXT),
           ("COLLATION_NAME", _TEXT), ("COLUMN_TYPE", _TEXT), ("COLUMN_KEY", _TEXT), ("EXTRA", _TEXT),
           ("PRIVILEGES", _TEXT), ("COLUMN_COMMENT", _TEXT), ("COLUMN_SIZE", _INT), ("DECIMAL_DIGITS", _INT),
           ("GENERATION_EXPRESSION", _TEXT), ("SRS_ID", _INT)]
# MySQL 8's histograms, which readers probe for (Trino's MySQL-family connectors): none here.
COLUMN_STATISTICS = [("SCHEMA_NAME", _TEXT), ("TABLE_NAME", _TEXT), ("COLUMN_NAME", _TEXT), ("HISTOGRAM", _TEXT)]
OURS = {"schemata": SCHEMATA, "tables": TABLES, "columns": COLUMNS, "column_statistics": COLUMN_STATISTICS}


def _schema() -> dict:
    # Other information_schema tables (mysql-mimic's MySQL list) exist and are empty.
    tables = {name: dict(cols) for name, cols in MIMIC_INFO_SCHEMA[INFORMATION_SCHEMA].items()}
    for name, cols in OURS.items():
        tables[name] = {c.lower(): t for c, t in cols}
    return {INFORMATION_SCHEMA: tables}


SCHEMA = _schema()
_KNOWN_UPPER = {c.lower(): c for cols in OURS.values() for c, _ in cols}


def table_names() -> list[str]:
    """The tables of information_schema, sorted."""
    return sorted(SCHEMA[INFORMATION_SCHEMA])


def reads(expression: exp.Expression, current_db: str | None) -> bool:
    """Whether ``expression`` reads information_schema (named, or the current database)."""
    tables = [t for t in expression.find_all(exp.Table) if t.name]
    return bool(tables) and any((t.text("db") or current_db or "").lower() == INFORMATION_SCHEMA for t in tables)


def query(expression: exp.Expression, view: CatalogView) -> tuple[list[tuple], list[str]]:
    if not isinstance(expression, exp.Query):
        raise BadRequest(f"only SELECT is supported on {INFORMATION_SCHEMA}")
    expression = _normalize(expression)
    names = {t.name for t in expression.find_all(exp.Table)}
    unknown = sorted(n for n in names if n not in SCHEMA[INFORMATION_SCHEMA])
    if unknown:
        raise BadRequest(f"Unknown table '{INFORMATION_SCHEMA}.{unknown[0]}'")
    where = expression.args.get("where") if isinstance(expression, exp.Select) else None
    schemas = _constraint(where, ("table_schema", "schema_name"))
    tables = _constraint(where, ("table_name",))
    data = {name: Table(tuple(SCHEMA[INFORMATION_SCHEMA][name])) for name in SCHEMA[INFORMATION_SCHEMA]}
    dbs = [db for db in view.databases() if schemas is None or db in schemas]
    if "schemata" in names:
        for db in [INFORMATION_SCHEMA] + dbs:
            if schemas is None or db in schemas:
                data["schemata"].append(("def", db, "utf8", "utf8_general_ci", None))
    if "tables" in names or "columns" in names:
        for db in dbs:
            for name in view.tables(db):
                if tables is not None and name not in tables:
                    continue
                if "tables" in names:
                    data["tables"].append(("def", db, name, "BASE TABLE", "StarRocks", None, None, None, None, None,
                                           None, None, None, None, None, None, None, "utf8_general_ci", None, "", ""))
                if "columns" in names:
                    for c in view.columns(db, name):
                        data["columns"].append((
                            "def", db, name, c.name, c.position, None, "YES" if c.nullable else "NO", c.data_type,
                            c.column_size if c.data_type in ("varchar", "char") else None,
                            c.column_size * 3 if c.data_type in ("varchar", "char") and c.column_size else None,
                            c.column_size if c.data_type not in ("varchar", "char") else None,
                            c.decimal_digits if c.data_type not in ("varchar", "char") else None,
                            None, None, None, c.column_type, "", "", "", c.comment, c.column_size, c.decimal_digits,
                            None, None,
                        ))
    result = execute(expression, schema=SCHEMA, tables={INFORMATION_SCHEMA: data})
    columns = [_KNOWN_UPPER.get(name, name) for name in result.columns]
    return list(result.rows), columns


def _normalize(expression: exp.Expression) -> exp.Expression:
    """Lower-case column and table names (MySQL compares them case-insensitively; the
    executor does not), keep the output names as written, qualify bare tables."""
    expression = expression.copy()
    for select in list(expression.find_all(exp.Select)):
        for item in list(select.expressions):
            if isinstance(item, exp.Alias) or isinstance(item, exp.Star) or (
                    isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
                continue
            name = item.name if isinstance(item, exp.Column) else item.sql(dialect="mysql")
            item.replace(exp.alias_(item.copy(), name, quoted=True))
    for ident in list(expression.find_all(exp.Identifier)):
        if isinstance(ident.parent, (exp.Column, exp.Table)) and ident.arg_key in ("this", "db", "table"):
            ident.replace(exp.to_identifier(ident.name.lower()))
    for table in expression.find_all(exp.Table):
        if not table.args.get("db"):
            table.set("db", exp.to_identifier(INFORMATION_SCHEMA))
        elif table.text("db") != INFORMATION_SCHEMA:
            raise BadRequest("a query may not mix information_schema with other tables")
        if table.args.get("catalog") and table.text("catalog") != "def":
            raise BadRequest(f"unknown catalog {table.text('catalog')!r}")
    out = expression.transform(_mysql_coercions)
    assert isinstance(out, exp.Expression)
    return out


def _mysql_coercions(node: exp.Expression) -> exp.Expression:
    """What MySQL does that sqlglot's executor does not: a COLLATE clause names how to compare
    (gone: the executor compares as is), and UPPER / LOWER take any value as text
    (Connector/J's getColumns upper-cases a CASE that yields numbers)."""
    if isinstance(node, exp.Collate) and isinstance(node.left, exp.Expression):
        return node.left
    if isinstance(node, (exp.Upper, exp.Lower)) and not isinstance(node.this, exp.Cast):
        node.set("this", exp.cast(node.this.copy(), "text"))
    return node


def _constraint(where: exp.Where | None, columns: tuple[str, ...]) -> set[str] | None:
    """Values a top-level ``col = 'x'`` / ``col IN (...)`` conjunct allows, or None."""
    if where is None:
        return None
    allowed: set[str] | None = None
    for part in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
        values: set[str] | None = None
        if isinstance(part, exp.EQ):
            col, lit = part.this, part.expression
            if isinstance(lit, exp.Column):
                col, lit = lit, col
            if isinstance(col, exp.Column) and col.name in columns and isinstance(lit, exp.Literal) and lit.is_string:
                values = {lit.this}
        elif isinstance(part, exp.In) and isinstance(part.this, exp.Column) and part.this.name in columns:
            items = part.expressions or []
            if items and all(isinstance(v, exp.Literal) and v.is_string for v in items):
                values = {v.this for v in items}
        if values is not None:
            allowed = values if allowed is None else allowed & values
    return allowed

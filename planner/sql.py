"""Parse and check the `_query_plan` SQL with sqlglot, the way StarRocks' FE judges it.

Result: the table the SQL names, its SELECT items and WHERE predicate as ``starscan.expr``
trees. Column names are resolved against the table schema later (``analyze``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from starscan import expr as E
from starscan.core.errors import BadRequest, SqlInvalid
from starscan.expr.functions import BY_SQLGLOT_CLASS, PLAIN_CALLS, STARROCKS_SPELLINGS
from starscan.spark.types import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN

_COMPARE = {exp.EQ: "=", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.NullSafeEQ: "<=>"}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.IntDiv: "div"}
SCAN_ONLY = (exp.AggFunc, exp.Window, exp.Order, exp.Limit, exp.Offset, exp.Group, exp.Having, exp.Distinct, exp.Qualify)



@dataclass(frozen=True)
class SelectItem:
    name: str            # output name (alias, column name as written, or SQL text)
    expr: E.Expr | None  # None for `*`
    is_star: bool = False


@dataclass(frozen=True)
class ParsedQuery:
    sql: str
    db: str | None
    table: str | None
    table_alias: str | None
    items: tuple[SelectItem, ...]
    predicate: E.Expr | None


def syntax_error(exc: ParseError | TokenError) -> str:
    """Where the SQL stops parsing, in words (sqlglot's own text carries terminal colours)."""
    errors = getattr(exc, "errors", None) or []
    if errors:
        first = errors[0]
        near = (first.get("highlight") or "").strip()
        where = f" at line {first.get('line')}, column {first.get('col')}"
        return f"syntax error{where}" + (f" near '{near[:100]}'" if near else "")
    return "syntax error: a string, quoted name or comment is not closed, or a character is not SQL"


def parse(sql: str, path_db: str, path_table: str) -> ParsedQuery:
    """Steps 8-13 of docs/protocol.md 2.4 (syntax, statement kind, scan-only, one table, no
    nesting, same table as the path). Column analysis happens in ``analyze``."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="starrocks") if s is not None]
    except (ParseError, TokenError) as exc:
        raise SqlInvalid(syntax_error(exc)) from None
    except RecursionError:
        raise SqlInvalid("statement nested too deeply") from None
    if len(statements) != 1:
        raise SqlInvalid("exactly one statement is expected")
    stmt = statements[0]
    if isinstance(stmt, exp.Describe) and isinstance(stmt.this, exp.Query):
        raise BadRequest(f"only support single table filter-prune-scan, but found [ {sql}]")
    if not isinstance(stmt, exp.Select):
        raise BadRequest(f"Select statement needed, but found [{sql} ]")
    if stmt.args.get("with_") or stmt.args.get("with"):
        raise BadRequest("Select statement must not embed another statement")
    if stmt.find(*SCAN_ONLY) is not None or any(isinstance(i, exp.AggFunc) for i in stmt.expressions):
        raise BadRequest(f"only support single table filter-prune-scan, but found [ {sql}]")
    from_ = stmt.args.get("from_") or stmt.args.get("from")
    if stmt.args.get("joins") or (from_ is not None and len(from_.expressions or []) > 0):
        raise BadRequest("Select statement must have only one table")
    if from_ is None:
        # `select 1`: StarRocks plans no scan node at all.
        raise SqlInvalid("no table")
    source = from_.this
    if isinstance(source, (exp.Subquery, exp.Query)) or list(stmt.find_all(exp.Subquery)) or any(
        isinstance(n, exp.Select) and n is not stmt for n in stmt.walk()
    ):
        raise BadRequest("Select statement must not embed another statement")
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        raise SqlInvalid("the FROM clause is not a table")
    table = source.name
    db = source.db or None
    if source.catalog or not db:
        # StarRocks' HTTP planner has no current database: unqualified names do not analyze.
        raise SqlInvalid("table name must be qualified as db.table")
    if db != path_db or table != path_table:
        raise BadRequest(
            f"requested database and table must consistent with sql: request [ {path_db}.{path_table}]"
            f"and sql [{db}.{table}]"
        )
    alias = source.alias or None
    items = tuple(_select_item(i, table, alias) for i in stmt.expressions)
    where = stmt.args.get("where")
    predicate = convert(where.this, table, alias) if where is not None else None
    return ParsedQuery(sql, db, table, alias, items, predicate)


def _select_item(node: exp.Expression, table: str, alias: str | None) -> SelectItem:
    if isinstance(node, exp.Star):
        return SelectItem("*", None, is_star=True)
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
        _check_qualifier(node, table, alias)
        return SelectItem("*", None, is_star=True)
    if isinstance(node, exp.Alias):
        return SelectItem(node.alias, convert(node.this, table, alias))
    converted = convert(node, table, alias)
    name = node.name if isinstance(node, exp.Column) else node.sql(dialect="starrocks")
    return SelectItem(name, converted)


def _check_qualifier(col: exp.Column, table: str, alias: str | None) -> None:
    qualifier = col.table
    if qualifier and qualifier not in (table, alias):
        raise SqlInvalid(f"unknown table qualifier {qualifier!r}")


def _number(text: str) -> E.Expr:
    """Type a numeric literal as Spark's SQL parser does."""
    if all(ch.isdigit() for ch in text):
        value = int(text)
        if value <= INT_MAX:
            return E.literal("int", str(value))
        if value <= LONG_MAX:
            return E.literal("bigint", str(value))
        _check_decimal_digits(text)
        return E.literal("decimal", text)
    if "e" in text.lower():
        try:
            double = float(text)
        except ValueError:
            raise SqlInvalid(f"bad number {text!r}") from None
        if double in (float("inf"), float("-inf")):
            raise SqlInvalid(f"number {text} is out of the range of DOUBLE")
        return E.literal("double", repr(double))
    try:
        Decimal(text)
    except InvalidOperation:
        raise SqlInvalid(f"bad number {text!r}") from None
    _check_decimal_digits(text)
    return E.literal("decimal", text)


def _check_decimal_digits(text: str) -> None:
    digits = Decimal(text).as_tuple().digits
    if len(digits) > 38:
        raise SqlInvalid(f"number {text} has more than 38 digits")


def convert(node: exp.Expression, table: str, alias: str | None) -> E.Expr:
    """sqlglot expression -> starscan Expr. Anything outside the supported set is invalid SQL."""
    if isinstance(node, exp.Paren):
        return convert(node.this, table, alias)
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            raise SqlInvalid("`*` is only allowed as a select item")
        _check_qualifier(node, table, alias)
        return E.column(node.name)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return E.literal("string", node.this)
        return _number(str(node.this))
    if isinstance(node, exp.Boolean):
        return E.literal("boolean", "true" if node.this else "false")
    if isinstance(node, exp.Null):
        return E.literal("null", None)
    if isinstance(node, exp.Neg):
        inner = node.this
        if isinstance(inner, exp.Literal) and not inner.is_string and not str(inner.this).startswith("-"):
            return _negative_literal(str(inner.this))
        return E.op("neg", convert(inner, table, alias))
    for cls, name in _COMPARE.items():
        if type(node) is cls:
            return E.op(name, convert(node.this, table, alias), convert(node.expression, table, alias))
    for cls, name in _ARITH.items():
        if type(node) is cls:
            return E.op(name, convert(node.this, table, alias), convert(node.expression, table, alias))
    if isinstance(node, exp.And):
        return E.op("and", convert(node.this, table, alias), convert(node.expression, table, alias))
    if isinstance(node, exp.Or):
        return E.op("or", convert(node.this, table, alias), convert(node.expression, table, alias))
    if isinstance(node, exp.Xor):
        raise SqlInvalid("XOR is not supported")
    if isinstance(node, exp.Not):
        return E.op("not", convert(node.this, table, alias))
    if isinstance(node, exp.Is):
        target = node.expression
        if isinstance(target, exp.Null):
            return E.Expr(E.Kind.IS_NULL, children=(convert(node.this, table, alias),))
        if isinstance(target, exp.Boolean):
            return E.op("<=>", convert(node.this, table, alias), convert(target, table, alias))
        raise SqlInvalid("IS must be followed by NULL, TRUE or FALSE")
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise BadRequest("Select statement must not embed another statement")
        values = node.expressions or []
        if not values:
            raise SqlInvalid("IN needs at least one value")
        return E.Expr(E.Kind.IN, children=(convert(node.this, table, alias), *(convert(v, table, alias) for v in values)))
    if isinstance(node, exp.Between):
        return E.Expr(E.Kind.BETWEEN, children=(
            convert(node.this, table, alias), convert(node.args["low"], table, alias), convert(node.args["high"], table, alias)))
    if isinstance(node, exp.Escape):
        like = node.this
        if not isinstance(like, (exp.Like, exp.ILike)):
            raise SqlInvalid("ESCAPE without LIKE")
        base = convert(like, table, alias)
        return E.Expr(base.kind, name=base.name, negated=base.negated,
                      children=base.children + (convert(node.expression, table, alias),))
    if isinstance(node, (exp.Like, exp.ILike)):
        return E.Expr(E.Kind.LIKE, name="ilike" if isinstance(node, exp.ILike) else "like", negated=bool(node.args.get("negate")),
                      children=(convert(node.this, table, alias), convert(node.expression, table, alias)))
    if isinstance(node, exp.RegexpLike):
        return E.Expr(E.Kind.FUNC, name="rlike", children=(convert(node.this, table, alias), convert(node.expression, table, alias)))
    if isinstance(node, exp.Cast) or isinstance(node, exp.TryCast):
        to = node.args.get("to")
        if not isinstance(to, exp.DataType):
            raise SqlInvalid("CAST needs a type")
        type_name = to.sql(dialect="spark").lower()
        if type_name in ("datetime",):
            type_name = "timestamp"
        return E.Expr(E.Kind.CAST, type_name=type_name, children=(convert(node.this, table, alias),))
    if isinstance(node, exp.Case):
        if node.this is not None:
            raise SqlInvalid("only searched CASE WHEN is supported")
        children: list[E.Expr] = []
        for branch in node.args.get("ifs") or []:
            children.append(convert(branch.this, table, alias))
            children.append(convert(branch.args["true"], table, alias))
        default = node.args.get("default")
        if default is not None:
            children.append(convert(default, table, alias))
        return E.Expr(E.Kind.CASE, name="else" if default is not None else None, children=tuple(children))
    if isinstance(node, exp.Trim):
        # ltrim/rtrim/trim([BOTH|LEADING|TRAILING] [chars FROM] s): Spark spells these
        # ltrim/rtrim/trim(s) and, with characters, fn(chars, s).
        position = str(node.args.get("position") or "").upper()
        fname = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        args = [node.this] if node.expression is None else [node.expression, node.this]
        return E.Expr(E.Kind.FUNC, name=fname, children=tuple(convert(a, table, alias) for a in args))
    if isinstance(node, exp.Log):
        base, arg = node.this, node.expression
        if arg is None:
            return E.Expr(E.Kind.FUNC, name="ln", children=(convert(base, table, alias),))
        if isinstance(base, exp.Literal) and not base.is_string and str(base.this) in ("2", "10"):
            # log2/log10 are exact in Spark; log(b, x) is ln(x)/ln(b) and rounds differently.
            return E.Expr(E.Kind.FUNC, name=f"log{base.this}", children=(convert(arg, table, alias),))
        return E.Expr(E.Kind.FUNC, name="log", children=(convert(base, table, alias), convert(arg, table, alias)))
    if isinstance(node, exp.Pad):
        fname = "lpad" if node.args.get("is_left") else "rpad"
        args = [a for a in (node.this, node.expression, node.args.get("fill_pattern")) if a is not None]
        return E.Expr(E.Kind.FUNC, name=fname, children=tuple(convert(a, table, alias) for a in args))
    if isinstance(node, exp.Initcap):
        # sqlglot adds a default delimiter argument that Spark's initcap does not take.
        return E.Expr(E.Kind.FUNC, name="initcap", children=(convert(node.this, table, alias),))
    if isinstance(node, exp.Anonymous):
        fname = str(node.this).lower()
        if fname not in PLAIN_CALLS:
            raise SqlInvalid(f"unknown or disallowed function {fname}")
        fname = STARROCKS_SPELLINGS.get(fname, fname)
        return E.Expr(E.Kind.FUNC, name=fname, children=tuple(convert(a, table, alias) for a in node.expressions))
    spark_name = BY_SQLGLOT_CLASS.get(type(node))
    if spark_name is not None and isinstance(node, exp.Func):
        return E.Expr(E.Kind.FUNC, name=spark_name, children=tuple(convert(a, table, alias) for a in _func_args(node)))
    raise SqlInvalid(f"unsupported expression {node.sql(dialect='starrocks')[:200]!r}")


def _negative_literal(text: str) -> E.Expr:
    """``-<number>``: Spark's grammar reads the sign as part of the literal."""
    if text.isdigit():
        value = -int(text)
        if value >= INT_MIN:
            return E.literal("int", str(value))
        if value >= LONG_MIN:
            return E.literal("bigint", str(value))
        return E.literal("decimal", str(value))
    lit = _number(text)
    if lit.literal_type == "double":
        return E.literal("double", repr(-float(text)))
    return E.literal(str(lit.literal_type), "-" + (lit.literal_value or ""))


def _func_args(node: exp.Func) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    for key in node.arg_types:
        value = node.args.get(key)
        if isinstance(value, exp.Expression):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, exp.Expression))
    return out

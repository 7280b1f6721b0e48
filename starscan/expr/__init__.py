"""Predicate and output expressions as a small typed tree, and the visitor that walks it.

The FE builds the tree from sqlglot's AST (planner/sql.py), the plan carries it flattened
in pre-order (``TExpr``), and three visitors read it: the Spark translator
(starscan/spark/columns.py), the Arrow translator (starscan/arrow/filter.py) and partition
pruning (planner/pruning.py). No SQL text ever travels.

A node is checked when it is built, from the parser or from a plan: its kind, its
operator, its literal type and its number of operands. A walker can rely on the shape and
decides only what the node means to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from starscan.core import thrift_defs
from starscan.core.errors import PlanInvalid


class _Text(str, Enum):
    """An enum whose members are their SQL/wire spelling (``str`` and f-strings give it)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    # Hash and compare as the spelling, so tables keyed by "=" or "and" find the member.
    __hash__ = str.__hash__


class Kind(_Text):
    COLUMN = "column"
    LITERAL = "literal"
    OP = "op"             # an operator (``Operator``)
    FUNC = "func"         # a Spark function (starscan.expr.functions)
    CAST = "cast"
    IN = "in"
    BETWEEN = "between"
    IS_NULL = "is_null"
    LIKE = "like"         # name: like | ilike; an optional third operand is the escape
    CASE = "case"         # WHEN/THEN pairs, then the ELSE value when name is "else"


class LiteralType(_Text):
    NULL = "null"
    BOOLEAN = "boolean"
    INT = "int"
    BIGINT = "bigint"
    DECIMAL = "decimal"
    DOUBLE = "double"
    STRING = "string"
    DATE = "date"
    TIMESTAMP = "timestamp"


class Operator(_Text):
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ_NULL_SAFE = "<=>"
    AND = "and"
    OR = "or"
    NOT = "not"
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MOD = "%"
    NEG = "neg"
    INT_DIV = "div"

    @property
    def arity(self) -> int:
        return 1 if self in (Operator.NOT, Operator.NEG) else 2


COMPARISONS = frozenset({Operator.EQ, Operator.NE, Operator.LT, Operator.LE, Operator.GT, Operator.GE,
                         Operator.EQ_NULL_SAFE})
LOGICAL = frozenset({Operator.AND, Operator.OR, Operator.NOT})

KINDS = frozenset(k.value for k in Kind)
LIKE_FORMS = ("like", "ilike")
MAX_DEPTH = 500  # deeper predicates are refused (a hostile plan must not exhaust the stack)
_E = TypeVar("_E", bound=Enum)


def _member(enum: type[_E], value: Any, refusal: str) -> _E:
    """``value`` as a member of ``enum``, or PlanInvalid: ``refusal`` and the value."""
    try:
        return enum(value)
    except ValueError:
        raise PlanInvalid(f"{refusal} {value!r}") from None


#: How many operands a node of these kinds takes.
_OPERAND_COUNTS = {Kind.IN: lambda n: n >= 2, Kind.BETWEEN: lambda n: n == 3, Kind.IS_NULL: lambda n: n == 1}


@dataclass(frozen=True)
class Expr:
    kind: Kind
    name: str | None = None           # column name, Operator, function name, like/ilike, case "else"
    children: tuple[Expr, ...] = ()
    literal_type: LiteralType | None = None
    literal_value: str | None = None
    negated: bool = False             # NOT IN, NOT BETWEEN, IS NOT NULL, NOT LIKE
    type_name: str | None = None      # the target type of a cast

    def __post_init__(self) -> None:
        kind = _member(Kind, self.kind, "query plan predicate has an unknown node")
        object.__setattr__(self, "kind", kind)
        n = len(self.children)
        if kind is Kind.COLUMN:
            if not self.name:
                raise PlanInvalid("query plan has a column without a name")
        elif kind is Kind.LITERAL:
            self._check_literal()
        elif kind is Kind.OP:
            operator = _member(Operator, self.name, "query plan has an unknown operator")
            object.__setattr__(self, "name", operator)
            self._operands(n == operator.arity)
        elif kind is Kind.CAST:
            self._operands(n == 1)
            if not (self.type_name or "").strip():
                raise PlanInvalid("query plan has a cast without a type")
        elif kind in _OPERAND_COUNTS:
            self._operands(_OPERAND_COUNTS[kind](n))
        elif kind is Kind.LIKE:
            self._operands(n in (2, 3))
            if self.name not in LIKE_FORMS:
                raise PlanInvalid(f"query plan has an unknown pattern match {self.name!r}")
        elif kind is Kind.CASE:
            self._check_case(n)

    def _check_literal(self) -> None:
        literal_type = _member(LiteralType, self.literal_type, "query plan has a literal of unknown type")
        object.__setattr__(self, "literal_type", literal_type)
        if literal_type is not LiteralType.NULL and self.literal_value is None:
            raise PlanInvalid(f"query plan has a {literal_type} literal without a value")

    def _check_case(self, n: int) -> None:
        pairs = n - 1 if self.name == "else" else n
        if self.name not in (None, "else"):
            raise PlanInvalid(f"query plan has an unknown CASE form {self.name!r}")
        if self.name == "else" and n == 0:
            raise PlanInvalid("query plan CASE has no ELSE value")
        if pairs <= 0 or pairs % 2:
            raise PlanInvalid("query plan CASE needs WHEN/THEN pairs")

    def _operands(self, ok: bool) -> None:
        if not ok:
            raise PlanInvalid(f"query plan node {self.kind} {self.name or ''} has {len(self.children)} operands")

    @property
    def operator(self) -> Operator:
        """The operator of an ``op`` node."""
        assert isinstance(self.name, Operator), self
        return self.name

    def columns(self) -> set[str]:
        """Every column the expression reads."""
        out: set[str] = {self.name} if self.kind is Kind.COLUMN and self.name else set()
        for child in self.children:
            out |= child.columns()
        return out


def column(name: str) -> Expr:
    return Expr(Kind.COLUMN, name=name)


def literal(literal_type: str, value: str | None) -> Expr:
    return Expr(Kind.LITERAL, literal_type=literal_type, literal_value=value)  # type: ignore[arg-type]  # checked


def op(name: str, *children: Expr) -> Expr:
    return Expr(Kind.OP, name=name, children=tuple(children))


@dataclass(frozen=True)
class _Node:
    """One node of the pre-order list, as ``TExprNode`` holds it (without loading Thrift:
    a client's direct read parses its plan's predicate from JSON)."""
    kind: Any                     # what a plan or JSON says: checked when the Expr is built
    num_children: Any
    name: Any = None
    literal_type: Any = None
    literal_value: Any = None
    negated: bool = False
    type_name: Any = None


def _preorder(expr: Expr) -> list[_Node]:
    nodes: list[_Node] = []

    def visit(e: Expr) -> None:
        nodes.append(_Node(e.kind.value, len(e.children), None if e.name is None else str(e.name),
                           None if e.literal_type is None else str(e.literal_type), e.literal_value, e.negated,
                           e.type_name))
        for c in e.children:
            visit(c)

    visit(expr)
    return nodes


def flatten(expr: Expr) -> Any:
    """Expr -> TExpr (pre-order node list)."""
    plan_idl = thrift_defs.plan
    return plan_idl.TExpr(nodes=[plan_idl.TExprNode(kind=n.kind, num_children=n.num_children, name=n.name,
                                                    literal_type=n.literal_type, literal_value=n.literal_value,
                                                    negated=n.negated, type_name=n.type_name)
                                 for n in _preorder(expr)])


def unflatten(texpr: Any) -> Expr:
    """TExpr -> Expr; rejects malformed node lists. Iterative, so a hostile depth cannot
    exhaust the interpreter's stack."""
    return _unflatten(list(texpr.nodes or []))


def _unflatten(nodes: list[Any]) -> Expr:
    if not nodes:
        raise PlanInvalid("query plan predicate is truncated")
    # Each open frame: [node, children built so far].
    stack: list[list[Any]] = []
    root: Expr | None = None
    for n in nodes:
        if root is not None:
            raise PlanInvalid("query plan predicate has trailing nodes")
        if n.kind not in KINDS or n.num_children is None or n.num_children < 0:
            raise PlanInvalid(f"query plan predicate has an unknown node {n.kind!r}")
        stack.append([n, []])
        if len(stack) > MAX_DEPTH:
            raise PlanInvalid("query plan predicate is nested too deeply")
        # Close every frame whose children are complete.
        while stack and len(stack[-1][1]) == stack[-1][0].num_children:
            node, children = stack.pop()
            built = Expr(node.kind, node.name, tuple(children), node.literal_type, node.literal_value,
                         bool(node.negated), node.type_name)
            if stack:
                stack[-1][1].append(built)
            else:
                root = built
    if root is None:
        raise PlanInvalid("query plan predicate is truncated")
    return root


R = TypeVar("R")


class ExprVisitor(Generic[R]):
    """Walks an ``Expr`` top-down: ``visit`` calls the method for the node's kind, which
    calls ``visit`` on the children it needs (a translator decides the order and may stop
    early). A kind the visitor does not override, and a tree deeper than ``max_depth``,
    get ``otherwise(node)``: by default a ``PlanInvalid``; a translator that has a fallback
    (the Arrow translator's "use the sql engine", pruning's "unknown") answers it there."""

    max_depth = MAX_DEPTH

    def __init__(self) -> None:
        self._depth = 0

    def visit(self, e: Expr) -> R:
        if self._depth >= self.max_depth:
            return self.too_deep(e)
        self._depth += 1
        try:
            method: Callable[[Expr], R] = getattr(self, _METHODS[e.kind])
            return method(e)
        finally:
            self._depth -= 1

    def too_deep(self, e: Expr) -> R:
        raise PlanInvalid("query plan predicate is nested too deeply")

    def otherwise(self, e: Expr) -> R:
        raise PlanInvalid(f"query plan node {e.kind} {e.name or e.literal_type or ''} is not supported here")

    def visit_column(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_literal(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_op(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_func(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_cast(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_in(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_between(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_is_null(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_like(self, e: Expr) -> R:
        return self.otherwise(e)

    def visit_case(self, e: Expr) -> R:
        return self.otherwise(e)


_METHODS = {kind: f"visit_{kind.value}" for kind in Kind}


def to_json(expr: Expr) -> list[dict[str, Any]]:
    """Expr -> the pre-order node list of ``flatten`` as JSON objects (a direct plan carries
    its predicate this way, for readers that filter the files themselves)."""
    out = []
    for n in _preorder(expr):
        node: dict[str, Any] = {"kind": n.kind, "children": n.num_children}
        for key, value in (("name", n.name), ("literalType", n.literal_type), ("value", n.literal_value),
                           ("typeName", n.type_name)):
            if value is not None:
                node[key] = value
        if n.negated:
            node["negated"] = True
        out.append(node)
    return out


def from_json(nodes: Any) -> Expr:
    """``to_json``'s node list -> Expr, checked as a plan's predicate is."""
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise PlanInvalid("the predicate is not a list of nodes")
    try:
        flat = [_Node(kind=n.get("kind"), num_children=int(n.get("children", 0)), name=n.get("name"),
                      literal_type=n.get("literalType"), literal_value=n.get("value"),
                      negated=bool(n.get("negated", False)), type_name=n.get("typeName")) for n in nodes]
    except (TypeError, ValueError):
        raise PlanInvalid("the predicate has a malformed node") from None
    return _unflatten(flat)

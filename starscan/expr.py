"""Predicate and output expressions as a small typed tree.

The FE builds it from sqlglot's AST (planner/sql.py), the plan carries it flattened in
pre-order (``TExpr``), the BE turns it into a Spark ``Column`` (starscan/spark_expr.py) and
the FE's pruning evaluates it on partition values. No SQL text ever travels.
"""

from __future__ import annotations

from dataclasses import dataclass

from starscan.errors import PlanInvalid
from starscan.thrift_defs import plan as plan_idl

KINDS = {"column", "literal", "op", "func", "cast", "in", "between", "is_null", "like", "case"}
LITERAL_TYPES = {"null", "boolean", "int", "bigint", "decimal", "double", "string", "date", "timestamp"}
# Binary/unary operators (op nodes); names are SQL spellings.
OPERATORS = {"=", "!=", "<", "<=", ">", ">=", "<=>", "and", "or", "not", "+", "-", "*", "/", "%", "neg", "div"}


@dataclass(frozen=True)
class Expr:
    kind: str
    name: str | None = None
    children: tuple[Expr, ...] = ()
    literal_type: str | None = None
    literal_value: str | None = None
    negated: bool = False
    type_name: str | None = None

    def columns(self) -> set[str]:
        """Every column the expression reads."""
        out: set[str] = {self.name} if self.kind == "column" and self.name else set()
        for child in self.children:
            out |= child.columns()
        return out


def column(name: str) -> Expr:
    return Expr("column", name=name)


def literal(literal_type: str, value: str | None) -> Expr:
    return Expr("literal", literal_type=literal_type, literal_value=value)


def op(name: str, *children: Expr) -> Expr:
    return Expr("op", name=name, children=tuple(children))


def flatten(expr: Expr):
    """Expr -> TExpr (pre-order node list)."""
    nodes = []

    def visit(e: Expr) -> None:
        nodes.append(
            plan_idl.TExprNode(
                kind=e.kind, num_children=len(e.children), name=e.name, literal_type=e.literal_type,
                literal_value=e.literal_value, negated=e.negated, type_name=e.type_name,
            )
        )
        for c in e.children:
            visit(c)

    visit(expr)
    return plan_idl.TExpr(nodes=nodes)


MAX_DEPTH = 500


def unflatten(texpr) -> Expr:
    """TExpr -> Expr; rejects malformed node lists. Iterative, so a hostile depth cannot
    exhaust the interpreter's stack."""
    nodes = list(texpr.nodes or [])
    if not nodes:
        raise PlanInvalid("query plan predicate is truncated")
    # Each open frame: [node, children built so far].
    stack: list[list] = []
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

"""Names and parts of a parsed query: identifiers as PostgreSQL folds them, the tables a SELECT
reads in its FROM items, the side of a join, an outer-join chain's root join and a FULL JOIN's
two parts, a query's own aggregates, window functions and their shared PARTITION BY."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

DIALECT = "postgres"


def sql_text(node: exp.Expr) -> str:
    """``node`` as PostgreSQL SQL. sqlglot's generator copies a tree before writing it, because a
    dialect's transforms may rewrite it; PostgreSQL's rewrite only shapes mvlog never builds (SEMI and
    ANTI joins, QUALIFY, percentiles outside WITHIN GROUP), so the copy — a third of compiling a
    TPC-DS view — is skipped."""
    return node.sql(dialect=DIALECT, copy=False)


@functools.lru_cache(maxsize=1024)
def _parsed_once(sql: str, into: type[exp.Expr] | None) -> exp.Expr:
    tree = exp.maybe_parse(sql, into=into, dialect=DIALECT) if into else sqlglot.parse_one(sql, dialect=DIALECT)
    for node in tree.walk():
        node._meta = None  # the tokens' positions: copying them doubled a copy's cost
    return tree


def parsed(sql: str | exp.Expr, into: type[exp.Expr] | None = None) -> exp.Expr:
    """``sql`` (PostgreSQL text, a view's query or SQL mvlog generated) as a tree the caller may
    change; a tree is returned as it is, as ``exp.maybe_parse`` does. Compiling a view parses the
    same texts many times (a piece's read inside each of its view's statements): each text is
    parsed once and copied after (a copy costs a sixth of a parse)."""
    if isinstance(sql, exp.Expr):
        return sql
    return _parsed_once(sql, into).copy()  # type: ignore[arg-type] # a class is hashable


@dataclass(frozen=True)
class TableRef:
    """A base table as the query names it."""

    schema: str | None
    name: str
    alias: str

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def identifier_name(node: exp.Identifier | str) -> str:
    """The name PostgreSQL gives an identifier: quoted as written, unquoted folded to lower case."""
    if isinstance(node, str):
        return node
    return node.this if node.quoted else node.this.lower()


def from_items(select: exp.Select) -> list[exp.Expr]:
    """The items of ``select``'s FROM clause in order: the first, then each join's."""
    first = [select.args["from_"].this] if select.args.get("from_") else []
    return first + [join.this for join in select.args.get("joins") or []]


def table_refs(select: exp.Select) -> list[TableRef]:
    refs = []
    for source in from_items(select):
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            schema = identifier_name(source.args["db"]) if source.args.get("db") else None
            name = identifier_name(source.this)
            alias = identifier_name(source.args["alias"].this) if source.alias else name
            refs.append(TableRef(schema, name, alias))
    return refs


def join_side(join: exp.Join) -> str:
    """INNER, LEFT, RIGHT, FULL or CROSS (a comma join is CROSS: its condition is in WHERE)."""
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if side:
        return side
    if kind == "CROSS" or not (join.args.get("on") or join.args.get("using") or join.args.get("method")):
        return "CROSS"
    return "INNER"


def never_extended(select: exp.Select) -> set[str]:
    """The aliases of ``select``'s FROM tables whose columns no join fills with NULLs: the first
    and those joined inner, where no RIGHT or FULL join extends what precedes it."""
    joins = select.args.get("joins") or []
    if any(join_side(j) in ("RIGHT", "FULL") for j in joins):
        return set()
    first = [select.args["from_"].this] if select.args.get("from_") else []
    items = first + [j.this for j in joins if join_side(j) != "LEFT"]
    return {item_alias(item) for item in items if isinstance(item, exp.Table)}


def root_join(joins: list[exp.Join]) -> int | None:
    """The position of the join whose table is an outer-join view's root instead of the first
    table (a RIGHT JOIN: only inner joins precede it), or None."""
    return next((i for i, j in enumerate(joins) if join_side(j) == "RIGHT"), None)


def root_first(refs: list, joins: list[exp.Join]) -> list:
    """``refs`` (one per FROM item, in order) with an outer-join view's root first: the table of
    its RIGHT JOIN (see :func:`root_join`), if it has one."""
    refs = list(refs)
    right = root_join(joins)
    if right is not None:
        refs.insert(0, refs.pop(right + 1))
    return refs


def full_join_parts(select: exp.Select, marker: exp.Column) -> list[exp.Select]:
    """``select`` over ``P FULL JOIN b ON c …`` (``P``: the first table ``a`` and the tables
    inner-joined to it) as its two disjoint parts: ``P LEFT JOIN b ON c …``, the rows that hold a
    row of ``a``, and ``P RIGHT JOIN b ON c … WHERE <marker> IS NULL``, the others (``marker``: a
    NOT NULL column of ``a``, NULL only where ``P`` is NULL-extended)."""
    position = next(i for i, j in enumerate(select.args["joins"]) if join_side(j) == "FULL")
    parts = []
    for side in ("LEFT", "RIGHT"):
        part = select.copy()
        part.args["joins"][position].set("side", side)
        if side == "RIGHT":
            part.where(exp.Is(this=marker.copy(), expression=exp.Null()), copy=False)
        parts.append(part)
    return parts


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In)
_STRICT = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Paren, exp.Cast, exp.DPipe)


def _strict_in(node: exp.Expr, alias: str) -> bool:
    """Whether ``node`` is NULL whenever every column of ``alias`` is: a column of it, or an
    operator that is NULL when an operand is (arithmetic, a cast, ``||``) over one."""
    if isinstance(node, exp.Column):
        return bool(node.args.get("table")) and identifier_name(node.args["table"]) == alias
    if isinstance(node, _STRICT):
        return any(_strict_in(child, alias) for child in (node.this, node.args.get("expression"))
                   if isinstance(child, exp.Expression))
    return False


def conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The operands of a condition's top-level ANDs (the condition itself if it has none)."""
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def top_conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The operands of a condition's ANDs, through parentheses (mvlog's fast reads wrap the view's
    own WHERE in them: ``(a AND b) AND key IN (…)``)."""
    return [c for conjunct in conjuncts(condition)
            for c in (top_conjuncts(conjunct) if isinstance(conjunct, exp.And) else [conjunct])]


def null_rejecting(condition: exp.Expr, alias: str) -> bool:
    """Whether ``condition`` cannot be true for a row in which ``alias`` is NULL-extended: one of
    its conjuncts compares (or tests IS NOT NULL) an expression that is NULL then."""
    for conjunct in conjuncts(condition):
        conjunct = conjunct.unnest()
        if isinstance(conjunct, _COMPARISONS) and any(
                _strict_in(side, alias) for side in (conjunct.this, conjunct.args.get("expression"))
                if isinstance(side, exp.Expression)):
            return True
        negated = conjunct.this if isinstance(conjunct, exp.Not) else conjunct if conjunct.args.get("negate") else None
        if (isinstance(negated, exp.Is) and isinstance(negated.expression, exp.Null)
                and _strict_in(negated.this, alias)):
            return True
    return False


def item_alias(item: exp.Expr) -> str:
    """The name a FROM item is referred to by: its alias, or a table's name."""
    return identifier_name(item.args["alias"].this) if item.alias else identifier_name(item.this)


def own_aggregates(select: exp.Select) -> bool:
    """Whether ``select`` itself computes an aggregate (not one of its subqueries)."""
    return any(node.find_ancestor(exp.Select) is select for e in select.selects for node in e.find_all(exp.AggFunc))


def own_windows(select: exp.Select) -> list[exp.Window]:
    """The window functions ``select`` computes itself (not those of its subqueries)."""
    return [w for w in select.find_all(exp.Window) if w.find_ancestor(exp.Select) is select]


def window_parts(tree: exp.Select) -> tuple[exp.Select | None, exp.Select]:
    """A window view's (outer query, window query): the query computing window functions, and
    the query that filters and projects it (``SELECT … FROM (<window query>) s WHERE rn = 1``) or None."""
    source = tree.args["from_"].this if tree.args.get("from_") else None
    if (not own_windows(tree) and not tree.args.get("joins") and isinstance(source, exp.Subquery)
            and isinstance(source.this, exp.Select) and own_windows(source.this)):
        return tree, source.this
    return None, tree


def partition_by(select: exp.Select) -> list[exp.Expr]:
    """The PARTITION BY expressions every window function of ``select`` shares."""
    windows = own_windows(select)
    first = list(windows[0].args.get("partition_by") or []) if windows else []
    return [e for e in first if all(e in (w.args.get("partition_by") or []) for w in windows[1:])]


def with_ctes(statement: exp.Expr, ctes: Sequence[tuple[str, exp.Expr]]) -> exp.Expr:
    """``statement`` under ``WITH <name> AS (<query>), …`` (data-modifying CTEs too)."""
    statement.set("with_", exp.With(expressions=[exp.CTE(this=q, alias=exp.TableAlias(this=exp.to_identifier(n)))
                                                 for n, q in ctes]))
    return statement


def parse_select(sql: str) -> exp.Select:
    """A SELECT that mvlog generated, parsed back."""
    tree = parsed(sql)
    assert isinstance(tree, exp.Select)
    return tree


def union_of(queries: Sequence[exp.Query], distinct: bool = True) -> exp.Query:
    """``queries[0] UNION [ALL] queries[1] …`` (one query: itself); the queries become its parts, not copies."""
    return queries[0] if len(queries) == 1 else exp.union(*queries, distinct=distinct, copy=False)


def projected_columns(select: exp.Select, table_alias: str, columns: list[str]) -> dict[str, str]:
    """For each of ``columns`` of the table ``table_alias`` that the query outputs unchanged, its output name.

    ``SELECT *`` and ``SELECT alias.*`` output every column under its own name.
    """
    found: dict[str, str] = {}
    single_table = len(table_refs(select)) == 1
    for projection in select.selects:
        target = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(target, exp.Star) or (isinstance(target, exp.Column) and isinstance(target.this, exp.Star)):
            qualifier: str | None = target.table if isinstance(target, exp.Column) else ""
            if not qualifier and single_table or (qualifier and identifier_name(target.args["table"]) == table_alias):
                for column in columns:
                    found.setdefault(column, column)
            continue
        if not isinstance(target, exp.Column) or not isinstance(target.this, exp.Identifier):
            continue
        qualifier = identifier_name(target.args["table"]) if target.args.get("table") else None
        if qualifier not in (None, table_alias) or (qualifier is None and not single_table):
            continue
        name = identifier_name(target.this)
        if name in columns:
            output = identifier_name(projection.args["alias"]) if isinstance(projection, exp.Alias) else name
            found.setdefault(name, output)
    return found

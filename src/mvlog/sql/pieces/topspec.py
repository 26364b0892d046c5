"""A top-N query split into its full view and its ORDER BY and LIMIT (:func:`split`, before the
analysis), and its ORDER BY resolved to the full view's output columns (:func:`order_of`): what
:mod:`mvlog.sql.strategies.topn` keeps. An ORDER BY item that is no output of a plain SELECT is
added to the full view as a hidden output (``_mvlog_order<i>``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX
from mvlog.sql.parse.sqltree import identifier_name, parsed, sql_text
from mvlog.sql.pieces.shape import col, ident


@dataclass(frozen=True)
class TopSpec:
    """A query's ORDER BY and LIMIT as written (its order items not yet resolved to output columns)."""

    order: tuple[str, ...]  # each ORDER BY item as SQL
    limit: int
    offset: int
    items: tuple[str, ...] = ()  # each output's expression as SQL (an ORDER BY item may repeat one)
    hidden: tuple[str, ...] = ()  # the outputs added to the full view: ORDER BY expressions over its rows


def split(query: str) -> tuple[str, TopSpec] | str | None:
    """A top-N query as (the full view's SQL, its ORDER BY and LIMIT); the reason a query with a
    LIMIT or OFFSET cannot be kept as one; None for a query without them."""
    try:
        tree = parsed(query)
    except sqlglot.errors.ParseError:
        return None  # the analysis says what is wrong with it
    if not isinstance(tree, exp.Query) or not any(tree.args.get(k) for k in ("limit", "offset", "fetch")):
        return None
    limit_node = tree.args.get("limit") or tree.args.get("fetch")  # FETCH FIRST is parsed as the limit
    if isinstance(limit_node, exp.Fetch):
        options = limit_node.args.get("limit_options")
        if options is not None and (options.args.get("with_ties") or options.args.get("percent")):
            return "FETCH … WITH TIES or PERCENT is not incrementally maintainable"
        limit = _count(limit_node.args.get("count"))
    elif limit_node is None:
        return "OFFSET without LIMIT is not incrementally maintainable"
    else:
        limit = _count(limit_node.expression)
    offset = _count(tree.args["offset"].expression if tree.args.get("offset") else exp.Literal.number(0))
    if limit is None or offset is None:
        return "a top-N view needs LIMIT and OFFSET as whole numbers (LIMIT/OFFSET is not incrementally maintainable)"
    order = tree.args.get("order")
    if order is None:
        return "LIMIT without ORDER BY keeps arbitrary rows: not incrementally maintainable"
    if limit == 0:
        return "LIMIT 0 is always empty: not incrementally maintainable"
    full = tree.copy()
    for key in ("order", "limit", "offset", "fetch"):
        full.set(key, None)
    outputs = tree.selects if isinstance(tree, exp.Select) else []
    items = [sql_text(p.this if isinstance(p, exp.Alias) else p) for p in outputs]
    ordered: list[str] = []
    hidden: list[str] = []
    plain = isinstance(full, exp.Select) and not full.args.get("distinct")
    for item in order.expressions:
        this = item.this
        if plain and not _an_output(this, outputs, items):
            # An expression over the query's rows (as PostgreSQL reads an ORDER BY expression): the
            # full view outputs it as a hidden column, and the top-N orders by that column.
            name = f"{HIDDEN_PREFIX}order{len(hidden) + 1}"
            full.select(exp.alias_(this.copy(), ident(name)), copy=False)
            hidden.append(name)
            items.append(sql_text(this))
            item = item.copy()
            item.set("this", col(name))
        ordered.append(sql_text(item))
    return sql_text(full), TopSpec(tuple(ordered), limit, offset, tuple(items), tuple(hidden))


def _an_output(this: exp.Expr, outputs: Sequence[exp.Expr], items: Sequence[str]) -> bool:
    """Whether an ORDER BY item names an output of the query, as PostgreSQL reads it: a position
    (a number), an output's own expression, or a bare name that is an output's name (else it is
    a column of the query's rows). With a ``*`` or an output named by PostgreSQL (an expression
    without an alias) among the outputs, their names are left to :func:`order_of`, which knows
    the query's columns."""
    if isinstance(this, exp.Literal) or sql_text(this) in items:
        return True
    if not isinstance(this, exp.Column) or this.table:
        return False
    names = []
    for output in outputs:
        name = output.args["alias"] if isinstance(output, exp.Alias) else \
            output.this if isinstance(output, exp.Column) else None
        if not isinstance(name, exp.Identifier):
            return True
        names.append(identifier_name(name))
    return identifier_name(this.this) in names


def _count(node: exp.Expr | None) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    return None


def order_of(spec: TopSpec, columns: Sequence[str]) -> tuple[tuple[str, bool, bool], ...] | str:
    """The ORDER BY as (output column, descending, NULLs first) per item, or why it is not one: a
    top-N view orders by its output columns (by name, position, or the output's own expression),
    which its margin holds."""
    order = []
    for text in spec.order:
        item = parsed(text, into=exp.Ordered)
        this, desc = item.this, bool(item.args.get("desc"))
        nulls_first = item.args.get("nulls_first")
        if isinstance(this, exp.Literal) and not this.is_string and this.this.isdigit() \
                and 1 <= int(this.this) <= len(columns):
            name = columns[int(this.this) - 1]
        elif isinstance(this, exp.Column) and not this.table and isinstance(this.this, exp.Identifier) \
                and identifier_name(this.this) in columns:
            name = identifier_name(this.this)
        elif sql_text(this) in spec.items and len(spec.items) == len(columns):
            # an output's own expression (dt.d_year, sum(x), a column under its alias): that output
            name = columns[spec.items.index(sql_text(this))]
        else:
            return (f"a top-N view (ORDER BY … LIMIT) orders by its output columns, by name or position, or by "
                    f"columns or expressions it can add to a plain SELECT's named outputs ({sql_text(this)} is none "
                    f"of them)")
        # PostgreSQL's default: NULLs sort as larger than any value
        order.append((name, desc, desc if nulls_first is None else bool(nulls_first)))
    return tuple(order)

"""What an analysis says of a view query (:class:`Analysis`, its :class:`ViewClass`), and the
parsing every analysis starts from: the query, and every table it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from mvlog.errors import ConfigError
from mvlog.sql.analyze.subqueries import RangeParameter, SemiJoin
from mvlog.sql.parse.sqltree import DIALECT, TableRef, identifier_name, never_extended


class ViewClass(str, Enum):
    SIMPLE = "simple"
    JOIN = "join"
    AGGREGATE = "aggregate"
    UNION = "union"  # UNION ALL of branches of the other classes
    WINDOW = "window"  # window functions with PARTITION BY over a simple or join query
    COMPOSED = "composed"  # a query over pieces of the other classes (mvlog.sql.strategies.composed)
    OTHER = "other"


@dataclass
class Analysis:
    """What a view query is. ``reasons`` say why fast refresh is impossible."""

    query: str
    tree: exp.Query
    view_class: ViewClass
    tables: list[TableRef]
    reasons: list[str] = field(default_factory=list)
    branches: list[Analysis] = field(default_factory=list)  # UNION ALL: each branch's analysis
    # UNION (distinct): DISTINCT over the UNION ALL of ``branches``, each made SELECT DISTINCT.
    distinct: bool = False
    # An aggregate over a UNION ALL: ``branches`` are each branch's SELECT DISTINCT of its groups.
    over_union: bool = False
    # Tables read by subquery expressions (EXISTS, IN, scalar): the last entries of ``tables``,
    # each with the condition under which its rows matter to a row of the FROM items.
    semi_joins: list[SemiJoin] = field(default_factory=list)
    # Tables read by parameters, uncorrelated scalar subqueries in HAVING (subqueries.is_parameter):
    # logged and watched, not keyed.
    parameters: list[TableRef] = field(default_factory=list)
    # Uncorrelated scalar subqueries compared with one FROM item's rows (subqueries.range_parameter).
    ranges: list[RangeParameter] = field(default_factory=list)
    # (alias, column) of the NOT NULL columns of its tables (the catalog's; empty without it)
    not_null: frozenset[tuple[str, str]] = frozenset()
    # (alias, column) of every column of its tables (the catalog's; empty without it)
    columns: frozenset[tuple[str, str]] = frozenset()

    def owner(self, expr: exp.Expr) -> str | None:
        """The alias of the table whose column ``expr`` is (qualified, or the one table of the
        query that has it); None: not a column, or not known to be one table's."""
        if not isinstance(expr, exp.Column):
            return None
        if expr.table:
            return expr.table
        owners = {alias for alias, name in self.columns if name == expr.name}
        return owners.pop() if len(owners) == 1 else None

    def never_null(self, expr: exp.Expr) -> bool:
        """Whether ``expr`` is a NOT NULL column of one of the query's FROM tables that no outer
        join fills with NULLs."""
        if not (isinstance(expr, exp.Column) and (expr.table, expr.name) in self.not_null
                and isinstance(self.tree, exp.Select)):
            return False
        kept = never_extended(self.tree)
        if expr.table:
            return expr.table in kept
        # unqualified: NOT NULL in every table that has it (one, in a valid query), none extended
        owners = {alias for alias, name in self.not_null if alias and name == expr.name}
        return bool(owners) and owners <= kept

    @property
    def fast_possible(self) -> bool:
        return not self.reasons

    @property
    def read_tables(self) -> list[TableRef]:
        """Every table the view reads and needs a log of: keyed, parameters', range parameters'."""
        return self.tables + self.parameters + [t for r in self.ranges for t in r.tables]


# The start of the reason a query over an aggregated derived table that does not merge gets: apply
# then tries to keep that aggregate as a piece of its own (mvlog.sql.strategies.composed).
AGGREGATE_NOT_MERGED = "an aggregated derived table or CTE that does not merge into the query"


def parse(query: str) -> exp.Expr:
    """Parse one SQL statement in PostgreSQL's dialect, or raise ConfigError."""
    try:
        statements = [s for s in sqlglot.parse(query, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise ConfigError(f"the query cannot be parsed: {first}") from None
    if len(statements) != 1:
        raise ConfigError("the query must be exactly one SELECT statement")
    tree = statements[0]
    while isinstance(tree, exp.Subquery) and set(k for k, v in tree.args.items() if v) == {"this"}:
        tree = tree.this  # (SELECT …): the parentheses mean nothing
    return tree


def parse_query(query: str) -> exp.Query:
    """:func:`parse`, refusing a statement that is not a query."""
    tree = parse(query)
    if not isinstance(tree, exp.Query):
        raise ConfigError("the query must be a SELECT statement")
    return tree


def tables_read(tree: exp.Query) -> list[TableRef]:
    """Every table a parsed query reads, at any depth, each once: whose catalog a compiler looks
    up before it classifies the query (see :func:`base_table_refs`)."""
    return base_table_refs(tree)


def base_table_refs(tree: exp.Query) -> list[TableRef]:
    """Every table the query reads, at any depth (subqueries, CTE bodies, set operations), each
    once, in the order written; names of the query's own CTEs are not tables. Aliases are the
    names as written (``schema.table``): unique per table, whatever aliases the query reuses."""
    ctes = {identifier_name(cte.args["alias"].this) for cte in tree.find_all(exp.CTE) if cte.args.get("alias")}
    refs: dict[tuple, TableRef] = {}
    for table in tree.find_all(exp.Table, bfs=False):
        if not isinstance(table.this, exp.Identifier):
            continue  # a function in FROM (generate_series(…))
        schema = identifier_name(table.args["db"]) if table.args.get("db") else None
        name = identifier_name(table.this)
        if schema is None and name in ctes:
            continue
        refs.setdefault((schema, name), TableRef(schema, name, f"{schema}.{name}" if schema else name))
    return list(refs.values())

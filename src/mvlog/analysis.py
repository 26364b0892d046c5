"""Query analysis with sqlglot: what kind of view a query is, and what it reads.

:func:`analyze` is pure (no database): it parses the view query in PostgreSQL's
dialect, finds its base tables, classifies it (DESIGN.md section 4) and collects the
reasons why it cannot be refreshed fast. Catalog facts (primary keys) are joined in
by the planner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from mvlog.errors import ConfigError

DIALECT = "postgres"

# Functions whose value changes between evaluations or over time: a view using them
# cannot be maintained from changed keys alone.
VOLATILE_FUNCTIONS = {
    "now", "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday",
    "random", "setseed", "gen_random_uuid", "uuid_generate_v4", "nextval", "currval", "setval",
    "txid_current", "pg_current_xact_id", "pg_sleep", "current_setting", "age",
}
VOLATILE_NODES = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Rand)


class ViewClass(str, Enum):
    SIMPLE = "simple"
    JOIN = "join"
    AGGREGATE = "aggregate"
    UNION = "union"  # UNION ALL of branches of the other classes
    OTHER = "other"


@dataclass(frozen=True)
class TableRef:
    """A base table as the query names it."""

    schema: str | None
    name: str
    alias: str

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass
class Analysis:
    """What a view query is. ``reasons`` say why fast refresh is impossible."""

    query: str
    tree: exp.Query
    view_class: ViewClass
    tables: list[TableRef]
    reasons: list[str] = field(default_factory=list)
    branches: list["Analysis"] = field(default_factory=list)  # UNION ALL: each branch's analysis

    @property
    def fast_possible(self) -> bool:
        return not self.reasons


def identifier_name(node: exp.Identifier | str) -> str:
    """The name PostgreSQL gives an identifier: quoted as written, unquoted folded to lower case."""
    if isinstance(node, str):
        return node
    return node.this if node.quoted else node.this.lower()


def parse(query: str) -> exp.Expression:
    """Parse one SQL statement in PostgreSQL's dialect, or raise ConfigError."""
    try:
        statements = [s for s in sqlglot.parse(query, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise ConfigError(f"the query cannot be parsed: {first}") from None
    if len(statements) != 1:
        raise ConfigError("the query must be exactly one SELECT statement")
    return statements[0]


def _table_refs(select: exp.Select) -> list[TableRef]:
    refs = []
    sources = [select.args.get("from_").this] if select.args.get("from_") else []
    sources += [join.this for join in select.args.get("joins") or []]
    for source in sources:
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            schema = identifier_name(source.args["db"]) if source.args.get("db") else None
            name = identifier_name(source.this)
            alias = identifier_name(source.args["alias"].this) if source.alias else name
            refs.append(TableRef(schema, name, alias))
    return refs


def _base_table_refs(tree: exp.Query) -> list[TableRef]:
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


def join_side(join: exp.Join) -> str:
    """INNER, LEFT, RIGHT, FULL or CROSS (a comma join is CROSS: its condition is in WHERE)."""
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if side:
        return side
    if kind == "CROSS" or not (join.args.get("on") or join.args.get("using") or join.args.get("method")):
        return "CROSS"
    return "INNER"


def _join_reasons(joins: list[exp.Join]) -> list[str]:
    """Why a join chain cannot be refreshed fast: every row of an outer-join view must hold a
    row of its first table (its *root*: LEFT joins after it, or one RIGHT join right after it)."""
    reasons, outer = [], False
    for i, join in enumerate(joins):
        side = join_side(join)
        if side == "FULL":
            reasons.append("FULL OUTER JOIN is not incrementally maintainable: no table is present in every row")
        elif side == "RIGHT" and i > 0:
            reasons.append("a RIGHT JOIN after the first join is not incrementally maintainable: "
                           "write the chain with LEFT JOINs")
        elif side == "CROSS" and outer:
            reasons.append("a comma or CROSS join after an outer join is not incrementally maintainable: "
                           "write it as JOIN … ON")
        outer = outer or side in ("LEFT", "RIGHT", "FULL")
    return reasons


def _function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower() if isinstance(node, exp.Func) else ""


def analyze(query: str) -> Analysis:
    """Classify a view query and list why it cannot be fast-refreshed, if it cannot."""
    tree = parse(query)
    if not isinstance(tree, exp.Query):
        raise ConfigError("the query must be a SELECT statement")
    if isinstance(tree, exp.SetOperation):
        return _analyze_set_operation(query, tree)
    return _analyze_select(query, tree)


def _union_all_branches(tree: exp.Expression) -> list[exp.Expression] | None:
    """The branches of a chain of UNION ALLs (None if it is another set operation)."""
    if isinstance(tree, exp.Subquery):
        return _union_all_branches(tree.this)
    if not isinstance(tree, exp.SetOperation):
        return [tree]
    if not isinstance(tree, exp.Union) or tree.args.get("distinct") or tree.args.get("with_"):
        return None
    left, right = _union_all_branches(tree.this), _union_all_branches(tree.expression)
    return None if left is None or right is None else left + right


def _analyze_set_operation(query: str, tree: exp.SetOperation) -> Analysis:
    """UNION ALL: each branch is a view of its own (a hidden branch number joins the view key)."""
    tables = _base_table_refs(tree)
    branches = _union_all_branches(tree)
    if branches is None:
        name = "UNION" if isinstance(tree, exp.Union) else type(tree).__name__.upper()
        return Analysis(query, tree, ViewClass.OTHER, tables,
                        [f"set operations ({name}) other than UNION ALL are not incrementally maintainable"])
    reasons = []
    if tree.args.get("limit") or tree.args.get("offset"):
        reasons.append("LIMIT/OFFSET is not incrementally maintainable")
    analyses = []
    for i, branch in enumerate(branches, 1):
        if not isinstance(branch, exp.Select):
            reasons.append(f"UNION ALL branch {i} is not a SELECT")
            continue
        analysis = _analyze_select(branch.sql(dialect=DIALECT), branch.copy())
        reasons += [f"UNION ALL branch {i}: {reason}" for reason in analysis.reasons]
        analyses.append(analysis)
    return Analysis(query, tree, ViewClass.OTHER if reasons else ViewClass.UNION, tables, reasons,
                    [] if reasons else analyses)


def _analyze_select(query: str, tree: exp.Select) -> Analysis:
    reasons: list[str] = []
    assert isinstance(tree, exp.Select)
    tables = _table_refs(tree)

    if tree.args.get("with_") or tree.args.get("with"):
        reasons.append("common table expressions (WITH) are not incrementally maintainable")
    if not tree.args.get("from_"):
        reasons.append("a query without FROM has no base table to log")
    sources = ([tree.args["from_"].this] if tree.args.get("from_") else []) + [
        j.this for j in tree.args.get("joins") or []
    ]
    if any(not isinstance(s, exp.Table) or not isinstance(s.this, exp.Identifier) for s in sources):
        reasons.append("FROM items other than tables (subqueries, functions, VALUES) are not incrementally maintainable")
    reasons += _join_reasons(tree.args.get("joins") or [])
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        reasons.append("SELECT DISTINCT ON is not incrementally maintainable (it keeps an arbitrary row per value)")
    elif distinct is not None and tree.args.get("group"):
        reasons.append("SELECT DISTINCT over GROUP BY is not incrementally maintainable")
    elif distinct is not None and any(isinstance(s, exp.Star) or isinstance(s.this, exp.Star) for s in tree.selects):
        reasons.append("SELECT DISTINCT * is not incrementally maintainable: name the columns")
    if tree.args.get("limit") or tree.args.get("offset") or tree.args.get("fetch"):
        reasons.append("LIMIT/OFFSET is not incrementally maintainable")
    if any(tree.find_all(exp.Window)):
        reasons.append("window functions are not incrementally maintainable")
    nested = [s for s in tree.find_all(exp.Select) if s is not tree]
    if nested:
        reasons.append("subqueries are not incrementally maintainable")
    for node in tree.find_all(exp.Func):
        if isinstance(node, VOLATILE_NODES) or _function_name(node) in VOLATILE_FUNCTIONS:
            reasons.append(f"the non-deterministic function {node.sql(DIALECT)} is not incrementally maintainable")
            break

    aggregate = bool(distinct) or bool(tree.args.get("group")) or bool(tree.args.get("having")) or any(
        isinstance(node, exp.AggFunc) for e in tree.selects for node in e.find_all(exp.AggFunc)
    )
    joined = len(sources) > 1
    if reasons:  # complete refresh only: it depends on every table it reads, wherever
        view_class = ViewClass.OTHER
        tables = _base_table_refs(tree)
    elif aggregate:
        view_class = ViewClass.AGGREGATE
    elif joined:
        view_class = ViewClass.JOIN
    else:
        view_class = ViewClass.SIMPLE
    return Analysis(query, tree, view_class, tables, reasons)


def projected_columns(select: exp.Select, table_alias: str, columns: list[str]) -> dict[str, str]:
    """For each of ``columns`` of the table ``table_alias`` that the query outputs unchanged, its output name.

    ``SELECT *`` and ``SELECT alias.*`` output every column under its own name.
    """
    found: dict[str, str] = {}
    single_table = len(_table_refs(select)) == 1
    for projection in select.selects:
        target = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(target, exp.Star) or (isinstance(target, exp.Column) and isinstance(target.this, exp.Star)):
            qualifier = target.table if isinstance(target, exp.Column) else ""
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

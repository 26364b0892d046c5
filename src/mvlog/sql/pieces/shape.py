"""View shapes: how a view's rows are keyed and what SQL reads them.

A shape joins the pure analysis of a query with its logs (primary keys). It says
which Delta columns identify a view row (the *view key*), which hidden ``_mvlog_``
columns must be added for that, and — for join and aggregate views — which
expressions over the FROM items compute the view key of a base-row combination.
:mod:`mvlog.sql.pieces.keying` builds shapes (chosen by :func:`mvlog.sql.pieces.choice.shape_view`); this module
is the plain data.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass

from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, LogInfo
from mvlog.sql.analyze.analysis import ViewClass


def ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def col(name: str, table: str | None = None) -> exp.Column:
    return exp.column(ident(name), table=ident(table) if table else None)


@dataclass(frozen=True)
class TableKey:
    """One FROM item of a view: its alias, its log, and the key-map columns holding its primary key."""

    alias: str
    log: LogInfo
    keymap_columns: tuple[str, ...]
    semi: bool = False  # read by a subquery expression only: in the lineage, not in the view key


@dataclass(frozen=True)
class Tie:
    """A subquery tied to the view's root by equalities alone, ``inner[i] = outer[i]`` (``inner``
    over the subquery's tables ``aliases``, ``outer`` over the root's columns; its other conditions
    over its own tables). Its key-map branch keeps each of its rows' ``inner`` values, not the
    (root, row, group) combinations they tie: those are its rows times the roots of equal values
    (TPC-DS q06's item of a category times the items of that category, times their groups)."""

    aliases: tuple[str, ...]
    inner: tuple[str, ...]
    outer: tuple[str, ...]


@dataclass(frozen=True)
class RangeKey:
    """The first view-key column and the base-table column it equals. A complete refresh reads
    the view in ranges of it (bounds from the column's PostgreSQL statistics), so the Delta
    table's files each hold one key range and a MERGE can skip the files its keys miss."""

    column: str  # the view's output column
    log: LogInfo  # the base table, by its log
    base_column: str
    grouped: bool = False  # an aggregate's group column: the view has one row per distinct value


@dataclass(frozen=True)
class AggregateDeltas:
    """How an aggregate view's groups are maintained by deltas (:mod:`mvlog.sql.generate.aggdelta`): the key map
    keeps each lineage row's aggregate *inputs*, a group table each group's state (row count,
    and per input its non-NULL count and, if summed, its sum), and a refresh adds what changed
    rows contribute now and subtracts what they contributed at the last refresh."""

    inputs: tuple[str, ...]  # SQL over the base rows (the FROM items' aliases), one per distinct input
    summed: tuple[bool, ...]  # per input: summed (sum, avg) or only counted (count)
    outputs_sql: str  # SELECT <the view's outputs over the group state>, PRESENT WHERE <a row exists>
    groups: str  # mvlog.<groups>: each group's state at the view's last refresh
    aggregates: tuple[str, ...]  # the view's aggregates, as written (for explain)
    # ("min" | "max", input): kept in the key map as values, found per group by an index probe
    extremes: tuple[tuple[str, int], ...] = ()
    # inputs counted DISTINCT: the group table keeps the count, the key map's probes its changes
    distinct: tuple[int, ...] = ()

    def raw(self, j: int) -> bool:
        """Whether the key map keeps input ``j``'s value (summed, an extreme, counted distinct), not
        1/0 for non-NULL."""
        return self.summed[j] or j in self.probed

    @property
    def probed(self) -> tuple[int, ...]:
        """The inputs the key map is indexed on per group (MIN/MAX and COUNT(DISTINCT …) probes)."""
        return tuple(dict.fromkeys([*(j for _, j in self.extremes), *self.distinct]))


@dataclass(frozen=True)
class Ranged:
    """A range parameter (:class:`mvlog.sql.analyze.subqueries.RangeParameter`) with the log of the table
    whose rows it compares (:mod:`mvlog.sql.strategies.ranges`)."""

    log: LogInfo
    alias: str
    value: str  # SQL over the alias's columns
    subquery: str  # the uncorrelated scalar subquery
    own_logs: tuple[LogInfo, ...] = ()  # the logs only the subquery reads (part of the view's logs)


@dataclass(frozen=True)
class Piece:
    """One piece of a composed view (:mod:`mvlog.sql.strategies.composed`): a view of its own, kept fast,
    whose whole result is kept in ``mvlog.<table>``."""

    inner: ViewShape
    relation: str  # its name in the query on top
    table: str  # mvlog.<table>: its rows at the view's last refresh
    columns: tuple[str, ...]  # its columns as written (its own and hidden keys)


@dataclass(frozen=True)
class Composition:
    """A query over pieces it cannot be keyed through (:mod:`mvlog.sql.strategies.composed`): several
    aggregated CTEs joined, an aggregate over one that does not fold, a window over an aggregate,
    set operations of aggregates… Each piece is kept fast; the query is recomputed from their rows."""

    pieces: tuple[Piece, ...]
    outer_sql: str  # the query with piece i read from the relation pieces[i].relation
    keys: str  # mvlog.<keys>: the view's keys at its last refresh (its other tables may have changed since)


@dataclass(frozen=True)
class TopN:
    """A top-N view (``ORDER BY … LIMIT n [OFFSET m]``, :mod:`mvlog.sql.strategies.topn`): the query without
    them (the *full view*) is kept by its own strategy, and its first ``offset + limit + margin``
    rows, in the view's order with ties broken by the view key, in ``mvlog.<table>``."""

    full_sql: str  # the full view's SELECT (the shape's select_sql without ORDER BY and LIMIT)
    order: tuple[tuple[str, bool, bool], ...]  # (output column, descending, NULLs first), as written
    limit: int
    offset: int
    margin: int  # rows kept below the cut, so that rows leaving the top do not force a recompute
    table: str  # mvlog.<table>: the full view's first rows at the view's last refresh
    columns: tuple[str, ...]  # the full view's columns (the query's and the hidden keys)

    @property
    def capacity(self) -> int:
        return self.offset + self.limit + self.margin


class ShapeKind(enum.Enum):
    """What keeps a view (or a piece of one): one kind per strategy, read from the shape by
    :func:`kind_of` and mapped to its strategy by :data:`mvlog.sql.strategies.registry.STRATEGIES`."""

    COMPLETE = "complete"  # complete refresh only
    SIMPLE = "simple"  # one table, keyed by its primary key
    JOIN = "join"  # inner joins, keyed by every table's primary key
    OUTER_JOIN = "outer join"  # outer joins, subqueries: traced to the roots a change touches
    AGGREGATE_BY_DELTAS = "aggregate by deltas"  # GROUP BY, each group's state kept
    AGGREGATE_RECOMPUTED = "aggregate recomputed"  # GROUP BY, affected groups recomputed
    OUTER_AGGREGATE = "outer aggregate"  # GROUP BY over outer joins
    GLOBAL_AGGREGATE = "global aggregate"  # an aggregate without GROUP BY: one row
    WINDOW = "window"  # window functions sharing a PARTITION BY: affected partitions recomputed
    UNION_ALL = "union all"  # UNION ALL, FULL JOIN, GROUPING SETS: a strategy per branch
    UNION_DISTINCT = "union distinct"  # UNION, an aggregate over a UNION ALL
    RANGES = "ranges"  # scalar subqueries compared with one table's rows, over the view's own kind
    COMPOSED = "composed"  # a query over pieces kept fast, recomputed from their rows
    TOP_N = "top-n"  # ORDER BY … LIMIT, over the full view's own kind


@dataclass(frozen=True)
class ViewShape:
    """How a view is keyed and read (plain data: printable, testable without a database)."""

    name: str
    view_class: ViewClass
    fast_reasons: tuple[str, ...]
    logs: tuple[LogInfo, ...]
    key_columns: tuple[str, ...]  # Delta columns identifying a view row
    hidden_columns: tuple[str, ...]
    select_sql: str  # the view query plus hidden key columns
    tables: tuple[TableKey, ...] = ()  # join and aggregate views: every FROM item
    key_exprs: tuple[str, ...] = ()  # SQL computing each key column from a base-row combination
    core_sql: str = ""  # SELECT 1 FROM <from items> WHERE <where>: the rows the view is computed from
    keymap: str | None = None  # mvlog.<keymap>: base-row keys -> view key, kept at last_V
    global_aggregate: bool = False
    range_key: RangeKey | None = None
    # Outer joins: tables[0] is the *root*, present in every row; core_sql is the lineage (see
    # lineage.lineage), and a change is traced to the roots whose rows it touches, then to view keys.
    outer: bool = False
    # An aggregate with subqueries: its key map holds the lineage without them (the first query,
    # SELECT 1 FROM …) and, per subquery, its rows tied to the root's and the group's (the others):
    # a pair per subquery row, not a product of every subquery's rows with the outer rows.
    keymap_cores: tuple[str, ...] = ()
    # Per key-map branch, the subquery's Tie when it is tied to the root by values alone (its
    # branch then keeps its rows' values: the core is SELECT 1 FROM its tables WHERE its own conditions).
    keymap_ties: tuple[Tie | None, ...] = ()
    # UNION ALL: each branch's shape (its key map named after the branch) and its SELECT with the
    # view's two hidden key columns (BRANCH_COLUMN, ROW_KEY_COLUMN) instead of its own.
    branches: tuple[ViewShape, ...] = ()
    branch_selects: tuple[str, ...] = ()
    # Window views: the PARTITION BY its window functions share (over the base rows, like
    # key_exprs); the key map maps base rows to it, and a refresh recomputes whole partitions.
    partition_exprs: tuple[str, ...] = ()
    # A FULL JOIN view: its branches are the rows with a row of the first table and those without.
    full_join: bool = False
    # A UNION (distinct) view: keyed by its output row; its branches are SELECT DISTINCT views.
    distinct: bool = False
    # An aggregate over a UNION ALL: its branches are SELECT DISTINCT views of its groups.
    over_union: bool = False
    # Aggregate views: maintained by deltas, or (None) each affected group recomputed, and why.
    deltas: AggregateDeltas | None = None
    recompute_reason: str | None = None
    # Aggregate views: per key column, whether it can never be NULL (a NOT NULL column of a table
    # no outer join extends): matched by = even where another key holds a NULL (hashable).
    null_free_keys: tuple[bool, ...] = ()
    # Aggregate views: per key column, whether another key column (its table's whole primary key)
    # determines it: the read matches the affected keys without it (an estimate PostgreSQL gets right).
    determined_keys: tuple[bool, ...] = ()
    # A join view: keyed by its tables' primary keys, which its key map holds as they are (other
    # key maps map those keys to a view key, or a window view's to a partition).
    row_keyed: bool = False
    # An aggregate by deltas with parameters (uncorrelated scalar subqueries in HAVING): the logs
    # of the tables they read; a window with rows in one of them evaluates every group again.
    parameter_logs: tuple[LogInfo, ...] = ()
    # A top-N view: its order, limit and margin; select_sql is then the full view's first rows.
    top: TopN | None = None
    # Uncorrelated scalar subqueries compared with one FROM item's rows: their last values are
    # kept, and a move of one puts the rows between its old and new value among the changed rows.
    ranges: tuple[Ranged, ...] = ()
    # A query over pieces mvlog keeps (aggregates that do not merge, windows over them, set
    # operations): the pieces kept as state, the query recomputed over them.
    composed: Composition | None = None

    @property
    def fast_possible(self) -> bool:
        return not self.fast_reasons

    @property
    def kind(self) -> ShapeKind:
        return kind_of(self)


def kind_of(shape: ViewShape) -> ShapeKind:
    """The kind of ``shape``: the one place that reads its class and fields to say what keeps it.
    A layered kind (top-N, composed, ranges) is read before the kind of what it is layered on."""
    if not shape.fast_possible:
        return ShapeKind.COMPLETE
    if shape.top is not None:
        return ShapeKind.TOP_N
    if shape.composed is not None:
        return ShapeKind.COMPOSED
    if shape.ranges:
        return ShapeKind.RANGES
    if shape.branches:
        return ShapeKind.UNION_DISTINCT if shape.distinct or shape.over_union else ShapeKind.UNION_ALL
    if shape.view_class is ViewClass.SIMPLE:
        return ShapeKind.SIMPLE
    if shape.partition_exprs:
        return ShapeKind.WINDOW
    if shape.global_aggregate:
        return ShapeKind.GLOBAL_AGGREGATE
    if shape.view_class is ViewClass.AGGREGATE:
        if shape.outer:
            return ShapeKind.OUTER_AGGREGATE
        return ShapeKind.AGGREGATE_BY_DELTAS if shape.deltas is not None else ShapeKind.AGGREGATE_RECOMPUTED
    return ShapeKind.OUTER_JOIN if shape.outer else ShapeKind.JOIN



SEMI_COLUMN = HIDDEN_PREFIX + "semi"  # a split key map's row: 0 the lineage's, i the i-th subquery's


def tie_column(branch: int, n: int) -> str:
    """The key-map column of a tied branch's ``n``-th value (see :class:`Tie`)."""
    return f"{HIDDEN_PREFIX}tie{branch}_{n}"
BRANCH_COLUMN = HIDDEN_PREFIX + "branch"  # a UNION ALL view's branch number, 1-based


ROW_KEY_COLUMN = HIDDEN_PREFIX + "row_key"  # the branch's view key as row text: never NULL, one column


PIECE_MARK = "#p"  # a composed view's piece is named <view>#p<i> (a view's name has no '#')


def relation(i: int) -> str:
    """The name piece ``i`` (1-based) of a composed view has in the query on top."""
    return f"{HIDDEN_PREFIX}piece{i}"


def piece_name(view: str, i: int) -> str:
    """The name of piece ``i`` of a composed view (its state tables are the view's, suffixed ``_p<i>``)."""
    return f"{view}{PIECE_MARK}{i}"


def keymap_name(view: str, branch: int | None = None) -> str:
    """The key map of a view (of one branch of a UNION ALL view: ``<map>_b<branch>``; of a composed
    view's piece: ``<map>_p<i>``)."""
    if PIECE_MARK in view:
        owner, piece = view.split(PIECE_MARK, 1)
        return keymap_name(owner) + f"_p{piece}" + (f"_b{branch}" if branch is not None else "")
    digest = hashlib.sha256(view.encode()).hexdigest()[:8]
    return f"keys$_{view[:40].lower()}_{digest}" + (f"_b{branch}" if branch is not None else "")


def top_name(view: str) -> str:
    """The table of a top-N view's first rows (:class:`TopN`)."""
    return "top$" + keymap_name(view).removeprefix("keys$")


def inner_name(view: str) -> str:
    """The table of a composed view's piece's rows (:class:`Piece`; ``view``: the piece's name)."""
    return "inner$" + keymap_name(view).removeprefix("keys$")


def outer_keys_name(view: str) -> str:
    """The table of a composed view's keys at its last refresh (:class:`Composition`)."""
    return "outer$" + keymap_name(view).removeprefix("keys$")


def parameters_name(view: str) -> str:
    """The table of a view's range parameters' values at its last refresh (:class:`Ranged`)."""
    return "param$" + keymap_name(view).removeprefix("keys$")


def groups_name(keymap: str) -> str:
    """The group table of an aggregate view maintained by deltas, named after its key map."""
    return "groups$" + keymap.removeprefix("keys$")


def add_hidden(select: exp.Select, expression: exp.Expr, name: str) -> None:
    """Add ``expression AS name`` to ``select``'s outputs (a hidden key column)."""
    select.select(exp.alias_(expression, ident(name)), copy=False)


def downgrade(shape: ViewShape, query: str, reason: str) -> ViewShape:
    """The same view as complete-only ("other"), with the reason."""
    text = query.strip().rstrip(";").strip()
    return ViewShape(shape.name, ViewClass.OTHER, (reason,), shape.logs, (), (), text)


def unit_column(i: int) -> str:
    """The key-map column of an aggregate's group expression ``i`` (a window view's partition)."""
    return f"{HIDDEN_PREFIX}k{i}"


def input_column(j: int) -> str:
    """The key-map column of a delta-maintained aggregate's input ``j`` (see :mod:`mvlog.sql.generate.aggdelta`)."""
    return f"{HIDDEN_PREFIX}a{j}"

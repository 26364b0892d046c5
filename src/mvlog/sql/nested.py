"""A query over an aggregated derived table or CTE that does not merge into it — TPC-H Q13's
count of counts (``GROUP BY c_count`` over a ``GROUP BY c_custkey``), Q15's max of sums: the
analysis refuses them (:data:`mvlog.sql.analysis.AGGREGATE_NOT_MERGED`), and ``apply`` tries this.

The aggregate (the *inner* view) is a view of its own shape, kept fast by its own strategy (its
key map and group table under the view's name); its whole result is kept in PostgreSQL
(``mvlog."inner$_<view>"``), as the rows of a view over a view are. The query itself is recomputed
on each refresh from that result with the inner view's changed rows in place, so it costs the
inner result's size, not the base tables'. Its rows have no key of their own: each is keyed by
its text and its number among equal rows (``_mvlog_row_key``, ``_mvlog_dup``). The keys of the
last refresh are kept too (``mvlog."outer$_<view>"``: the query's other tables may have changed
since, so they cannot be computed again); a refresh writes the keys of both, and a row equal
before and after keeps its key and hash and is not written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlglot
from sqlglot import exp

from mvlog.model import HIDDEN_PREFIX, PRESENT
from mvlog.sql.analysis import ViewClass
from mvlog.sql.changes import key_names, keys_match
from mvlog.sql.keymap import drop_table_sql, state_table
from mvlog.sql.shape import ROW_KEY_COLUMN, Nested, ViewShape, col, ident, inner_name, outer_keys_name
from mvlog.sql.sqltree import DIALECT, own_aggregates, with_ctes
from mvlog.sql.strategy import ColumnsOf, Layered, Strategy

INNER = HIDDEN_PREFIX + "inner"  # in the outer query: the inner view's rows
DUP = HIDDEN_PREFIX + "dup"  # a row's number among equal rows

CHANGED, OLD, NEW, OUT_NEW = (HIDDEN_PREFIX + n for n in ("changed", "old", "new", "out_new"))


def _aggregated(node: exp.Expr) -> bool:
    return isinstance(node, exp.Select) and (node.args.get("group") is not None or own_aggregates(node))


def _candidates(tree: exp.Expr) -> list[exp.Expr]:
    """The query's aggregated CTEs and derived tables in FROM (the expressions holding them)."""
    with_ = tree.args.get("with_")
    ctes = [c for c in (with_.expressions if with_ else []) if _aggregated(c.this)]
    derived = [s for s in tree.find_all(exp.Subquery)
               if isinstance(s.parent, (exp.From, exp.Join)) and _aggregated(s.this)]
    return [*ctes, *derived]


def split(query: str) -> str | None:
    """The inner aggregate's SELECT, if the query reads exactly one aggregated derived table or
    CTE (a CTE may be read several times) that reads no other CTE of the query."""
    try:
        tree = sqlglot.parse_one(query, dialect=DIALECT)
    except sqlglot.errors.ParseError:
        return None
    if not isinstance(tree, exp.Query):
        return None
    found = _candidates(tree)
    if len(found) != 1:
        return None
    inner = found[0].this
    with_ = tree.args.get("with_")
    names = {c.alias_or_name for c in (with_.expressions if with_ else [])}
    if any(t.name in names and not t.db for t in inner.find_all(exp.Table)):
        return None
    return inner.sql(dialect=DIALECT)


def outer_sql(query: str, visible: Sequence[str]) -> str:
    """The query with its aggregate read from the relation INNER (its ``visible`` columns)."""
    tree = sqlglot.parse_one(query, dialect=DIALECT)
    (found,) = _candidates(tree)
    found.set("this", exp.select(*[col(c) for c in visible]).from_(exp.Table(this=ident(INNER))))
    return tree.sql(dialect=DIALECT)


def keyed(select: exp.Expr | str) -> exp.Select:
    """``SELECT o.*, <the row as text>, <its number among equal rows> FROM (select) o``."""
    text = exp.cast(exp.Anonymous(this="ROW", expressions=[exp.column(exp.Star(), table=ident("o"))]),
                    exp.DataType.build("text"))
    dup = exp.Window(this=exp.Anonymous(this="row_number"), partition_by=[text.copy()])
    query = exp.maybe_parse(select, dialect=DIALECT) if isinstance(select, str) else select
    return (exp.select(exp.column(exp.Star(), table=ident("o")), exp.alias_(text, ident(ROW_KEY_COLUMN)),
                       exp.alias_(dup, ident(DUP)))
            .from_(exp.Subquery(this=query, alias=exp.TableAlias(this=ident("o")))))


def keep_nested(shape: ViewShape, inner: ViewShape, outer: str, columns: Sequence[str], query: str) -> ViewShape:
    """The view ``shape`` (complete-only as analysed) kept over its fast ``inner`` aggregate."""
    return ViewShape(shape.name, ViewClass.AGGREGATE, (), tuple(dict.fromkeys(shape.logs + inner.logs)),
                     (ROW_KEY_COLUMN, DUP), (ROW_KEY_COLUMN, DUP), keyed(query).sql(dialect=DIALECT),
                     nested=Nested(inner, outer, inner_name(shape.name), tuple(columns), outer_keys_name(shape.name)))


def _table(nested: Nested) -> exp.Table:
    return state_table(nested.table)


def _keys_table(nested: Nested) -> exp.Table:
    return state_table(nested.keys)


def _over(nested: Nested, relation: str) -> exp.Select:
    """The outer query over ``relation`` (a CTE holding the inner view's rows), keyed."""
    tree = sqlglot.parse_one(nested.outer_sql, dialect=DIALECT)
    for table in list(tree.find_all(exp.Table)):
        if table.name == INNER and not table.db:
            table.set("this", ident(relation))
    return keyed(tree)


def _new_rows_ctes(nested: Nested, changed: str) -> list[tuple[str, exp.Expr]]:
    """CHANGED (the inner view's fast read), NEW (its rows after) and OUT_NEW (the view after, keyed)."""
    keys = nested.inner.key_columns
    cols = [col(c) for c in nested.columns]
    unchanged = exp.not_(exp.Exists(this=exp.select(exp.Literal.number(1)).from_(CHANGED)
                                    .where(keys_match(keys, CHANGED, "o"))))
    new = exp.union(exp.select(*[col(c, "o") for c in nested.columns]).from_(exp.Table(
        this=ident(OLD), alias=exp.TableAlias(this=ident("o")))).where(unchanged),
        exp.select(*cols).from_(CHANGED).where(col(PRESENT)), distinct=False)
    return [(CHANGED, exp.maybe_parse(changed, dialect=DIALECT)), (OLD, exp.select(*cols).from_(_table(nested))),
            (NEW, new), (OUT_NEW, _over(nested, NEW))]


def read_sql(nested: Nested, changed: str) -> str:
    """The fast read: the view's keys at its last refresh and now, LEFT JOIN its rows now (PRESENT)."""
    names = key_names(2)
    affected = exp.union(
        exp.select(exp.alias_(col(ROW_KEY_COLUMN), ident(names[0])), exp.alias_(col(DUP), ident(names[1])))
        .from_(_keys_table(nested)),
        exp.select(exp.alias_(col(ROW_KEY_COLUMN), ident(names[0])), exp.alias_(col(DUP), ident(names[1])))
        .from_(OUT_NEW))
    rows = exp.select(exp.Star(), exp.alias_(exp.true(), ident(PRESENT))).from_(OUT_NEW)
    on = exp.and_(exp.EQ(this=col(ROW_KEY_COLUMN, "v"), expression=col(names[0], "k")),
                  exp.EQ(this=col(DUP, "v"), expression=col(names[1], "k")))
    query = (exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
             .from_(exp.Subquery(this=affected, alias=exp.TableAlias(this=ident("k"))))
             .join(exp.Subquery(this=rows, alias=exp.TableAlias(this=ident("v"))), on=on, join_type="left"))
    return with_ctes(query, _new_rows_ctes(nested, changed)).sql(dialect=DIALECT)


def update_sql(nested: Nested, changed: str) -> list[str]:
    """The view's keys and the inner view's rows at the refresh's end, each in one statement (its
    CTEs see the tables as they were): the keys first, computed from the inner rows before."""
    keys = nested.inner.key_columns
    new_keys = exp.insert(exp.select(col(ROW_KEY_COLUMN), col(DUP)).from_(OUT_NEW), _keys_table(nested),
                          columns=[ROW_KEY_COLUMN, DUP])
    outer = with_ctes(new_keys, [*_new_rows_ctes(nested, changed),
                              (HIDDEN_PREFIX + "gone", exp.Delete(this=_keys_table(nested)))])
    gone = exp.Delete(this=_table(nested).as_(ident("o")),
                      where=exp.Where(this=exp.Exists(this=exp.select(exp.Literal.number(1)).from_(CHANGED)
                                                      .where(keys_match(keys, CHANGED, "o")))))
    insert = exp.insert(exp.select(*[col(c) for c in nested.columns]).from_(CHANGED).where(col(PRESENT)),
                        _table(nested), columns=list(nested.columns))
    inner = with_ctes(insert, [(CHANGED, exp.maybe_parse(changed, dialect=DIALECT)), (HIDDEN_PREFIX + "gone", gone)])
    return [outer.sql(dialect=DIALECT), inner.sql(dialect=DIALECT)]


def rebuild_sql(nested: Nested, query: str, empty: bool = False) -> list[str]:
    """After a complete refresh: the inner view's rows, read whole, and the view's keys
    (``query``: the view's keyed SELECT; ``empty``: stand-ins)."""
    rows = exp.select(exp.Star()).from_(exp.Subquery(
        this=exp.maybe_parse(nested.inner.select_sql, dialect=DIALECT), alias=exp.TableAlias(this=ident("i"))))
    keys = exp.select(col(ROW_KEY_COLUMN), col(DUP)).from_(exp.Subquery(
        this=exp.maybe_parse(query, dialect=DIALECT), alias=exp.TableAlias(this=ident("v"))))
    if empty:
        rows, keys = rows.limit(0), keys.limit(0)
    return [drop_table_sql(nested.table),
            exp.Create(this=_table(nested), kind="TABLE", expression=rows).sql(dialect=DIALECT),
            drop_table_sql(nested.keys),
            exp.Create(this=_keys_table(nested), kind="TABLE", expression=keys).sql(dialect=DIALECT)]


class NestedRows(Layered):
    """A query over an aggregate that does not merge: the aggregate kept by ``under``, its rows as state."""

    def __init__(self, shape: ViewShape, inner: Strategy):
        super().__init__(shape, inner)
        assert shape.nested is not None
        self.nested: Nested = shape.nested

    def how(self) -> str:
        return (f"its aggregated derived table or CTE is kept fast ({self.under.how()}) with its rows in "
                f"mvlog.{self.nested.table}; the query is recomputed from those rows, before and after, and the "
                f"rows that differ are written (keyed by their text)")

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return read_sql(self.nested, self.under.read_sql(since, null_keys))

    def state_update(self, since: datetime | None) -> list[str]:
        # The inner rows' update reads the inner view's state as of the last refresh: first.
        return [*update_sql(self.nested, self.under.read_sql(since, self.null_safe(since))),
                *self.under.state_update(since)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        return [*self.under.state_rebuild(columns_of), *rebuild_sql(self.nested, self.shape.select_sql)]

    def stand_in_sql(self) -> list[str]:
        return [*self.under.stand_in_sql(), *rebuild_sql(self.nested, self.shape.select_sql, empty=True)]

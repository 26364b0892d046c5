"""One strategy per view shape: everything the pipeline asks of a view of that shape.

A :class:`Strategy` answers, for one :class:`~mvlog.sql.shape.ViewShape`: how its affected keys are
found (``with_affected``) and its rows restricted to them (``restricted``), the fast read
(``read_sql``), which reads need the null-safe branch (``null_key_checks``), the state it keeps in
PostgreSQL (key maps, group tables) and the statements that create, update and rebuild that
state, every statement a fast refresh sends (``statements``, checked by PostgreSQL at apply), and
how ``explain`` words it. ``plan``, ``apply``, ``refresh`` and ``verify`` ask the strategy
(:func:`mvlog.sql.strategies.strategy_of` chooses it) instead of branching on the class — as
SQLMesh maps each model kind to one evaluation strategy. A new shape is a new strategy and its
tests. The SQL itself is built from :mod:`mvlog.sql.sqlgen`'s blocks; the set operations'
strategies are in :mod:`mvlog.sql.union`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from sqlglot import exp

from mvlog.model import CHANGED_KEY_PREFIX, PRESENT
from mvlog.sql import aggdelta, keymap, sqlgen
from mvlog.sql.changes import (
    AFFECTED,
    ROOTS,
    changed_keys_sql,
    key_names,
    parse_select,
    roots_ref,
    roots_sql,
    union_of,
)
from mvlog.sql.shape import BRANCH_COLUMN, ROW_KEY_COLUMN, ViewShape, col, groups_name, ident
from mvlog.sql.sqltree import DIALECT

Q = TypeVar("Q", bound=exp.Query)


def _row_text(names: list[str], table: str | None = None) -> exp.Expr:
    """``CAST(ROW(<names>) AS text)``: a key as one never-NULL text, as a UNION ALL view keys a branch's rows."""
    return exp.cast(exp.Anonymous(this="ROW", expressions=[col(n, table) for n in names]), exp.DataType.build("text"))
# The columns of a relation (``mvlog."…"``) as the database has them now, or None if it is missing.
ColumnsOf = Callable[[str], "list[str] | tuple[str, ...] | None"]

KEY_MAP_NOTE = ("old view keys come from mvlog's key map (base keys -> view key), because the logs hold "
                "primary keys only")


class Strategy:
    """A view that cannot be refreshed fast: complete refresh only (the base of every strategy)."""

    keeps_keymap = False  # whether a refresh keeps the shape's key map

    def __init__(self, shape: ViewShape):
        self.shape = shape

    # -- the fast read -----------------------------------------------------------------------------

    def how(self) -> str:
        """How a fast refresh finds the rows to recompute (``explain`` and ``plan`` say it)."""
        return "; ".join(self.shape.fast_reasons)

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        """``query`` with the CTE AFFECTED (``_mvlog_key_<i>``: the view keys to recompute), and what it needs."""
        raise NotImplementedError(f"view {self.shape.name} is not refreshed fast")

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        """``select_sql`` restricted to the rows of the affected keys, with PRESENT (disjoint parts)."""
        raise NotImplementedError(f"view {self.shape.name} is not refreshed fast")

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        """The fast read: affected keys LEFT JOIN their rows now (``null_keys``: per part, whether
        an affected key holds a NULL; see :meth:`null_key_checks`)."""
        current, *nullish = self.restricted(self.shape.select_sql, any(null_keys))
        query = sqlgen.join_affected(current, nullish[0] if nullish else None, self.shape.key_columns)
        return self.with_affected(query, since).sql(dialect=DIALECT)

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        """Per part whose keys may hold a NULL, the query telling whether one does (None: cannot)."""
        return [None]

    def union_part(self, branch: int, select_sql: str, since: datetime | None, null_keys: bool) -> exp.Query:
        """This view as branch ``branch`` of a UNION ALL view (``select_sql``: its SELECT with the
        union's hidden branch and row-key columns): its affected keys as (branch, row text) LEFT
        JOIN its restricted rows, with its own CTEs."""
        names = key_names(len(self.shape.key_columns))
        keys = exp.select(exp.alias_(exp.Literal.number(branch), ident(f"{CHANGED_KEY_PREFIX}0")),
                          exp.alias_(_row_text(names), ident(f"{CHANGED_KEY_PREFIX}1"))).from_(AFFECTED)
        current = union_of(self.restricted(select_sql, null_keys), distinct=False)
        on = exp.EQ(this=col(ROW_KEY_COLUMN, "v"), expression=col(f"{CHANGED_KEY_PREFIX}1", "k"))
        read = (exp.select(exp.column(exp.Star(), table=ident("k")), exp.column(exp.Star(), table=ident("v")))
                .from_(exp.Subquery(this=keys, alias=exp.TableAlias(this=ident("k"))))
                .join(exp.Subquery(this=current, alias=exp.TableAlias(this=ident("v"))), on=on, join_type="left"))
        return self.with_affected(read, since, null_keys)

    # -- the state it keeps --------------------------------------------------------------------------

    def keymapped(self) -> list[ViewShape]:
        """The shapes whose key maps a refresh keeps (the view's own, or its branches')."""
        return [self.shape] if self.keeps_keymap and self.shape.keymap is not None else []

    def state_update(self, since: datetime | None) -> list[str]:
        """After a fast refresh's Delta commit: bring the state from the last refresh to this one."""
        return [s for shape in self.keymapped() for s in keymap.keymap_update_sql(shape, since)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        """After a complete refresh: rebuild the state from the base tables. A key map is refilled
        only if its columns and probe indexes still fit (a refresh role may refill a table it does
        not own); otherwise dropped and made again."""
        statements = []
        for shape in self.keymapped():
            current = columns_of(keymap.keymap_table(shape).sql(dialect=DIALECT))
            if current is not None and not self._fits(shape, current, columns_of):
                statements += [keymap.drop_table_sql(shape.keymap or ""), *keymap.keymap_rebuild_sql(shape, False)]
            else:
                statements += keymap.keymap_rebuild_sql(shape, exists=current is not None)
        return statements

    @staticmethod
    def _fits(shape: ViewShape, columns: Sequence[str], columns_of: ColumnsOf) -> bool:
        indexed = all(columns_of(keymap.qualified(name)) is not None for name in keymap.probe_indexes(shape))
        return list(columns) == keymap.keymap_all_columns(shape) and indexed

    def state_misfit(self, columns_of: ColumnsOf) -> str | None:
        """Why the state kept at the last refresh cannot serve a fast one: a key map whose columns
        or probe indexes are not those this mvlog keeps (an earlier mvlog kept another layout)."""
        for shape in self.keymapped():
            current = columns_of(keymap.keymap_table(shape).sql(dialect=DIALECT))
            if current is not None and not self._fits(shape, current, columns_of):
                return f"its key map ({shape.keymap}) was kept in another layout (an earlier mvlog's)"
        return None

    def stand_in_sql(self) -> list[str]:
        """Empty temporary stand-ins for the state, for PostgreSQL to plan :meth:`statements` against."""
        return [s for shape in self.keymapped() for s in keymap.keymap_stand_in_sql(shape)]

    def probe_sql(self) -> list[str]:
        """Queries that fail if the state cannot be built for this view (checked at apply)."""
        return [keymap.keymap_probe_sql(shape) for shape in self.keymapped()]

    def statements(self, since: datetime) -> list[str]:
        """Every statement a fast refresh sends to PostgreSQL for a window after ``since``."""
        return []

    def any_dml_note(self) -> str:
        """What ``explain`` adds to REFRESH_FAST_AFTER_ANY_DML."""
        return ""


class Layered(Strategy):
    """A strategy over another (``under``), which keeps the view's underlying query as it keeps
    any view, while this one keeps state of its own on top (top-N, a query over an aggregate,
    range parameters). It passes on what it does not change."""

    def __init__(self, shape: ViewShape, under: Strategy):
        super().__init__(shape)
        self.under = under

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        return self.under.null_key_checks(since)

    def null_safe(self, since: datetime | None) -> tuple[bool, ...]:
        """Every part whose keys may hold a NULL read null-safely (exact either way): the reads
        a record step repeats, without the checks' answers."""
        return tuple(check is not None for check in self.null_key_checks(since))

    def keymapped(self) -> list[ViewShape]:
        return self.under.keymapped()

    def probe_sql(self) -> list[str]:
        return self.under.probe_sql()

    def statements(self, since: datetime) -> list[str]:
        checks = [c for c in self.null_key_checks(since) if c]
        reads = [self.read_sql(since), *([self.read_sql(since, self.null_safe(since))] if checks else [])]
        return [*reads, *checks, *self.state_update(since)]

    def any_dml_note(self) -> str:
        return self.under.any_dml_note()


class Simple(Strategy):
    """One table, filtered and projected: its changed keys joined back through its primary key."""

    def how(self) -> str:
        return "changed keys are joined back to the table through its primary key"

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        return query.with_(AFFECTED, as_=changed_keys_sql(self.shape.logs[0], since))

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_keys(self.shape, select_sql)

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return sqlgen.fast_simple_sql(self.shape, since)

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since)]


class Join(Strategy):
    """Inner joins: the view rows a changed row is in, now (the base) and at the last refresh (the key map)."""

    keeps_keymap = True

    def how(self) -> str:
        return "view rows involving a changed row of any table are recomputed; " + KEY_MAP_NOTE

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        return query.with_(AFFECTED, as_=sqlgen.keyed_affected_sql(self.shape, since))

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_keys(self.shape, select_sql)

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since), *self.state_update(since)]


class OuterJoin(Join):
    """Outer joins (and subqueries): the *roots* whose lineage rows hold a changed row, before or
    after the change, then every view row of those roots."""

    what = "view rows"

    def how(self) -> str:
        shape = self.shape
        root = shape.tables[0]
        semi = [t.log.qualified_table for t in shape.tables if t.semi]
        tied = (f"; rows of {', '.join(dict.fromkeys(semi))} count for the rows their subquery's condition ties them "
                f"to" if semi else "")
        return (f"rows of {root.log.qualified_table} (the root, present in every row) whose joined rows "
                f"hold a changed row, before or after the change, are found first{tied}; their {self.what}, before "
                f"and after, are recomputed exactly (a partner that appears or goes replaces a NULL-extended row); "
                + KEY_MAP_NOTE)

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        query = query.with_(ROOTS, as_=roots_sql(self.shape, since))
        return query.with_(AFFECTED, as_=sqlgen.outer_affected_sql(self.shape, roots_ref()))

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_roots(self.shape, select_sql)

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        # The roots' rows, matched to their keys by the root's key (never NULL), then null-safely
        # by the NULL-extended tables' keys among the few rows of one root.
        (current,) = self.restricted(self.shape.select_sql, False)
        query = sqlgen.left_join_keys(exp.select(exp.Star()).from_(AFFECTED), current, self.shape.key_columns,
                                      null_safe_from=len(self.shape.tables[0].keymap_columns))
        return self.with_affected(query, since).sql(dialect=DIALECT)


RECOMPUTED_NOTE = "; MIN and MAX stay exact after deletes because affected groups are recomputed"


class _Groups(Strategy):
    """What aggregates recomputed per affected group share: a NULL group key takes the null-safe
    branch of the read, and a group table left from when they were kept by deltas is dropped."""

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_keys(self.shape, select_sql, null_keys)

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return Strategy.read_sql(self, since, null_keys)

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        query = sqlgen.any_null_exists(AFFECTED, len(self.shape.key_columns))
        return [self.with_affected(query, since).sql(dialect=DIALECT)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        drops = [aggdelta.drop_groups_sql(groups_name(shape.keymap or "")) for shape in self.keymapped()]
        return [*super().state_rebuild(columns_of), *drops]

    def statements(self, since: datetime) -> list[str]:
        return [*super().statements(since), *[c for c in self.null_key_checks(since) if c],
                self.read_sql(since, (True,))]

    def any_dml_note(self) -> str:
        return RECOMPUTED_NOTE


class AggregateRecomputed(_Groups, Join):
    """GROUP BY over inner joins whose aggregates need the whole group: the groups of changed rows,
    before and after, recomputed."""

    def how(self) -> str:
        reason = self.shape.recompute_reason
        return ("the groups of changed rows, before and after the change, are recomputed exactly"
                + (f" ({reason})" if reason else "") + "; " + KEY_MAP_NOTE)


class OuterAggregate(_Groups, OuterJoin):
    """GROUP BY over outer joins or subqueries: the groups of the affected roots' rows recomputed."""

    what = "groups"


class AggregateByDeltas(Join):
    """GROUP BY kept by state (:mod:`mvlog.sql.aggdelta`): each affected group's new state = its
    old state (the group table) + what changed rows contribute now - what they contributed then."""

    def how(self) -> str:
        deltas = self.shape.deltas
        assert deltas is not None
        extremes = ("; MIN/MAX = the extreme of the changed rows now and of the group's unchanged rows in the key map "
                    "(an index probe per group, exact after the current extreme is deleted)" if deltas.extremes else "")
        return ("by deltas: each affected group's " + ", ".join(deltas.aggregates) + " = its state at the last "
                "refresh + what the changed rows contribute now - what they contributed then (kept per row in the "
                "key map, per group in mvlog." + deltas.groups + ")" + extremes + ", computed in PostgreSQL")

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return aggdelta.fast_delta_sql(self.shape, since)

    def state_update(self, since: datetime | None) -> list[str]:
        # The group table's update reads the key map as of the last refresh: first.
        return [*aggdelta.groups_update_sql(self.shape, since), *super().state_update(since)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        current = columns_of(aggdelta.groups_table(self.shape).sql(dialect=DIALECT))
        groups = (aggdelta.groups_rebuild_sql(self.shape, exists=current is not None)
                  if current is None or list(current) == aggdelta.groups_columns(self.shape)
                  else [aggdelta.drop_groups_sql(groups_name(self.shape.keymap or "")),
                        *aggdelta.groups_rebuild_sql(self.shape, exists=False)])
        return [*super().state_rebuild(columns_of), *groups]

    def stand_in_sql(self) -> list[str]:
        return [*super().stand_in_sql(), *aggdelta.groups_stand_in_sql(self.shape)]

    def union_part(self, branch: int, select_sql: str, since: datetime | None, null_keys: bool) -> exp.Query:
        # The delta read (group keys, outputs, PRESENT) as the union's columns: the visible
        # outputs, then the branch number and the group key as row text where the group is present.
        deltas = self.shape.deltas
        assert deltas is not None
        names = key_names(len(self.shape.key_columns))
        outputs = [p.alias_or_name for p in parse_select(deltas.outputs_sql).selects]
        visible = [n for n in outputs if n not in self.shape.hidden_columns and n != PRESENT]
        present = col(PRESENT, "d")
        return (exp.select(
            exp.alias_(exp.Literal.number(branch), ident(f"{CHANGED_KEY_PREFIX}0")),
            exp.alias_(_row_text(names, "d"), ident(f"{CHANGED_KEY_PREFIX}1")),
            *[col(n, "d") for n in visible],
            exp.alias_(exp.Case(ifs=[exp.If(this=present.copy(), true=exp.Literal.number(branch))]),
                       ident(BRANCH_COLUMN)),
            exp.alias_(exp.Case(ifs=[exp.If(this=present.copy(), true=_row_text(names, "d"))]), ident(ROW_KEY_COLUMN)),
            present)
            .from_(exp.Subquery(this=exp.maybe_parse(self.read_sql(since), dialect=DIALECT),
                                alias=exp.TableAlias(this=ident("d")))))

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since), *self.state_update(since)]


class GlobalAggregate(Strategy):
    """An aggregate without GROUP BY: one row, recomputed whenever any of its tables changed."""

    def how(self) -> str:
        return "a global aggregate is recomputed whenever any of its tables changed"

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        return query.with_(AFFECTED, as_=sqlgen.global_affected_sql(self.shape, since))

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_keys(self.shape, select_sql)

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since)]

    def any_dml_note(self) -> str:
        return RECOMPUTED_NOTE


class Window(Strategy):
    """Window functions with a shared PARTITION BY: the partitions of changed rows, before and
    after, recomputed whole (the key map maps base rows to their partition)."""

    keeps_keymap = True

    def how(self) -> str:
        return ("the partitions (PARTITION BY " + ", ".join(self.shape.partition_exprs) + ") of changed rows, before "
                "and after the change, are recomputed whole, their window functions included; " + KEY_MAP_NOTE)

    def _partitions(self, since: datetime | None) -> exp.Query:
        """The affected partitions (over outer joins: of the affected roots, read in place)."""
        if self.shape.outer:
            return sqlgen.outer_affected_sql(self.shape, roots_sql(self.shape, since))
        return sqlgen.keyed_affected_sql(self.shape, since)

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        query = query.with_(ROOTS, as_=self._partitions(since))
        return query.with_(AFFECTED, as_=sqlgen.window_affected_sql(self.shape, null_keys))

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_units(self.shape, select_sql, null_keys)

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        # The rows of the affected partitions (disjoint parts), by primary keys; over outer joins
        # a NULL-extended table's key is NULL: matched null-safely after the root's.
        nulls = any(null_keys)
        rows = union_of(self.restricted(self.shape.select_sql, nulls), distinct=False)
        query = sqlgen.left_join_keys(exp.select(exp.Star()).from_(AFFECTED), rows, self.shape.key_columns,
                                      null_safe_from=len(self.shape.tables[0].keymap_columns)
                                      if self.shape.outer else None)
        return self.with_affected(query, since, nulls).sql(dialect=DIALECT)

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        # the partitions alone: the view keys are derived from them
        query = sqlgen.any_null_exists(ROOTS, len(self.shape.partition_exprs))
        return [query.with_(ROOTS, as_=self._partitions(since)).sql(dialect=DIALECT)]

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since), *self.state_update(since), *[c for c in self.null_key_checks(since) if c],
                self.read_sql(since, (True,))]

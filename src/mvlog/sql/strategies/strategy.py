"""One strategy per view shape: everything the pipeline asks of a view of that shape.

A :class:`Strategy` answers, for one :class:`~mvlog.sql.pieces.shape.ViewShape`: how its affected keys are
found (``with_affected``) and its rows restricted to them (``restricted``), the fast read
(``read_sql``), which reads need the null-safe branch (``null_key_checks``), the state it keeps in
PostgreSQL (key maps, group tables) and the statements that create, update and rebuild that
state, every statement a fast refresh sends (``statements``, checked by PostgreSQL at apply), and
how ``explain`` words it. ``plan``, ``apply``, ``refresh`` and ``verify`` ask the strategy
(:func:`mvlog.sql.strategies.registry.strategy_of` chooses it) instead of branching on the class — as
SQLMesh maps each model kind to one evaluation strategy. A new shape is a new strategy and its
tests. The SQL itself is built from :mod:`mvlog.sql.generate.sqlgen`'s blocks; this module holds the base
(and :class:`Layered`, a strategy over another); the strategies of views keyed by base rows are in
:mod:`mvlog.sql.strategies.per_row`, of aggregates in :mod:`mvlog.sql.strategies.per_group`, of set operations in
:mod:`mvlog.sql.strategies.union`, of top-N, composed and range views in ``topn``, ``composed``, ``ranges``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlglot import exp

from mvlog.model import CHANGED_KEY_PREFIX, HIDDEN_PREFIX
from mvlog.sql.generate import keymap, sqlgen
from mvlog.sql.generate.changes import AFFECTED, key_names
from mvlog.sql.parse.sqltree import sql_text, union_of
from mvlog.sql.pieces.shape import ROW_KEY_COLUMN, ViewShape, col, ident, keymap_name

Q = TypeVar("Q", bound=exp.Query)


def row_text(names: list[str], table: str | None = None) -> exp.Expr:
    """``CAST(ROW(<names>) AS text)``: a key as one never-NULL text, as a UNION ALL view keys a branch's rows."""
    return exp.cast(exp.Anonymous(this="ROW", expressions=[col(n, table) for n in names]), exp.DataType.build("text"))
# A carrying read's columns (:meth:`Strategy.carrying_read_sql`): a carried row's scratch table
# (numbered from 1) and the row as text; NULL in the view's rows.
CARRIED = (HIDDEN_PREFIX + "carried", HIDDEN_PREFIX + "carried_row")
# The columns of a relation (``mvlog."…"``) as the database has them now, or None if it is missing.
ColumnsOf = Callable[[str], "list[str] | tuple[str, ...] | None"]

StrategyOf = Callable[[ViewShape], "Strategy"]

KEY_MAP_NOTE = ("old view keys come from mvlog's key map (base keys -> view key), because the logs hold "
                "primary keys only")


@dataclass(frozen=True)
class KeptKeys:
    """A state update that takes the keys of the rows a fast read returned instead of computing
    them again: ``statement`` stores them (one array parameter per name in ``parameters``, the
    values of the staged ``columns`` of the rows that are present, in that order); ``rest``, the
    state update's other statements."""

    statement: str
    parameters: tuple[str, ...]
    columns: tuple[str, ...]
    rest: list[str]


@dataclass(frozen=True)
class Scratch:
    """A temporary table the record's statements share: a read several of them would otherwise
    run again (a composed view's piece, read by the view's keys, its rows' update and a top-N
    margin over it). ``create`` makes it empty (also before apply's check plans the statements),
    ``fill`` fills it and ``analyze`` gives the planner its rows; ``drop`` drops it before the
    record commits (a pooler may hand the session to another client). ``carried``, when the fast
    read returned the table's rows too (:meth:`Strategy.carrying_read_sql`): ``fill`` from them,
    their texts given as the array parameter ``carried[1]``, instead of computing them again."""

    create: str
    fill: str
    analyze: str
    drop: str
    carried: tuple[str, str] | None = None


class Strategy:
    """A view that cannot be refreshed fast: complete refresh only (the base of every strategy)."""

    keeps_keymap = False  # whether a refresh keeps the shape's key map

    def __init__(self, shape: ViewShape):
        self.shape = shape

    @classmethod
    def build(cls, shape: ViewShape, strategy_of: StrategyOf) -> Strategy:
        """The strategy of ``shape``, with those it is layered on (found by ``strategy_of``)."""
        return cls(shape)

    @classmethod
    def state_names(cls, view: str) -> list[str]:
        """The state tables in schema mvlog this strategy keeps for the view ``view`` (a branch's or
        a piece's: suffixed ``_b<i>``, ``_p<i>``); the catalog drops and sizes them by these names."""
        return [keymap_name(view)] if cls.keeps_keymap else []

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
        query = sqlgen.join_affected(current, nullish[0] if nullish else None, self.shape.key_columns,
                                     sqlgen.loosely_joined_keys(self.shape))
        return sql_text(self.with_affected(query, since))

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        """Per part whose keys may hold a NULL, the query telling whether one does (None: cannot)."""
        return [None]

    def null_safe(self, since: datetime | None) -> tuple[bool, ...]:
        """Per part, whether its read matches keys null-safely: every part whose keys may hold a
        NULL. The read's null-safe branch is gated on an affected key holding a NULL (see
        :func:`mvlog.sql.generate.sqlgen.rows_of_keys`), so it costs nothing where none does, and
        a refresh runs no check first (each computed the affected keys a second time)."""
        return tuple(check is not None for check in self.null_key_checks(since))

    def union_part(self, branch: int, select_sql: str, since: datetime | None, null_keys: bool) -> exp.Query:
        """This view as branch ``branch`` of a UNION ALL view (``select_sql``: its SELECT with the
        union's hidden branch and row-key columns): its affected keys as (branch, row text) LEFT
        JOIN its restricted rows, with its own CTEs."""
        names = key_names(len(self.shape.key_columns))
        keys = exp.select(exp.alias_(exp.Literal.number(branch), ident(f"{CHANGED_KEY_PREFIX}0")),
                          exp.alias_(row_text(names), ident(f"{CHANGED_KEY_PREFIX}1"))).from_(AFFECTED)
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

    def scratch(self, since: datetime | None) -> list[Scratch]:
        """The temporary tables the record fills before :meth:`state_update`'s statements (none here)."""
        return []

    def carrying_read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str | None:
        """The fast read with the rows of :meth:`scratch`'s tables too, each as its table's number
        and its row as text in the columns :data:`CARRIED` (NULL in the view's rows), so that the
        record need not compute them again; None: this strategy's record has none to carry."""
        return None

    def recorded_read_sql(self, since: datetime | None) -> str:
        """The fast read, null-safe, as the record's statements read it (after :meth:`scratch`)."""
        return self.read_sql(since, self.null_safe(since))

    def kept_keys(self, since: datetime | None) -> KeptKeys | None:
        """The state update for a window whose fast read's rows are at hand, if it can take keys
        from them rather than compute them again; None: :meth:`state_update` it is."""
        return None

    def record_takes_read(self) -> bool:
        """Whether the record takes rows from the fast read (:meth:`carrying_read_sql`,
        :meth:`kept_keys`), which a read of the view's whole query does not return: such a view
        always reads its changed keys' rows (:mod:`mvlog.pipeline.readscope`)."""
        return False

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        """After a complete refresh: rebuild the state from the base tables. A key map is refilled
        only if its columns and probe indexes still fit (a refresh role may refill a table it does
        not own); otherwise dropped and made again."""
        statements = []
        for shape in self.keymapped():
            current = columns_of(sql_text(keymap.keymap_table(shape)))
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
            current = columns_of(sql_text(keymap.keymap_table(shape)))
            if current is not None and not self._fits(shape, current, columns_of):
                return f"its key map ({shape.keymap}) was kept in another layout (an earlier mvlog's)"
        return None

    def rows_from_state(self) -> exp.Select | None:
        """The view's rows computed from the state kept at its last refresh, without the base
        tables (a strategy over it reads them instead of the query: top-N's recompute), or None."""
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

    def _read_then_record(self, since: datetime) -> list[str]:
        """:meth:`statements` of a strategy over others: the read (and its null-safe form where a
        key may hold a NULL), the null-key checks, the scratch tables' fills, the state's update."""
        checks = [c for c in self.null_key_checks(since) if c]
        reads = [self.read_sql(since), *([self.read_sql(since, self.null_safe(since))] if checks else [])]
        return [*reads, *checks, *(s.fill for s in self.scratch(since)), *self.state_update(since)]

    def layer_state(self, view: str) -> list[str]:
        """The state tables a layer keeps of its own (a top-N margin, range parameters), which it
        refills after a complete refresh even when the view keeps no key map; none here."""
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

    def keymapped(self) -> list[ViewShape]:
        return self.under.keymapped()

    def record_takes_read(self) -> bool:
        return self.under.record_takes_read()

    def probe_sql(self) -> list[str]:
        return self.under.probe_sql()

    def scratch(self, since: datetime | None) -> list[Scratch]:
        return self.under.scratch(since)

    def statements(self, since: datetime) -> list[str]:
        return self._read_then_record(since)

    def layer_state(self, view: str) -> list[str]:
        return [*type(self).state_names(view), *self.under.layer_state(view)]

    def any_dml_note(self) -> str:
        return self.under.any_dml_note()


RECOMPUTED_NOTE = "; MIN and MAX stay exact after deletes because affected groups are recomputed"

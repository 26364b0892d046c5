"""The strategies of aggregates: groups recomputed per affected group (:class:`AggregateRecomputed`,
over outer joins or subqueries :class:`OuterAggregate`), kept by deltas in a group table
(:class:`AggregateByDeltas`), and the one row of a global aggregate (:class:`GlobalAggregate`)."""

from __future__ import annotations

from datetime import datetime

from sqlglot import exp

from mvlog.model import CHANGED_KEY_PREFIX, PRESENT
from mvlog.sql.generate import aggdelta, sqlgen
from mvlog.sql.generate.changes import AFFECTED, ROOTS, key_names, roots_ref, roots_sql, tied_inner
from mvlog.sql.parse.sqltree import parse_select, parsed, sql_text
from mvlog.sql.pieces.shape import BRANCH_COLUMN, ROW_KEY_COLUMN, col, groups_name, ident, keymap_name
from mvlog.sql.strategies.per_row import Join, OuterJoin
from mvlog.sql.strategies.strategy import KEY_MAP_NOTE, RECOMPUTED_NOTE, ColumnsOf, Q, Strategy, row_text


class _Groups(Strategy):
    """What aggregates recomputed per affected group share: a NULL group key takes the null-safe
    branch of the read, and a group table left from when they were kept by deltas is dropped."""

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_keys(self.shape, select_sql, null_keys)

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return Strategy.read_sql(self, since, null_keys)

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        nullable = sqlgen.nullable_matched_keys(self.shape)
        if not nullable:
            return [None]  # every key the read matches a NOT NULL column
        query = sqlgen.any_null_exists(AFFECTED, nullable)
        return [sql_text(self.with_affected(query, since))]

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
    """GROUP BY over outer joins or subqueries: the groups of the affected roots' rows recomputed
    (over inner joins with subqueries tied to the root by values: the groups of the changed outer
    rows, and of the roots of the changed subquery rows)."""

    what = "groups"

    def how(self) -> str:
        if not tied_inner(self.shape):
            return super().how()
        semi = ", ".join(dict.fromkeys(t.log.qualified_table for t in self.shape.tables if t.semi))
        return (f"the groups of changed rows, before and after the change, are recomputed exactly; a changed row of "
                f"{semi} (read by a subquery tied to {self.shape.tables[0].log.qualified_table} by values) counts for "
                f"the rows of the values it had and has; " + KEY_MAP_NOTE)

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        if not tied_inner(self.shape):
            return super().with_affected(query, since, null_keys)
        query = query.with_(ROOTS, as_=roots_sql(self.shape, since, subqueries_only=True), copy=False)
        return query.with_(AFFECTED, as_=sqlgen.tied_affected_sql(self.shape, since, roots_ref()), copy=False)


class AggregateByDeltas(Join):
    """GROUP BY kept by state (:mod:`mvlog.sql.generate.aggdelta`): each affected group's new state = its
    old state (the group table) + what changed rows contribute now - what they contributed then."""

    def how(self) -> str:
        deltas = self.shape.deltas
        assert deltas is not None
        extremes = ("; MIN/MAX = the extreme of the changed rows now and of the group's unchanged rows in the key map "
                    "(an index probe per group, exact after the current extreme is deleted)" if deltas.extremes else "")
        return ("by deltas: each affected group's " + ", ".join(deltas.aggregates) + " = its state at the last "
                "refresh + what the changed rows contribute now - what they contributed then (kept per row in the "
                "key map, per group in mvlog." + deltas.groups + ")" + extremes + ", computed in PostgreSQL")

    @classmethod
    def state_names(cls, view: str) -> list[str]:
        return [*super().state_names(view), groups_name(keymap_name(view))]

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        return aggdelta.fast_delta_sql(self.shape, since)

    def state_update(self, since: datetime | None) -> list[str]:
        # The group table's update reads the key map as of the last refresh: first.
        return [*aggdelta.groups_update_sql(self.shape, since), *super().state_update(since)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        current = columns_of(sql_text(aggdelta.groups_table(self.shape)))
        groups = (aggdelta.groups_rebuild_sql(self.shape, exists=current is not None)
                  if current is None or list(current) == aggdelta.groups_columns(self.shape)
                  else [aggdelta.drop_groups_sql(groups_name(self.shape.keymap or "")),
                        *aggdelta.groups_rebuild_sql(self.shape, exists=False)])
        return [*super().state_rebuild(columns_of), *groups]

    def stand_in_sql(self) -> list[str]:
        return [*super().stand_in_sql(), *aggdelta.groups_stand_in_sql(self.shape)]

    def rows_from_state(self) -> exp.Select | None:
        return aggdelta.rows_from_state(self.shape)

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
            exp.alias_(row_text(names, "d"), ident(f"{CHANGED_KEY_PREFIX}1")),
            *[col(n, "d") for n in visible],
            exp.alias_(exp.Case(ifs=[exp.If(this=present.copy(), true=exp.Literal.number(branch))]),
                       ident(BRANCH_COLUMN)),
            exp.alias_(exp.Case(ifs=[exp.If(this=present.copy(), true=row_text(names, "d"))]), ident(ROW_KEY_COLUMN)),
            present)
            .from_(exp.Subquery(this=parsed(self.read_sql(since)),
                                alias=exp.TableAlias(this=ident("d")))))

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since), *self.state_update(since)]


class GlobalAggregate(Strategy):
    """An aggregate without GROUP BY: one row, recomputed whenever any of its tables changed."""

    def how(self) -> str:
        return "a global aggregate is recomputed whenever any of its tables changed"

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        return query.with_(AFFECTED, as_=sqlgen.global_affected_sql(self.shape, since), copy=False)

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_keys(self.shape, select_sql)

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since)]

    def any_dml_note(self) -> str:
        return RECOMPUTED_NOTE



"""The strategies of views keyed by their base rows: one table (:class:`Simple`), inner joins
(:class:`Join`), outer joins and subqueries by their roots (:class:`OuterJoin`), and window
functions recomputed per partition (:class:`Window`)."""

from __future__ import annotations

from datetime import datetime

from sqlglot import exp

from mvlog.sql.generate import sqlgen
from mvlog.sql.generate.changes import AFFECTED, ROOTS, changed_keys_sql, key_names, roots_ref, roots_sql
from mvlog.sql.parse.sqltree import sql_text, union_of
from mvlog.sql.strategies.strategy import KEY_MAP_NOTE, Q, Strategy


class Simple(Strategy):
    """One table, filtered and projected: its changed keys joined back through its primary key."""

    def how(self) -> str:
        return "changed keys are joined back to the table through its primary key"

    def with_affected(self, query: Q, since: datetime | None, null_keys: bool = False) -> Q:
        return query.with_(AFFECTED, as_=changed_keys_sql(self.shape.logs[0], since), copy=False)

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
        return query.with_(AFFECTED, as_=sqlgen.keyed_affected_sql(self.shape, since), copy=False)

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
        query = query.with_(ROOTS, as_=roots_sql(self.shape, since), copy=False)
        return query.with_(AFFECTED, as_=sqlgen.outer_affected_sql(self.shape, roots_ref()), copy=False)

    def restricted(self, select_sql: str, null_keys: bool) -> list[exp.Select]:
        return sqlgen.rows_of_roots(self.shape, select_sql)

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        # The roots' rows, matched to their keys by the root's key (never NULL), then null-safely
        # by the NULL-extended tables' keys among the few rows of one root.
        (current,) = self.restricted(self.shape.select_sql, False)
        query = sqlgen.left_join_keys(exp.select(exp.Star()).from_(AFFECTED), current, self.shape.key_columns,
                                      null_safe_from=len(self.shape.tables[0].keymap_columns))
        return sql_text(self.with_affected(query, since))


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
        query = query.with_(ROOTS, as_=self._partitions(since), copy=False)
        return query.with_(AFFECTED, as_=sqlgen.window_affected_sql(self.shape, null_keys), copy=False)

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
        return sql_text(self.with_affected(query, since, nulls))

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        # the partitions alone: the view keys are derived from them
        query = sqlgen.any_null_exists(ROOTS, key_names(len(self.shape.partition_exprs)))
        return [sql_text(query.with_(ROOTS, as_=self._partitions(since), copy=False))]

    def statements(self, since: datetime) -> list[str]:
        return [self.read_sql(since), *self.state_update(since), *[c for c in self.null_key_checks(since) if c],
                self.read_sql(since, (True,))]

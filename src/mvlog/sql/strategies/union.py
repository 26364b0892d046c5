"""The strategies of set-operation views: UNION ALL (and a FULL JOIN's two parts), UNION, and an
aggregate over a UNION ALL — each branch refreshed by its own strategy.

A UNION ALL view's key is (branch number, the branch's view key as row text): one text
column that is never NULL, so its rows and keys join on plain, hashable equality whatever
the branch's key is (a primary key, join keys with NULL-extended sides, NULL groups).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlglot import exp

from mvlog.sql.generate import changes, sqlgen
from mvlog.sql.parse.sqltree import sql_text, union_of
from mvlog.sql.pieces.shape import ViewShape, col, groups_name, ident, keymap_name
from mvlog.sql.rewrite.fulljoin import FULL_JOIN_PARTS
from mvlog.sql.strategies.strategy import RECOMPUTED_NOTE, ColumnsOf, Strategy, StrategyOf


class UnionAll(Strategy):
    """UNION ALL of keyable branches (a FULL JOIN: of its two parts): per branch, its affected keys
    as (branch, row text) LEFT JOIN its restricted rows, each with its own CTEs."""

    def __init__(self, shape: ViewShape, branches: Sequence[Strategy]):
        super().__init__(shape)
        self.branches = list(branches)

    @classmethod
    def build(cls, shape: ViewShape, strategy_of: StrategyOf) -> Strategy:
        return cls(shape, [strategy_of(branch) for branch in shape.branches])

    @classmethod
    def state_names(cls, view: str) -> list[str]:
        # The branches' key maps and group tables, <name>_b<i>.
        keys = keymap_name(view)
        return [keys, groups_name(keys)]

    def how(self) -> str:
        if self.shape.full_join:
            with_root, without = self.branches
            return (f"a FULL JOIN is refreshed as two outer-join views that never share a row: the rows holding a "
                    f"row of {with_root.shape.tables[0].log.qualified_table} ({with_root.how()}), and the rows of "
                    f"{without.shape.tables[0].log.qualified_table} without a partner ({without.how()})")
        return "; ".join(f"UNION ALL branch {i} ({b.shape.view_class.value}): {b.how()}"
                         for i, b in enumerate(self.branches, 1))

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        """``null_keys[i]``: an affected key of branch i+1 holds a NULL (see :meth:`null_key_checks`)."""
        parts = []
        for i, (branch, select) in enumerate(zip(self.branches, self.shape.branch_selects), 1):
            read = branch.union_part(i, select, since, len(null_keys) >= i and null_keys[i - 1])
            parts.append(exp.select(exp.Star()).from_(
                exp.Subquery(this=read, alias=exp.TableAlias(this=ident(f"b{i}")))))
        return sql_text(union_of(parts, distinct=False))

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        """One per branch (its own check, or None)."""
        return [check for branch in self.branches for check in branch.null_key_checks(since)]

    def keymapped(self) -> list[ViewShape]:
        return [shape for branch in self.branches for shape in branch.keymapped()]

    def state_update(self, since: datetime | None) -> list[str]:
        return [s for branch in self.branches for s in branch.state_update(since)]

    def state_rebuild(self, columns_of: ColumnsOf) -> list[str]:
        return [s for branch in self.branches for s in branch.state_rebuild(columns_of)]

    def stand_in_sql(self) -> list[str]:
        return [s for branch in self.branches for s in branch.stand_in_sql()]

    def probe_sql(self) -> list[str]:
        return [s for branch in self.branches for s in branch.probe_sql()]

    def statements(self, since: datetime) -> list[str]:
        read = self.read_sql(since, (True,) * len(self.branches))
        return [read, *self.state_update(since), *[c for c in self.null_key_checks(since) if c]]


class UnionDistinct(UnionAll):
    """A UNION (distinct), or an aggregate over a UNION ALL, UNION or SELECT DISTINCT: the affected
    rows or groups (of any branch, before or after) LEFT JOIN their recomputed rows."""

    def how(self) -> str:
        if self.shape.over_union:
            where = ("either part of the FULL JOIN (its LEFT JOIN, and its right side's rows without a partner)"
                     if FULL_JOIN_PARTS in self.shape.select_sql else
                     "any branch of the UNION ALL, UNION or SELECT DISTINCT it aggregates")
            return (f"the groups that changed rows of {where} fall in, before (each part's key map) and "
                    f"after the change, are recomputed by the whole query, every part restricted to them")
        return ("UNION: the output rows that changed rows of any branch yield, before (each branch's key map) and "
                "after the change, are recomputed from every branch; a row goes when no branch yields it any more")

    def _affected_rows(self, since: datetime | None) -> exp.Query:
        """Every branch's affected rows (groups), each with its own CTEs, distinct."""
        names = changes.key_names(len(self.shape.key_columns))
        parts = []
        for i, branch in enumerate(self.branches, 1):
            keys = branch.with_affected(exp.select(*[col(n) for n in names]).from_(changes.AFFECTED), since)
            parts.append(exp.select(exp.Star()).from_(
                exp.Subquery(this=keys, alias=exp.TableAlias(this=ident(f"b{i}")))))
        return union_of(parts)

    def _recomputed(self, null_keys: bool) -> list[exp.Query]:
        """The rows of the affected keys: the DISTINCT over every branch restricted to them (a row
        stays while some branch still yields it); an aggregate over a UNION ALL: the whole query
        restricted to the affected groups. Matched by IN, then (``null_keys``) null-safely."""
        if self.shape.over_union:
            return list(sqlgen.rows_of_keys(self.shape, self.shape.select_sql, null_keys))
        restricted = [b.restricted(select, null_keys) for b, select in zip(self.branches, self.shape.branch_selects)]
        distinct: list[exp.Query] = []
        for part in zip(*restricted):  # the same part of every branch
            rows = union_of(list(part), distinct=False)
            distinct.append(exp.select(exp.Star()).distinct()
                            .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=ident("u")))))
        return distinct

    def read_sql(self, since: datetime | None, null_keys: tuple[bool, ...] = ()) -> str:
        rows = self._recomputed(any(null_keys))
        query = sqlgen.join_affected(rows[0], rows[1] if len(rows) > 1 else None, self.shape.key_columns)
        return sql_text(query.with_(changes.AFFECTED, as_=self._affected_rows(since), copy=False))

    def null_key_checks(self, since: datetime | None) -> list[str | None]:
        check = sqlgen.any_null_exists(changes.AFFECTED, changes.key_names(len(self.shape.key_columns)))
        return [sql_text(check.with_(changes.AFFECTED, as_=self._affected_rows(since), copy=False))]

    def any_dml_note(self) -> str:
        return RECOMPUTED_NOTE if self.shape.over_union else ""

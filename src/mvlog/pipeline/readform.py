"""The form of a read PostgreSQL is sent: the SQL as mvlog wrote it, or the same query with its
correlated scalar aggregates joined grouped (:func:`mvlog.sql.rewrite.decorrelate.joined_form`),
whichever PostgreSQL estimates cheaper; and in either, the CTEs read several times, each time
restricted by a constant, inlined (:mod:`mvlog.sql.rewrite.restricted_ctes`: a rule, because
PostgreSQL's estimates rank those two forms wrongly).

PostgreSQL runs a correlated scalar subquery once per outer row (a SubPlan). Over many outer rows
the join is far cheaper — TPC-DS q06's average price of an item's category: 9.0 s as written, 0.1 s
joined, at scale 0.5 —; over a few rows and an index the SubPlan is (TPC-H Q17 restricted to a
few parts: 0.01 s against 1.13 s). PostgreSQL's own estimates ranked the two forms right in every
case measured (BENCHMARKS.md, the q06 probe), and they cost one EXPLAIN each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from mvlog.sql.rewrite import decorrelate, restricted_ctes


@dataclass(frozen=True)
class ReadForm:
    """The SQL a read sends, and why: the costs PostgreSQL estimated for the two forms."""

    sql: str
    joined: bool = False
    costs: tuple[float, float] | None = None  # (as written, joined)
    inlined: tuple[str, ...] = ()  # the CTEs sent NOT MATERIALIZED

    def note(self, view: str) -> str | None:
        """What a refresh says of the form it sends (nothing when it sends the SQL as written)."""
        said = []
        if self.inlined:
            said.append(f"its CTE{'s' if len(self.inlined) > 1 else ''} {', '.join(self.inlined)} read inlined "
                        f"(every reference restricted by a constant)")
        if self.joined and self.costs is not None:
            said.append(f"its correlated aggregates read as joins (PostgreSQL's estimate {self.costs[1]:,.0f} "
                        f"against {self.costs[0]:,.0f} run per row)")
        return f"{view}: {'; '.join(said)}" if said else None


def sent(view_sql: str, sql: str, estimate: Callable[[str], float | None]) -> ReadForm:
    """The form a read ``sql`` of a view whose own query is ``view_sql`` is sent in: its
    restricted CTEs inlined (:func:`inlined`), then its correlated aggregates joined where
    PostgreSQL's ``estimate`` of that is lower (:func:`choose`). Each rewrite is looked for only
    where ``view_sql`` has its kind (answers cached by text): a fast read's text is new on every
    refresh, and parsing it costs tens of milliseconds; ``estimate`` is called only for a joined
    form."""
    form = inlined(view_sql, sql)
    if decorrelate.joined_form(view_sql) is None or (joined := decorrelate.joined_form(form.sql)) is None:
        return form
    return dataclasses.replace(choose(form.sql, joined, estimate), inlined=form.inlined)


def inlined(view_sql: str, sql: str) -> ReadForm:
    """``sql`` with the CTEs :func:`~mvlog.sql.rewrite.restricted_ctes.inlined_form` inlines,
    looked for only where the view's own query (``view_sql``, whose answer is cached) has one: a
    fast read's text is new on every refresh, and parsing it costs tens of milliseconds."""
    if restricted_ctes.inlined_form(view_sql) is None or (found := restricted_ctes.inlined_form(sql)) is None:
        return ReadForm(sql)
    return ReadForm(found[0], inlined=found[1])


def choose(written: str, joined: str | None, estimate: Callable[[str], float | None]) -> ReadForm:
    """The form to send: ``joined`` where PostgreSQL's ``estimate`` of it is lower than of
    ``written``; ``written`` where there is no joined form or either cannot be estimated."""
    if joined is None:
        return ReadForm(written)
    as_written, as_joined = estimate(written), estimate(joined)
    if as_written is None or as_joined is None:
        return ReadForm(written)
    costs = (as_written, as_joined)
    return ReadForm(joined, joined=True, costs=costs) if as_joined < as_written else ReadForm(written, costs=costs)

"""Refresh planning: from a view's analysis, its logs and its state to a :class:`RefreshPlan`.

A plan is plain data — method, reason, window, key columns and the SQL to push down
to PostgreSQL — so it can be printed and tested without Spark or a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlglot import exp

from mvlog.analysis import DIALECT, Analysis, ViewClass, projected_columns
from mvlog.config import RefreshMethod
from mvlog.errors import RefreshError
from mvlog.source import LogInfo

HIDDEN_PREFIX = "_mvlog_"
CHANGED_KEY_PREFIX = "_mvlog_key_"


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.column(_ident(name), table=_ident(table) if table else None)


def _timestamptz(value: datetime) -> exp.Expression:
    return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("timestamptz", dialect=DIALECT))


@dataclass(frozen=True)
class ViewShape:
    """How a view's rows are keyed and read, derived from its query and its logs.

    ``key_columns`` are the Delta columns that identify a view row (for a simple
    view: the output columns carrying the table's primary key, or hidden
    ``_mvlog_<pk>`` columns added when the query does not output it).
    """

    name: str
    view_class: ViewClass
    fast_reasons: tuple[str, ...]
    logs: tuple[LogInfo, ...]
    key_columns: tuple[str, ...]
    hidden_columns: tuple[str, ...]
    select_sql: str  # the view query (plus hidden key columns) as PostgreSQL SQL
    key_sources: tuple[str, ...] = field(default=())  # base PK column behind each key column (simple)

    @property
    def fast_possible(self) -> bool:
        return not self.fast_reasons


def shape_view(name: str, analysis: Analysis, logs_by_ref: dict[str, LogInfo]) -> ViewShape:
    """Join the analysis of a view with its logs (``logs_by_ref``: table alias -> log)."""
    logs = tuple(dict.fromkeys(logs_by_ref[ref.alias] for ref in analysis.tables))
    if analysis.view_class is not ViewClass.SIMPLE:
        text = analysis.query.strip().rstrip(";").strip()
        return ViewShape(name, analysis.view_class, tuple(analysis.reasons), logs, (), (), text)
    select = analysis.tree.copy()
    assert isinstance(select, exp.Select)
    ref = analysis.tables[0]
    log = logs_by_ref[ref.alias]
    outputs = projected_columns(select, ref.alias, list(log.key_columns))
    key_columns, hidden = [], []
    for pk in log.key_columns:
        if pk in outputs:
            key_columns.append(outputs[pk])
        else:
            hidden_name = HIDDEN_PREFIX + pk
            select = select.select(exp.alias_(_col(pk, ref.alias), _ident(hidden_name)), copy=False)
            key_columns.append(hidden_name)
            hidden.append(hidden_name)
    return ViewShape(
        name, analysis.view_class, tuple(analysis.reasons), logs, tuple(key_columns), tuple(hidden),
        select.sql(dialect=DIALECT), tuple(log.key_columns),
    )


@dataclass(frozen=True)
class RefreshPlan:
    """One refresh of one view, decided before anything is read or written."""

    view: str
    location: str
    method: str  # "fast" | "complete"
    reason: str
    logs: tuple[LogInfo, ...]
    since: datetime | None  # last_V: consume log rows with since < snaptime$$ <= S
    key_columns: tuple[str, ...]
    shape: ViewShape

    def read_sql(self, upto: datetime) -> str:
        """The SQL whose rows the refresh reads from PostgreSQL, for the window ending at S=``upto``."""
        if self.method == "complete":
            return self.shape.select_sql
        return fast_simple_sql(self.shape, self.since, upto)

    def describe(self) -> str:
        window = f"({self.since.isoformat() if self.since else '-infinity'}, S]"
        lines = [
            f"view {self.view} -> {self.location}",
            f"  method: {self.method} ({self.reason})",
            f"  logs: {', '.join(log.qualified_table for log in self.logs) or '-'}",
            f"  key: {', '.join(self.key_columns) or '-'}",
        ]
        if self.method == "fast":
            lines.append(f"  window: snaptime$$ in {window}")
        return "\n".join(lines)


def changed_keys_sql(log: LogInfo, since: datetime | None, upto: datetime) -> exp.Select:
    """DISTINCT primary keys logged in the window: many changes of one key collapse into one."""
    condition = exp.and_(
        exp.NEQ(this=_col("dmltype$$"), expression=exp.Literal.string("T")),
        exp.LTE(this=_col("snaptime$$"), expression=_timestamptz(upto)),
    )
    if since is not None:
        condition = exp.and_(condition, exp.GT(this=_col("snaptime$$"), expression=_timestamptz(since)))
    return (
        exp.select(*[exp.alias_(_col(k), _ident(f"{CHANGED_KEY_PREFIX}{i}")) for i, k in enumerate(log.key_columns)])
        .distinct()
        .from_(exp.Table(this=_ident(log.log_name), db=_ident("mvlog")))
        .where(condition)
    )


def fast_simple_sql(shape: ViewShape, since: datetime | None, upto: datetime) -> str:
    """Changed keys LEFT JOIN the view restricted to them.

    PostgreSQL flattens the view subquery and probes the base table's primary key
    for each changed key, so only changed rows are read. A key with no view row
    (deleted, or no longer passing WHERE) comes back with NULL view columns.
    """
    (log,) = shape.logs
    keys = changed_keys_sql(log, since, upto).subquery("k")
    view = exp.maybe_parse(shape.select_sql, dialect=DIALECT).subquery("v")
    on = exp.and_(*[
        exp.EQ(this=_col(out, "v"), expression=_col(f"{CHANGED_KEY_PREFIX}{i}", "k"))
        for i, out in enumerate(shape.key_columns)
    ])
    query = (
        exp.select(exp.column(exp.Star(), table=_ident("k")), exp.column(exp.Star(), table=_ident("v")))
        .from_(keys)
        .join(view, on=on, join_type="left")
    )
    return query.sql(dialect=DIALECT)


def plan_refresh(
    shape: ViewShape,
    location: str,
    requested: RefreshMethod,
    since: datetime | None,
    needs_complete: str | None,
    table_exists: bool,
) -> RefreshPlan:
    """Decide fast or complete, and why (Oracle's FAST / COMPLETE / FORCE)."""

    def plan(method: str, reason: str) -> RefreshPlan:
        keys = shape.key_columns
        return RefreshPlan(shape.name, location, method, reason, shape.logs, since, keys, shape)

    if requested is RefreshMethod.COMPLETE:
        return plan("complete", "complete refresh requested")
    blocker = None
    if not shape.fast_possible:
        blocker = "; ".join(shape.fast_reasons)
    elif since is None or not table_exists:
        blocker = "the view has not been built yet" if since is None else "the Delta table is missing"
    elif needs_complete:
        blocker = needs_complete
    if blocker is None:
        return plan("fast", "changed keys since the last refresh")
    if requested is RefreshMethod.FAST:
        raise RefreshError(f"view {shape.name} cannot be fast-refreshed: {blocker}")
    return plan("complete", blocker)

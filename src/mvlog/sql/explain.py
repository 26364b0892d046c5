"""``mvlog explain``: Oracle EXPLAIN_MVIEW-style refresh capabilities of a view, each with its reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from mvlog.sql.analyze.analysis import Analysis
from mvlog.sql.pieces.shape import ViewShape
from mvlog.sql.strategies.registry import strategy_of


@dataclass
class Capability:
    name: str
    possible: bool
    reason: str


@dataclass
class Explanation:
    view: str
    view_class: str
    refresh: str
    base_tables: list[str]
    key: list[str]
    capabilities: list[Capability] = field(default_factory=list)
    pg_views: list[str] = field(default_factory=list)  # PostgreSQL views the query reads, expanded
    upstreams: list[str] = field(default_factory=list)  # the project's views it reads, expanded
    dependents: list[str] = field(default_factory=list)  # the project's views that read it directly
    # The Delta table features the view's table has, each with why ("column mapping: column 'a b'").
    table_features: list[str] = field(default_factory=list)
    # Per reader (Spark, deltalake, polars, DuckDB over Arrow), whether it reads the view right:
    # from the features of its Delta table as it is (``readers_of: "table"``), or before it is
    # written, as mvlog would write it (``"configuration"``).
    readers: dict[str, str] = field(default_factory=dict)
    readers_of: str | None = None
    # What the next refresh would do now, as `mvlog plan` says it (method, reason, write); None if
    # the view is not registered yet. A `force` view's reason holds both methods' predictions.
    next_refresh: dict | None = None

    def to_json(self) -> dict:
        data = asdict(self)
        data["class"] = data.pop("view_class")
        return data


def explain(view: str, refresh: str, analysis: Analysis, shape: ViewShape | None, missing_logs: list[str],
            pg_views: Sequence[str] = ()) -> Explanation:
    """Capabilities of a view. ``shape`` is None when a base table has no log (``missing_logs``);
    ``pg_views``: the PostgreSQL views its query reads (``analysis`` is of the expanded query)."""
    tables = [t.display for t in analysis.tables]
    result = Explanation(view, (shape.view_class if shape else analysis.view_class).value, refresh, tables,
                         list(shape.key_columns) if shape else [], pg_views=list(pg_views))
    add = lambda name, ok, why: result.capabilities.append(Capability(name, ok, why))  # noqa: E731
    add("REFRESH_COMPLETE", True, "the query can always be recomputed and the Delta table replaced atomically")
    if missing_logs:
        why = "; ".join(f"table {t} has no materialized view log" for t in missing_logs)
        fast = False
    else:
        assert shape is not None  # None only when a table has no log
        why, fast = strategy_of(shape).how(), shape.fast_possible
    add("REFRESH_FAST", fast, why)
    add("REFRESH_FAST_AFTER_INSERT", fast, why if not fast else "inserts are handled like any change")
    add("REFRESH_FAST_AFTER_ONETAB_DML", fast, why if not fast else "DML on one table is handled like any change")
    any_dml = "inserts, updates (including primary-key updates) and deletes on every table"
    if shape is not None:
        any_dml += strategy_of(shape).any_dml_note()
    add("REFRESH_FAST_AFTER_ANY_DML", fast, why if not fast else any_dml)
    add("REFRESH_FAST_PCT", False, "partition change tracking does not apply: changes are tracked per primary key")
    return result

"""Which Delta table features a view's table has, and the statements that give it the ones asked for.

A view opens in every common Delta reader (Spark, ``deltalake``/delta-rs, polars, DuckDB over
Arrow) unless its configuration asks for more:

- **column mapping** only where a column name needs it (Delta refuses `` ,;{}()\\n\\t=`` in a
  physical column name) and the view allows it (``column_mapping: true``): ``deltalake``'s
  ``to_pandas``/``to_pyarrow_table`` read such a table's columns as NULLs and polars refuses it,
  so a view that would need it is refused unless allowed (:func:`refusal`);
- **deletion vectors** only where the view asks (``deletion_vectors: true``): a MERGE that
  changes a few rows of a file marks them deleted instead of rewriting the file; Spark and
  polars read them, ``deltalake`` refuses them;
- the **change data feed** where the view asks (``change_feed: true``); every reader above
  reads the table, ``deltalake`` its feed too.

Turning a feature off on an existing table drops it (``ALTER TABLE … DROP FEATURE``): Delta
rewrites what used it (files with deletion vectors; data files under physical column names)
in that commit, and readers that refused the table open it from then on.

Every new table also gets the **checkpoint interval** its view is given
(:meth:`mvlog.config.Config.checkpoint_interval`): Delta writes a checkpoint in the commit whose
version is a multiple of the interval, and views refreshed together commit together, so with
Delta's one default (10) every table of a fleet checkpoints in the same refresh (measured: 60
views on the engine, the tenth ``refresh --complete`` in a row 100 s against 40–53 s around it;
with the intervals in turn the slowest 67 s; BENCHMARKS.md sessions 49 and 50).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CHANGE_FEED = "delta.enableChangeDataFeed"
DELETION_VECTORS = "delta.enableDeletionVectors"
COLUMN_MAPPING = "delta.columnMapping.mode"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
# Characters Delta does not allow in a physical column name (its SchemaUtils.checkFieldNames).
UNSAFE_NAME_CHARACTERS = frozenset(" ,;{}()\n\t=")


@dataclass(frozen=True)
class TableFeatures:
    """What a view's table should have (see the module docstring)."""

    change_feed: bool = False
    deletion_vectors: bool = False
    column_mapping: bool = False

    def creation_options(self) -> dict[str, str]:
        """Table properties of a new table, as writer options."""
        options = {CHANGE_FEED: _flag(self.change_feed), DELETION_VECTORS: _flag(self.deletion_vectors)}
        if self.column_mapping:
            options[COLUMN_MAPPING] = "name"
        return options


def needs_column_mapping(columns: list[str]) -> bool:
    """Whether any of ``columns`` cannot be a physical Delta column name."""
    return any(UNSAFE_NAME_CHARACTERS & set(name) for name in columns)


def for_columns(columns: list[str], change_feed: bool, deletion_vectors: bool) -> TableFeatures:
    """The features of a view whose table has ``columns``."""
    return TableFeatures(change_feed, deletion_vectors, needs_column_mapping(columns))


def safe_name(name: str) -> str:
    """``name`` with every character that needs column mapping made an underscore."""
    return "".join("_" if c in UNSAFE_NAME_CHARACTERS else c for c in name)


def _as_written(name: str) -> str:
    """``name`` as SQL would take it: bare if it is a plain lower-case identifier, else quoted."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'


def refusal(columns: list[str]) -> str | None:
    """Why a view with ``columns`` is refused when column mapping is not allowed (None: it needs none):
    the column, the readers that would read it wrong, and the two ways out."""
    unsafe = [c for c in columns if needs_column_mapping([c])]
    if not unsafe:
        return None
    return (f"column {unsafe[0]!r} needs Delta column mapping (its name has a space or one of ,;{{}}()=), and "
            f"readers other than Spark misread such a table: deltalake's to_pandas() and to_pyarrow_table() "
            f"(and DuckDB or pandas over them) read its columns as NULLs, polars refuses it; rename the column "
            f"(AS {_as_written(safe_name(unsafe[0]))}), or set column_mapping: true on the view if only Spark (or "
            f"deltalake's "
            f"QueryBuilder) reads it")


# What each reader the README names does with a table that has a feature (checked by
# tests/spark/test_readers.py, which reads such tables with each of them).
READS, REFUSES, MISREADS = "reads it", "refuses it", "reads wrong values"
READERS: dict[str, dict[str, str]] = {
    "Spark (delta-spark)": {},
    "deltalake QueryBuilder": {},
    "deltalake to_pyarrow_table / to_pandas": {"deletionVectors": REFUSES, "columnMapping": MISREADS},
    "polars read_delta / scan_delta": {"columnMapping": REFUSES},
    "DuckDB over deltalake's Arrow": {"deletionVectors": REFUSES, "columnMapping": MISREADS},
}
ORDER = (MISREADS, REFUSES, READS)  # the worst verdict a table's features give a reader wins


def readers(table_features: set[str]) -> dict[str, str]:
    """Per reader, what it does with a table that has ``table_features`` (Delta's feature names:
    ``deletionVectors``, ``columnMapping``, ...), with the feature that decides it."""
    verdicts = {}
    for reader, by_feature in READERS.items():
        found = [(by_feature[f], f) for f in sorted(table_features) if f in by_feature]
        verdict, feature = min(found, key=lambda v: ORDER.index(v[0]), default=(READS, None))
        verdicts[reader] = verdict + (f" ({feature})" if feature else "")
    return verdicts


@dataclass(frozen=True)
class Change:
    """One statement that moves an existing table towards the features asked for."""

    description: str  # "deletion vectors off", for apply's report
    statement: str  # Spark SQL on ``{table}``
    drops: bool = False  # DROP FEATURE: after a rewrite of the table, not before (nothing left to rewrite)


def changes(detail: dict[str, Any], wanted: TableFeatures) -> list[Change]:
    """What to run on a table (its ``DESCRIBE DETAIL``) so that it has the features ``wanted``:
    nothing if it has them. Column mapping is added before and dropped after the rest."""
    properties = {k: str(v).lower() for k, v in (detail.get("properties") or {}).items()}
    present = set(detail.get("tableFeatures") or ())
    found: list[Change] = []
    mapped = properties.get(COLUMN_MAPPING, "none") != "none"
    if wanted.column_mapping and not mapped:
        found.append(Change("column mapping on", f"ALTER TABLE {{table}} SET TBLPROPERTIES "
                                                 f"('{COLUMN_MAPPING}' = 'name')"))
    if (properties.get(CHANGE_FEED) == "true") != wanted.change_feed:
        found.append(Change(f"change data feed {_on(wanted.change_feed)}",
                            f"ALTER TABLE {{table}} SET TBLPROPERTIES "
                            f"('{CHANGE_FEED}' = '{_flag(wanted.change_feed)}')"))
    if wanted.deletion_vectors and properties.get(DELETION_VECTORS) != "true":
        found.append(Change("deletion vectors on", f"ALTER TABLE {{table}} SET TBLPROPERTIES "
                                                   f"('{DELETION_VECTORS}' = 'true')"))
    elif not wanted.deletion_vectors and "deletionVectors" in present:
        found.append(Change("deletion vectors off", "ALTER TABLE {table} DROP FEATURE deletionVectors", drops=True))
    if not wanted.column_mapping and (mapped or "columnMapping" in present):
        found.append(Change("column mapping off", "ALTER TABLE {table} DROP FEATURE columnMapping", drops=True))
    return found


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _on(value: bool) -> str:
    return "on" if value else "off"

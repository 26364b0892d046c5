"""Which Delta table features a view's table has, and the statements that give it the ones asked for.

A view opens in every common Delta reader (Spark, ``deltalake``/delta-rs, polars, DuckDB over
Arrow) unless its configuration asks for more:

- **column mapping** only where a column name needs it (Delta refuses `` ,;{}()\\n\\t=`` in a
  physical column name); ``deltalake`` and polars refuse tables that have it;
- **deletion vectors** only where the view asks (``deletion_vectors: true``): a MERGE that
  changes a few rows of a file marks them deleted instead of rewriting the file; Spark and
  polars read them, ``deltalake`` refuses them;
- the **change data feed** where the view asks (``change_feed: true``); every reader above
  reads the table, ``deltalake`` its feed too.

Turning a feature off on an existing table drops it (``ALTER TABLE … DROP FEATURE``): Delta
rewrites what used it (files with deletion vectors; data files under physical column names)
in that commit, and readers that refused the table open it from then on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHANGE_FEED = "delta.enableChangeDataFeed"
DELETION_VECTORS = "delta.enableDeletionVectors"
COLUMN_MAPPING = "delta.columnMapping.mode"
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

"""A Delta table's upkeep: the table features a view asks for (change data feed, deletion
vectors, column mapping), its registration in a metastore, and OPTIMIZE with the statistics
indexed that its key ranges need. A part of :class:`~mvlog.spark.warehouse.Warehouse`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mvlog.errors import WarehouseError
from mvlog.spark import features
from mvlog.spark.sparksql import delta_table, quote_spark, spark_literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from mvlog.spark.commits import DeltaSession

OPTIMIZE_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
OPTIMIZE_MIN_FILE_BYTES = 1024 * 1024
OPTIMIZE_MAX_FILE_BYTES = 1024 * 1024 * 1024
INDEXED_COLUMNS = "delta.dataSkippingNumIndexedCols"
DEFAULT_INDEXED_COLUMNS = 32


class TableUpkeep:
    """Table features, the catalog and OPTIMIZE, over the warehouse's session (see the module)."""

    spark: SparkSession
    delta: DeltaSession

    def _detail(self, location: str) -> dict | None:
        raise NotImplementedError

    def _properties(self, location: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _schema_columns(self, location: str) -> list[str]:
        raise NotImplementedError

    def row_count(self, location: str) -> int:
        raise NotImplementedError

    def feature_changes(self, location: str, change_feed: bool, deletion_vectors: bool,
                        detail: dict[str, Any] | None = None) -> list[features.Change]:
        """What would give the view's existing table the features asked for (and those its columns
        need); nothing if it has them, or if there is no table yet (its first write sets them).
        ``detail``: its properties and features if already read (:meth:`occupant`)."""
        detail = detail or self._properties(location)
        if detail is None:
            return []
        columns = self._schema_columns(location)  # the table exists: no second DESCRIBE DETAIL
        return features.changes(detail, features.for_columns(columns, change_feed, deletion_vectors))

    def set_features(self, location: str, view: str, change_feed: bool, deletion_vectors: bool) -> list[str]:
        """Make :meth:`feature_changes`, each one commit; what changed ("change data feed on",
        "deletion vectors off", …)."""
        found = self.feature_changes(location, change_feed, deletion_vectors)
        self._change_features(location, view, found)
        return [c.description for c in found]

    def _change_features(self, location: str, view: str, changes: list[features.Change]) -> None:
        for change in changes:
            try:
                with self.delta.commit_settings({"view": view, "operation": "features"}):
                    self.spark.sql(change.statement.format(table=delta_table(location))).collect()
            except Exception as exc:
                raise self.delta.fail(f"turning {change.description} for {location} failed", exc) from None

    def register_table(self, database: str, name: str, location: str) -> bool:
        """Make ``database.name`` an external table of the Delta table at ``location`` in the session
        catalog (creating the database); False if it is one already. A table of that name that
        is something else is refused, not replaced."""
        table = f"{quote_spark(database)}.{quote_spark(name)}"
        try:
            if self.spark.catalog.tableExists(f"{database}.{name}"):
                here = (self._detail(location) or {}).get("location")
                there = self.spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"]
                if here is not None and there != here:
                    raise WarehouseError(f"catalog table {database}.{name} is {there}, not this view's table "
                                         f"{location}; drop it, or choose another catalog.database")
                return False
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_spark(database)}").collect()
            self.spark.sql(f"CREATE TABLE {table} USING DELTA LOCATION {spark_literal(location)}").collect()
        except WarehouseError:
            raise
        except Exception as exc:
            raise self.delta.fail(f"registering {database}.{name} in the Spark catalog failed", exc) from None
        return True

    def unregister_table(self, database: str, name: str) -> None:
        """Remove ``database.name`` from the session catalog; an external table's data stays."""
        try:
            self.spark.sql(f"DROP TABLE IF EXISTS {quote_spark(database)}.{quote_spark(name)}").collect()
        except Exception as exc:
            raise self.delta.fail(f"removing {database}.{name} from the Spark catalog failed", exc) from None

    def _index_columns(self, location: str, detail: dict, count: int) -> None:
        """Make an existing table collect statistics on at least its first ``count`` columns (a
        metadata-only commit before the rewrite; an index count, unlike a list of column
        names, stays valid whatever the next schema is)."""
        current = int((detail["properties"] or {}).get(INDEXED_COLUMNS, DEFAULT_INDEXED_COLUMNS))
        if 0 <= current < count:  # -1: every column is indexed already
            self.spark.sql(f"ALTER TABLE {delta_table(location)} "
                           f"SET TBLPROPERTIES ('{INDEXED_COLUMNS}' = '{int(count)}')")

    def optimize(self, location: str, view: str, cluster_column: str | None, rows_per_file: int,
                 vacuum: bool = False) -> tuple[int, int]:
        """Delta's OPTIMIZE: rewrite the table into files of about ``rows_per_file`` rows (by the
        table's bytes per row; 1 MB to 1 GB), ordered by ``cluster_column`` (ZORDER BY on one
        column is a sort) so that each file again holds one key range, as after a complete
        refresh — the small files and deletion vectors fast refreshes leave are folded in.
        Without a column, plain compaction. On a table with deletion vectors, then Delta's
        ``REORG … APPLY (PURGE)``: every file that still has one is rewritten without it (a
        file OPTIMIZE left alone). ``vacuum``: then delete files no version inside the table's
        retention period (Delta's default: 7 days) still needs. Returns (files removed, files added)."""
        table = delta_table(location)
        statement = f"OPTIMIZE {table}" + (f" ZORDER BY ({quote_spark(cluster_column)})" if cluster_column else "")
        try:
            detail = self._detail(location) or {}
            size = int(detail.get("sizeInBytes") or 0)
            rows = self.row_count(location)
            file_bytes = min(max(size * rows_per_file // max(rows, 1), OPTIMIZE_MIN_FILE_BYTES),
                             OPTIMIZE_MAX_FILE_BYTES)
            with self.delta.commit_settings({"view": view, "operation": "optimize"}, None,
                                       {OPTIMIZE_MAX_FILE_SIZE: str(file_bytes)}):
                metrics = self.spark.sql(statement).collect()[0]["metrics"]
            removed, added = int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])
            if (detail.get("properties") or {}).get(features.DELETION_VECTORS) == "true":
                with self.delta.commit_settings({"view": view, "operation": "purge"}):
                    purged = self.spark.sql(f"REORG TABLE {table} APPLY (PURGE)").collect()
                purge = purged[0]["metrics"] if purged and "metrics" in purged[0].asDict() else None
                if purge:
                    removed, added = removed + int(purge["numFilesRemoved"]), added + int(purge["numFilesAdded"])
            if vacuum:
                with self.delta.commit_settings({"view": view, "operation": "vacuum"}):
                    self.spark.sql(f"VACUUM {table}").collect()
        except WarehouseError:
            raise
        except Exception as exc:
            raise self.delta.fail(f"optimizing {location} failed", exc) from None
        return removed, added

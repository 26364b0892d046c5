"""The Spark/Delta step: read rows from PostgreSQL through JDBC, write Delta tables.

All reads of one refresh use one exported PostgreSQL snapshot: every JDBC session
(one per partition, and again on a task retry) starts a REPEATABLE READ transaction
and imports it before reading.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import datetime
from dataclasses import dataclass
from typing import Any, Iterator

from mvlog.errors import SourceError, WarehouseError, redact
from mvlog.jdbc import JDBC_CONNECTION_LOST, JdbcSource
from mvlog.model import CHANGED_KEY_PREFIX, FOREIGN_FILES_SHOWN, PRESENT, ROW_HASH_COLUMN, Occupant, checked_snapshot_id
from mvlog.spark import is_connect
from mvlog.sparksql import (delta_table, error_class, postgres_message, quote_spark, row_hash_sql, short_error,
                            spark_literal)

COMMIT_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
# Adaptive execution runs each of a MERGE's stages as a job of its own: off for the MERGE, it ran
# 16 jobs instead of 22 and a 1,000-key refresh of a 1M-row view took 0.1-0.6 s less
# (BENCHMARKS.md session 14); the staged source is small, so there is nothing to adapt to.
MERGE_CONF = {MATERIALIZE_SOURCE: "none", "spark.sql.adaptive.enabled": "false"}
OPTIMIZE_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
OPTIMIZE_MIN_FILE_BYTES = 1024 * 1024
OPTIMIZE_MAX_FILE_BYTES = 1024 * 1024 * 1024
BROADCAST_ROWS = 1_000_000  # staged rows up to which the MERGE broadcasts its source
MERGE_ATTEMPTS = 3  # a MERGE that lost a commit race to another writer of the table runs again
INDEXED_COLUMNS = "delta.dataSkippingNumIndexedCols"
CHANGE_FEED = "delta.enableChangeDataFeed"
DEFAULT_INDEXED_COLUMNS = 32
WRITE_PROBE = "_mvlog_write_probe"  # what check_writable leaves over Spark Connect (Spark ignores _ paths)
OWNER_COMMITS = 100  # newest commits searched for the view mvlog wrote a table for
OWN_COMMIT_SEARCH = 20  # newest commits searched for the one a write just made (others may follow it)
# What Spark says when a path holds no Delta table (or nothing at all).
NOT_A_DELTA_TABLE = {"DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND", "PATH_NOT_FOUND", "DELTA_PATH_DOES_NOT_EXIST"}


@dataclass(frozen=True)
class WriteCounts:
    """What one Delta commit did."""

    keys_read: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    version: int | None = None  # the Delta version that holds the write; None if nothing was committed


@dataclass(frozen=True)
class Staged:
    """Rows read from PostgreSQL once and held by the executors for one write, with the range of
    their first key column (``low``/``high``: None if every value is NULL)."""

    df: Any
    rows: int
    low: Any = None
    high: Any = None
    has_nulls: bool = False
    null_key_deletes: int = 0  # rows that delete the view row whose key columns are all NULL


class Warehouse:
    """Delta tables under one root, written from PostgreSQL reads.

    Delta is spoken to through Spark SQL and the DataFrame API only (no JVM objects, no
    DeltaTable), so the same code runs on a session of our own and on a Spark Connect
    server that has Delta's SQL extension.
    """

    def __init__(self, spark: Any, root: str, secrets: list[str] | None = None):
        self.spark = spark
        self.root = root.rstrip("/")
        self.secrets = secrets or []
        self.remote = is_connect(spark)

    def _fail(self, what: str, exc: BaseException) -> Exception:
        message = redact(short_error(exc), self.secrets)
        if "PSQLException" in str(exc) or "postgresql" in message.lower() or "JDBC" in message:
            message = redact(postgres_message(exc) or message, self.secrets)
            return SourceError(f"{what}: {message}", transient=any(m in str(exc) for m in JDBC_CONNECTION_LOST))
        return WarehouseError(f"{what}: {message}")

    def _detail(self, location: str) -> dict | None:
        """DESCRIBE DETAIL of the Delta table at ``location``; None if there is none."""
        try:
            return self.spark.sql(f"DESCRIBE DETAIL {delta_table(location)}").collect()[0].asDict()
        except Exception as exc:
            if error_class(exc) in NOT_A_DELTA_TABLE:
                return None
            raise self._fail(f"cannot inspect {location}", exc) from None  # e.g. an unreachable object store

    def _last_commit(self, location: str) -> dict:
        return self.spark.sql(f"DESCRIBE HISTORY {delta_table(location)} LIMIT 1").collect()[0].asDict()

    def _own_commit(self, location: str, metadata: dict) -> dict | None:
        """The newest commit that carries ``metadata``: the one this process's write just made (or,
        when Delta skipped an already-applied transaction, the one that applied it first). An
        OPTIMIZE or another view's refresh may have committed since, so it is searched for."""
        expected = json.loads(json.dumps(metadata, default=str))
        for limit in (1, OWN_COMMIT_SEARCH):  # nearly always the newest: read one commit file, not 20
            for row in self.history(location, limit).collect():
                if _mvlog_metadata(row["userMetadata"]) == expected:
                    return row.asDict()
        return None  # buried under later commits: the write stands, its version is not known

    def exists(self, location: str) -> bool:
        return self._detail(location) is not None

    def occupant(self, location: str) -> Occupant:
        """What ``location`` holds (see :class:`Occupant`). A Delta table's owner is the view named
        by the newest commits that carry mvlog's metadata (a VACUUM's commits carry none)."""
        if self._detail(location) is not None:
            rows = self.history(location, OWNER_COMMITS).select("userMetadata").collect()
            written = [m for m in map(_mvlog_metadata, (r["userMetadata"] for r in rows)) if m]
            return Occupant(delta=True, view=next((m["view"] for m in written if m.get("view")), None),
                            mvlog=bool(written))
        try:  # any file, at any depth (Spark skips names starting with _ or .)
            listing = (self.spark.read.format("binaryFile").option("recursiveFileLookup", "true")
                       .load(location).select("path").limit(FOREIGN_FILES_SHOWN).collect())
        except Exception as exc:
            if error_class(exc) in NOT_A_DELTA_TABLE:  # nothing there
                return Occupant()
            raise self._fail(f"cannot inspect {location}", exc) from None
        return Occupant(files=tuple(row["path"] for row in listing))

    def columns(self, location: str) -> list[str] | None:
        """The columns of the Delta table at ``location``; None if there is none."""
        if not self.exists(location):
            return None
        try:
            return list(self.spark.read.format("delta").load(location).columns)
        except Exception as exc:
            raise self._fail(f"reading {location} failed", exc) from None

    def check_writable(self) -> None:
        """Fail early, before anything is applied, if the warehouse root cannot be written."""
        try:
            if self.remote:  # the server's file system: ask it to write (an empty probe table stays)
                self.spark.range(0).write.mode("overwrite").format("parquet").save(f"{self.root}/{WRITE_PROBE}")
                return
            jvm = self.spark._jvm
            path = jvm.org.apache.hadoop.fs.Path(self.root)
            fs = path.getFileSystem(self.spark._jsc.hadoopConfiguration())
            probe = jvm.org.apache.hadoop.fs.Path(f"{self.root}/.mvlog-write-probe")
            fs.mkdirs(path)
            fs.create(probe, True).close()
            fs.delete(probe, False)
        except Exception as exc:
            raise WarehouseError(f"the warehouse {self.root} is not writable: {redact(short_error(exc), self.secrets)}") from None

    def check_can_delete(self) -> None:
        """Refuse ``drop --delete-data`` where tables cannot be deleted: over Spark Connect."""
        if self.remote:
            raise WarehouseError("cannot delete Delta tables through Spark Connect (Spark has no command for it); "
                                 "drop without --delete-data and delete the directories with your storage's tools")

    def delete(self, location: str) -> None:
        """Delete a Delta table's directory (``mvlog drop --delete-data``)."""
        self.check_can_delete()
        jvm = self.spark._jvm
        try:
            path = jvm.org.apache.hadoop.fs.Path(location)
            path.getFileSystem(self.spark._jsc.hadoopConfiguration()).delete(path, True)
        except Exception as exc:
            raise WarehouseError(f"cannot delete {location}: {redact(short_error(exc), self.secrets)}") from None

    def read(self, jdbc: JdbcSource, select_sql: str, snapshot: str | None, partitions: tuple[str, ...] = ()) -> Any:
        """A DataFrame of ``select_sql`` evaluated by PostgreSQL in ``snapshot``; with ``partitions``
        (disjoint WHERE clauses covering every row) one JDBC read per clause, in parallel."""
        options = {"fetchsize": "10000", "preferTimestampNTZ": "true", **jdbc.properties}
        if snapshot is not None:
            options["sessionInitStatement"] = (
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '"
                + checked_snapshot_id(snapshot) + "'"
            )
        table = f"({select_sql}\n) AS mvlog_src"
        try:
            if partitions:
                return self.spark.read.jdbc(jdbc.url, table, predicates=list(partitions), properties=options)
            return self.spark.read.format("jdbc").option("url", jdbc.url).option("dbtable", table).options(**options).load()
        except Exception as exc:
            raise self._fail("reading from PostgreSQL failed", exc) from None

    def stage(self, df: Any) -> "Staged":
        """Read ``df`` from PostgreSQL exactly once, into executor memory (spilling to disk).

        The MERGE then reads the staged rows twice (to find the touched files, then to write)
        without asking PostgreSQL again; the row count tells how to join them, the range of the
        first key column which target files can hold their keys. A local checkpoint, as
        Delta's own source materialization does (Delta refuses a cached source); Spark's
        context cleaner frees its blocks once the DataFrame is gone.
        """
        # SQL text, not pyspark.sql.functions: those pick classic or Connect by process-wide state.
        first = quote_spark(CHANGED_KEY_PREFIX + "0")
        null_key_delete = _null_key_delete(df.columns)
        try:
            checkpointed = df.localCheckpoint(eager=True)
            rows, low, high, non_null, null_key_deletes = checkpointed.selectExpr(
                "count(1)", f"min({first})", f"max({first})", f"count({first})",
                f"count_if({null_key_delete})").collect()[0]
        except Exception as exc:
            raise self._fail("reading from PostgreSQL failed", exc) from None
        return Staged(checkpointed, rows, low, high, non_null < rows, null_key_deletes)

    @contextlib.contextmanager
    def _commit_settings(self, metadata: dict, txn: tuple[str, int] | None = None,
                         conf: dict[str, str] | None = None) -> Iterator[None]:
        """Session settings for the next Delta commit: mvlog's metadata, the idempotent-write
        transaction, operation tunables; unset afterwards."""
        settings = {COMMIT_METADATA: json.dumps({"mvlog": metadata}, default=str, sort_keys=True), **(conf or {})}
        if txn:
            settings.update({TXN_APP_ID: txn[0], TXN_VERSION: str(txn[1])})
        for key, value in settings.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in settings:
                self.spark.conf.unset(key)

    def replace(self, location: str, df: Any, metadata: dict, txn: tuple[str, int] | None = None,
                key_columns: tuple[str, ...] = (), change_feed: bool = False) -> WriteCounts:
        """Atomically replace the table's contents (and schema) with ``df``: one Delta commit.

        Delta keeps min/max statistics (which MERGE uses to skip files) for the first 32
        columns only; when a key column comes later (a wide view, or hidden key columns after
        many visible ones), the table is told to index that many columns. Each row gets its
        hash (``_mvlog_row_hash``), which later MERGEs compare instead of the row's columns."""
        detail = self._detail(location)
        df = df.selectExpr("*", f"{row_hash_sql(df.columns)} AS {quote_spark(ROW_HASH_COLUMN)}")
        before = self.row_count(location) if detail else 0
        indexed = max((df.columns.index(k) + 1 for k in key_columns if k in df.columns), default=0)
        indexed = indexed if indexed > DEFAULT_INDEXED_COLUMNS else None
        try:
            writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
            if detail is None and change_feed:  # a new table takes its properties from the writer
                writer = writer.option(CHANGE_FEED, "true")
            if indexed and detail is None:
                writer = writer.option(INDEXED_COLUMNS, str(indexed))
            elif indexed:
                self._index_columns(location, detail, indexed)
            with self._commit_settings(metadata, txn):
                writer.save(location)
            commit = self._own_commit(location, metadata)
        except (SourceError, WarehouseError):
            raise
        except Exception as exc:
            raise self._fail(f"writing {location} failed", exc) from None
        commit = commit or {}
        written = int((commit.get("operationMetrics") or {}).get("numOutputRows", 0))
        return WriteCounts(keys_read=written, rows_inserted=written, rows_deleted=before,
                           version=_int_or_none(commit.get("version")))

    def set_change_feed(self, location: str, view: str, enabled: bool) -> bool:
        """Turn the table's Change Data Feed on or off (a metadata-only commit); False if it was
        already so, or there is no table yet (its first write sets it)."""
        detail = self._detail(location)
        if detail is None:
            return False
        current = str((detail["properties"] or {}).get(CHANGE_FEED, "false")).lower() == "true"
        if current == enabled:
            return False
        try:
            with self._commit_settings({"view": view, "operation": "change_feed"}):
                self.spark.sql(f"ALTER TABLE {delta_table(location)} "
                               f"SET TBLPROPERTIES ('{CHANGE_FEED}' = '{str(enabled).lower()}')").collect()
        except Exception as exc:
            raise self._fail(f"setting the change feed of {location} failed", exc) from None
        return True

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
            raise self._fail(f"registering {database}.{name} in the Spark catalog failed", exc) from None
        return True

    def unregister_table(self, database: str, name: str) -> None:
        """Remove ``database.name`` from the session catalog; an external table's data stays."""
        try:
            self.spark.sql(f"DROP TABLE IF EXISTS {quote_spark(database)}.{quote_spark(name)}").collect()
        except Exception as exc:
            raise self._fail(f"removing {database}.{name} from the Spark catalog failed", exc) from None

    def _index_columns(self, location: str, detail: dict, count: int) -> None:
        """Make an existing table collect statistics on at least its first ``count`` columns (a
        metadata-only commit before the rewrite; an index count, unlike a list of column
        names, stays valid whatever the next schema is)."""
        current = int((detail["properties"] or {}).get(INDEXED_COLUMNS, DEFAULT_INDEXED_COLUMNS))
        if 0 <= current < count:  # -1: every column is indexed already
            self.spark.sql(f"ALTER TABLE {delta_table(location)} "
                           f"SET TBLPROPERTIES ('{INDEXED_COLUMNS}' = '{int(count)}')")

    def merge(self, location: str, staged: "Staged", key_columns: tuple[str, ...], metadata: dict,
              txn: tuple[str, int] | None = None, row_hash: bool = True, trust_row_hash: bool = True) -> WriteCounts:
        """One MERGE on the view key: the staged rows hold affected keys (``_mvlog_key_<i>``) and
        their current view rows; ``_mvlog_present`` is NULL where the key has no row any more.

        A row that did not change is left alone (no deletion vector, no rewrite, no change-feed
        row). With ``row_hash`` (the table has ``_mvlog_row_hash``) that test compares the
        stored hash with the new row's, so the MERGE's scans of the table read its key columns
        and the hash only; a table written before the hash existed compares every column until
        its next complete refresh. ``trust_row_hash`` False (verify --repair, whose rows differ
        from what the table holds) compares every column and rewrites the hash."""
        if staged.rows == 0:
            return WriteCounts()
        df = staged.df
        if staged.null_key_deletes and not self._has_null_key_row(location, key_columns):
            # Nothing to delete, and Delta 4.4's deletion-vector MERGE fails on such a row: it
            # matches a missing target row through <=> ("Unexpected row: did not match any
            # merge clause"). Filtering the staged rows reads them again from the checkpoint.
            df = df.where(f"NOT ({_null_key_delete(df.columns)})")
        # Few affected keys: broadcast them, so the MERGE's join does not shuffle the whole
        # target table (measured: about a third of a small MERGE's time).
        value_columns = [c for c in df.columns if not c.startswith(CHANGED_KEY_PREFIX) and c != PRESENT]
        compared = value_columns
        if row_hash:
            df = df.selectExpr("*", f"{row_hash_sql(value_columns)} AS {quote_spark(ROW_HASH_COLUMN)}")
            compared = [ROW_HASH_COLUMN] if trust_row_hash else [*value_columns, ROW_HASH_COLUMN]
            value_columns = [*value_columns, ROW_HASH_COLUMN]
        source = df.hint("broadcast") if staged.rows <= BROADCAST_ROWS else df
        view = f"mvlog_staged_{uuid.uuid4().hex}"
        s = lambda c: f"s.{quote_spark(c)}"  # noqa: E731
        t = lambda c: f"t.{quote_spark(c)}"  # noqa: E731
        # Null-safe: an aggregate's group key may hold NULLs.
        on = [f"{t(k)} <=> {s(CHANGED_KEY_PREFIX + str(i))}" for i, k in enumerate(key_columns)]
        try:
            key_range = _key_range(key_columns[0], df.schema[CHANGED_KEY_PREFIX + "0"].dataType, staged)
            if key_range is not None:  # a target-only predicate: Delta skips files outside the range
                on.append(key_range)
            present = f"{s(PRESENT)} IS NOT NULL"
            unchanged = " AND ".join(f"{t(c)} <=> {s(c)}" for c in compared)
            assignments = ", ".join(f"{quote_spark(c)} = {s(c)}" for c in value_columns)
            statement = (
                f"MERGE INTO {delta_table(location)} t USING {quote_spark(view)} s ON {' AND '.join(on)}\n"
                f"WHEN MATCHED AND NOT ({present}) THEN DELETE\n"
                f"WHEN MATCHED AND {present} AND NOT ({unchanged}) THEN UPDATE SET {assignments}\n"
                f"WHEN NOT MATCHED AND {present} THEN INSERT ({', '.join(map(quote_spark, value_columns))}) "
                f"VALUES ({', '.join(map(s, value_columns))})"
            )
            source.createOrReplaceTempView(view)
            try:
                for attempt in range(1, MERGE_ATTEMPTS + 1):
                    try:
                        # The source is staged already: Delta need not materialize it again.
                        with self._commit_settings(metadata, txn, MERGE_CONF):
                            rows = self.spark.sql(statement).collect()
                        break
                    except Exception as exc:
                        if attempt == MERGE_ATTEMPTS or not _lost_commit_race(exc):
                            raise
            finally:
                self.spark.catalog.dropTempView(view)
        except (SourceError, WarehouseError):
            raise
        except Exception as exc:
            raise self._fail(f"merging into {location} failed", exc) from None
        try:
            version = _int_or_none((self._own_commit(location, metadata) or {}).get("version"))
        except Exception as exc:
            raise self._fail(f"reading the history of {location} failed", exc) from None
        if not rows:  # Delta skipped the commit: this (txnAppId, txnVersion) was applied already
            return WriteCounts(version=version)
        row = rows[0]
        return WriteCounts(
            keys_read=staged.rows,
            rows_inserted=int(row["num_inserted_rows"]),
            rows_updated=int(row["num_updated_rows"]),
            rows_deleted=int(row["num_deleted_rows"]),
            version=version,
        )

    def optimize(self, location: str, view: str, cluster_column: str | None, rows_per_file: int,
                 vacuum: bool = False) -> tuple[int, int]:
        """Delta's OPTIMIZE: rewrite the table into files of about ``rows_per_file`` rows (by the
        table's bytes per row; 1 MB to 1 GB), ordered by ``cluster_column`` (ZORDER BY on one
        column is a sort) so that each file again holds one key range, as after a complete
        refresh — the small files and deletion vectors fast refreshes leave are folded in.
        Without a column, plain compaction. ``vacuum``: then delete files no version inside the
        table's retention period (Delta's default: 7 days) still needs.
        Returns (files removed, files added)."""
        table = delta_table(location)
        statement = f"OPTIMIZE {table}" + (f" ZORDER BY ({quote_spark(cluster_column)})" if cluster_column else "")
        try:
            detail = self._detail(location) or {}
            size = int(detail.get("sizeInBytes") or 0)
            rows = self.row_count(location)
            file_bytes = min(max(size * rows_per_file // max(rows, 1), OPTIMIZE_MIN_FILE_BYTES), OPTIMIZE_MAX_FILE_BYTES)
            with self._commit_settings({"view": view, "operation": "optimize"}, None,
                                       {OPTIMIZE_MAX_FILE_SIZE: str(file_bytes)}):
                metrics = self.spark.sql(statement).collect()[0]["metrics"]
            if vacuum:
                with self._commit_settings({"view": view, "operation": "vacuum"}):
                    self.spark.sql(f"VACUUM {table}").collect()
        except WarehouseError:
            raise
        except Exception as exc:
            raise self._fail(f"optimizing {location} failed", exc) from None
        return int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])

    def _has_null_key_row(self, location: str, key_columns: tuple[str, ...]) -> bool:
        condition = " AND ".join(f"{quote_spark(k)} IS NULL" for k in key_columns)
        try:
            return bool(self.spark.read.format("delta").load(location).where(condition).limit(1).count())
        except Exception as exc:
            raise self._fail(f"reading {location} failed", exc) from None

    def row_count(self, location: str) -> int:
        try:
            return int(self.spark.read.format("delta").load(location).count())
        except Exception as exc:
            raise self._fail(f"reading {location} failed", exc) from None

    def history(self, location: str, limit: int | None = None) -> Any:
        """The Delta commit history of the table as a DataFrame, newest first."""
        return self.spark.sql(f"DESCRIBE HISTORY {delta_table(location)}" + (f" LIMIT {int(limit)}" if limit else ""))

    def _stamped_versions(self, location: str) -> list[tuple[int, datetime | None]]:
        """Every version in the table's history, newest first, with the stamp of the newest commit
        mvlog wrote in a refresh at or before it (OPTIMIZE and VACUUM keep the stamp before them)."""
        try:
            rows = self.history(location).select("version", "userMetadata").collect()
        except Exception as exc:
            raise self._fail(f"reading the history of {location} failed", exc) from None
        if not rows:
            raise WarehouseError(f"{location} has no Delta history")
        stamped: list[tuple[int, datetime | None]] = []
        stamp = None
        for row in reversed(rows):
            written = (_mvlog_metadata(row["userMetadata"]) or {}).get("snaptime")
            stamp = datetime.fromisoformat(written) if written else stamp
            stamped.append((int(row["version"]), stamp))
        return stamped[::-1]

    def mvlog_version(self, location: str) -> tuple[int, datetime | None]:
        """The table's newest version, and the stamp of the newest commit mvlog wrote in a refresh
        (None if none has one)."""
        return self._stamped_versions(location)[0]

    def version_at(self, location: str, stamp: datetime) -> int | None:
        """The newest version of the table that holds the view as of ``stamp`` (from the stamps in
        its commits); None if no version is that old."""
        return next((v for v, s in self._stamped_versions(location) if s is not None and s <= stamp), None)

    def read_version(self, location: str, version: int) -> Any:
        """The Delta table at ``location`` as of ``version``."""
        try:
            return self.spark.read.format("delta").option("versionAsOf", int(version)).load(location)
        except Exception as exc:
            raise self._fail(f"reading {location} failed", exc) from None

    def last_commit_metadata(self, location: str) -> dict | None:
        """The mvlog metadata of the newest commit, if it was written by mvlog."""
        return _mvlog_metadata(self._last_commit(location)["userMetadata"])


def _null_key_delete(columns: list[str]) -> str:
    """Spark SQL: a staged row that deletes the view row whose key columns are all NULL."""
    keys = [c for c in columns if c.startswith(CHANGED_KEY_PREFIX)]
    return " AND ".join([*(f"{quote_spark(k)} IS NULL" for k in keys), f"{quote_spark(PRESENT)} IS NULL"])


def _mvlog_metadata(user_metadata: str | None) -> dict | None:
    """mvlog's part of a commit's userMetadata; None if mvlog did not write it."""
    try:
        metadata = json.loads(user_metadata)["mvlog"] if user_metadata else None
    except (ValueError, KeyError, TypeError):
        return None
    return metadata if isinstance(metadata, dict) else None


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _lost_commit_race(exc: BaseException) -> bool:
    """Another commit to the table won Delta's optimistic-concurrency check (an OPTIMIZE, or the
    MERGE of a killed client that a Spark Connect server finished). Running the MERGE again is
    safe: it recomputes against the new version, and its transaction version makes Delta skip
    it if a commit of the same refresh landed already."""
    condition = error_class(exc) or ""
    return (condition.startswith("DELTA_CONCURRENT") or "[DELTA_CONCURRENT_" in str(exc)
            or condition in ("DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED"))


RANGE_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType", "DecimalType", "StringType", "DateType")


def _key_range(name: str, data_type: Any, staged: Staged) -> str | None:
    """``t.<first key> BETWEEN low AND high`` (OR IS NULL) over the staged keys, as Spark SQL;
    None for key types whose literals do not round-trip exactly (floats, timestamps)."""
    if type(data_type).__name__ not in RANGE_TYPES or (staged.low is None and not staged.has_nulls):
        return None
    column = f"t.{quote_spark(name)}"
    condition = (f"{column} BETWEEN {spark_literal(staged.low)} AND {spark_literal(staged.high)}"
                 if staged.low is not None else "false")
    return f"({condition} OR {column} IS NULL)" if staged.has_nulls else condition

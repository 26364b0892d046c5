"""The Spark/Delta step: read rows from PostgreSQL through JDBC, write Delta tables.

All reads of one refresh use one exported PostgreSQL snapshot: every JDBC session
(one per partition, and again on a task retry) starts a REPEATABLE READ transaction
and imports it before reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mvlog.errors import WarehouseError, redact
from mvlog.model import FOREIGN_FILES_SHOWN, ROW_HASH_COLUMN, Occupant, checked_snapshot_id
from mvlog.spark import features
from mvlog.spark.commits import DeltaSession, int_or_none, mvlog_metadata
from mvlog.spark.merge import Merger, Staged, WriteCounts
from mvlog.spark.replace import Replacer, unreplaceable
from mvlog.spark.session import is_connect
from mvlog.spark.sparksql import (
    delta_table,
    error_class,
    quote_spark,
    row_hash_sql,
    short_error,
)
from mvlog.spark.upkeep import DEFAULT_INDEXED_COLUMNS, INDEXED_COLUMNS, TableUpkeep
from mvlog.spark.versions import DeltaHistory

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject
    from pyspark.sql import DataFrame, SparkSession

    from mvlog.postgres.jdbc import JdbcSource  # handed in by the caller: this layer does not import psycopg2

LOCAL_PROBE = ".mvlog-write-probe"  # what check_writable writes and deletes at the root of its own
WRITE_PROBE = "_mvlog_write_probe"  # what check_writable leaves over Spark Connect (Spark ignores _ paths)
OWNER_COMMITS = 100  # newest commits searched for the view mvlog wrote a table for
# What Spark says when a path holds no Delta table (or nothing at all).
NOT_A_DELTA_TABLE = {"DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND", "PATH_NOT_FOUND",
                     "DELTA_PATH_DOES_NOT_EXIST"}


class Warehouse(TableUpkeep):
    """Delta tables under one root, written from PostgreSQL reads.

    Delta is spoken to through Spark SQL and the DataFrame API only (no JVM objects, no
    DeltaTable), so the same code runs on a session of our own and on a Spark Connect
    server that has Delta's SQL extension. Composed of parts on one :class:`DeltaSession`: the
    tables' history (:class:`DeltaHistory`), the MERGE of a fast refresh (:class:`Merger`), its
    key-only write (:class:`Replacer`), table features, the catalog and OPTIMIZE
    (:class:`~mvlog.spark.upkeep.TableUpkeep`), and what this class does itself (reads, replaces,
    what a table holds).
    """

    def __init__(self, spark: SparkSession, root: str, secrets: list[str] | None = None):
        self.spark = spark
        self.root = root.rstrip("/")
        self.secrets = secrets or []
        self.remote = is_connect(spark)
        self.delta = DeltaSession(spark, self.secrets)
        self.commits = DeltaHistory(self.delta)
        self.merger = Merger(self.delta, self.commits)
        self.replacer = Replacer(self.delta, self.commits)

    # -- the parts' operations, as the pipeline calls them ------------------------------

    def stage(self, df: DataFrame, carried: tuple[str, str] | None = None, carried_max: int = 0) -> Staged:
        """See :meth:`Merger.stage`."""
        return self.merger.stage(df, carried, carried_max)

    def present_values(self, staged: Staged, columns: Sequence[str]) -> list[list[Any]]:
        """See :meth:`Merger.present_values`."""
        return self.merger.present_values(staged, columns)

    def merge(self, location: str, staged: Staged, key_columns: tuple[str, ...], metadata: dict,
              txn: tuple[str, int] | None = None, row_hash: bool = True, trust_row_hash: bool = True,
              whole: bool = False) -> WriteCounts:
        """See :meth:`Merger.merge`."""
        return self.merger.merge(location, staged, key_columns, metadata, txn, row_hash, trust_row_hash, whole)

    def rewrite(self, location: str, staged: Staged, key_columns: tuple[str, ...], metadata: dict,
                txn: tuple[str, int] | None = None) -> WriteCounts:
        """See :meth:`Merger.rewrite`."""
        return self.merger.rewrite(location, staged, key_columns, metadata, txn)

    def unreplaceable(self, staged: Staged) -> str | None:
        """See :func:`mvlog.spark.replace.unreplaceable`."""
        return unreplaceable(staged)

    def replace_keys(self, location: str, staged: Staged, key_columns: tuple[str, ...], metadata: dict,
                     txn: tuple[str, int] | None = None) -> WriteCounts:
        """See :meth:`Replacer.replace`."""
        return self.replacer.replace(location, staged, key_columns, metadata, txn)

    def history(self, location: str, limit: int | None = None) -> DataFrame:
        """See :meth:`DeltaHistory.history`."""
        return self.commits.history(location, limit)

    def mvlog_version(self, location: str) -> tuple[int, datetime | None]:
        """See :meth:`DeltaHistory.mvlog_version`."""
        return self.commits.mvlog_version(location)

    def version_at(self, location: str, stamp: datetime) -> int | None:
        """See :meth:`DeltaHistory.version_at`."""
        return self.commits.version_at(location, stamp)

    def fence(self, location: str, view: str, txn: tuple[str, int]) -> None:
        """See :meth:`DeltaHistory.fence`."""
        self.commits.fence(location, view, txn)

    def restore_to_stamp(self, location: str, view: str, stamp: datetime) -> int | None:
        """See :meth:`DeltaHistory.restore_to_stamp`."""
        return self.commits.restore_to_stamp(location, view, stamp)

    def read_version(self, location: str, version: int) -> DataFrame:
        """See :meth:`DeltaHistory.read_version`."""
        return self.commits.read_version(location, version)

    def last_commit_metadata(self, location: str) -> dict | None:
        """See :meth:`DeltaHistory.last_commit_metadata`."""
        return self.commits.last_commit_metadata(location)

    # -- tables -------------------------------------------------------------------------

    def _detail(self, location: str) -> dict | None:
        """DESCRIBE DETAIL of the Delta table at ``location``; None if there is none."""
        try:
            return self.spark.sql(f"DESCRIBE DETAIL {delta_table(location)}").collect()[0].asDict()
        except Exception as exc:
            if error_class(exc) in NOT_A_DELTA_TABLE:
                return None
            raise self.delta.fail(f"cannot inspect {location}", exc) from None  # e.g. an unreachable object store

    def _properties(self, location: str) -> dict[str, Any] | None:
        """The table's properties and table features, as DESCRIBE DETAIL's ``properties`` and
        ``tableFeatures`` give them, from ``SHOW TBLPROPERTIES``: the table's metadata and
        protocol only, where DESCRIBE DETAIL builds the state of its newest version (its file
        list: ~1 s a table after each commit); None if there is no Delta table."""
        try:
            rows = self.spark.sql(f"SHOW TBLPROPERTIES {delta_table(location)}").collect()
        except Exception as exc:
            if error_class(exc) in NOT_A_DELTA_TABLE:
                return None
            raise self.delta.fail(f"cannot inspect {location}", exc) from None
        found = {row["key"]: row["value"] for row in rows}
        features = sorted(k.removeprefix("delta.feature.") for k, v in found.items()
                          if k.startswith("delta.feature.") and v == "supported")
        properties = {k: v for k, v in found.items()
                      if not k.startswith(("delta.feature.", "delta.minReaderVersion", "delta.minWriterVersion"))}
        return {"properties": properties, "tableFeatures": features}

    def warm(self, location: str) -> None:
        """Have Delta build the state of the table's newest version (its file list, which every
        read and write of the version needs first) and keep it cached in this session's JVM. An
        optimization only: a failure is left to the next refresh to meet."""
        try:
            self.spark.read.format("delta").load(location).inputFiles()
        except Exception:  # noqa: BLE001 - the next read of the table reports what is wrong
            pass

    def exists(self, location: str) -> bool:
        return self._detail(location) is not None

    def occupant(self, location: str, built_by: str | None = None) -> Occupant:
        """What ``location`` holds (see :class:`Occupant`). A Delta table's owner is the view named
        by the newest commits that carry mvlog's metadata (a VACUUM's commits carry none), or
        ``built_by``, the view the catalog says mvlog built there (its history is not read).
        ``detail`` holds the table's properties and features either way."""
        if built_by is not None:  # the catalog's word for the owner: whether the table is there, and its features
            properties = self._properties(location)
            if properties is not None:
                return Occupant(delta=True, view=built_by, mvlog=True, detail=properties)
        detail = self._detail(location)
        if detail is not None:
            rows = self.commits.history(location, OWNER_COMMITS).select("userMetadata").collect()
            written = [m for m in map(mvlog_metadata, (r["userMetadata"] for r in rows)) if m]
            return Occupant(delta=True, view=next((m["view"] for m in written if m.get("view")), None),
                            mvlog=bool(written), detail=detail)
        try:  # any file, at any depth (Spark skips names starting with _ or .)
            listing = (self.spark.read.format("binaryFile").option("recursiveFileLookup", "true")
                       .load(location).select("path").limit(FOREIGN_FILES_SHOWN).collect())
        except Exception as exc:
            if error_class(exc) in NOT_A_DELTA_TABLE:  # nothing there
                return Occupant()
            raise self.delta.fail(f"cannot inspect {location}", exc) from None
        return Occupant(files=tuple(row["path"] for row in listing))

    def columns(self, location: str) -> list[str] | None:
        """The columns of the Delta table at ``location``; None if there is none.

        DESCRIBE DETAIL first: it reads the whole log (the state of the table's newest version,
        which the MERGE needs anyway), so a damaged table fails the plan before anything starts.
        Reading the schema alone (from the checksum file) skips that, but then the damage shows
        only in the MERGE, and for a refresh with changes the time is the same (docs/benchmarks-history.md
        session 16)."""
        return self._schema_columns(location) if self.exists(location) else None

    def _schema_columns(self, location: str) -> list[str]:
        try:
            return list(self.spark.read.format("delta").load(location).columns)
        except Exception as exc:
            raise self.delta.fail(f"reading {location} failed", exc) from None

    def check_writable(self) -> None:
        """Fail early, before anything is applied, if the warehouse root cannot be written."""
        try:
            if self.remote:  # the server's file system: ask it to write (an empty probe table stays)
                self.spark.range(0).write.mode("overwrite").format("parquet").save(f"{self.root}/{WRITE_PROBE}")
                return
            fs, path = self._hadoop_path(self.root)
            _, probe = self._hadoop_path(f"{self.root}/{LOCAL_PROBE}")
            fs.mkdirs(path)
            fs.create(probe, True).close()
            fs.delete(probe, False)
        except Exception as exc:
            raise WarehouseError(f"the warehouse {self.root} is not writable: "
                                 f"{redact(short_error(exc), self.secrets)}") from None

    def check_can_delete(self) -> None:
        """Refuse ``drop --delete-data`` where tables cannot be deleted: over Spark Connect."""
        if self.remote:
            raise WarehouseError("cannot delete Delta tables through Spark Connect (Spark has no command for it); "
                                 "drop without --delete-data and delete the directories with your storage's tools")

    def delete(self, location: str) -> None:
        """Delete a Delta table's directory (``mvlog drop --delete-data``)."""
        self.check_can_delete()
        try:
            fs, path = self._hadoop_path(location)
            fs.delete(path, True)
        except Exception as exc:
            raise WarehouseError(f"cannot delete {location}: {redact(short_error(exc), self.secrets)}") from None

    def _hadoop_path(self, location: str) -> tuple[JavaObject, JavaObject]:
        """Hadoop's FileSystem of ``location`` and its Path, through this process's JVM (a session
        of mvlog's own: over Spark Connect there is none)."""
        jvm = self.spark._jvm
        if jvm is None:
            raise WarehouseError("this Spark session has no JVM in this process")
        path = jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(self.spark._jsc.hadoopConfiguration()), path

    def read(self, jdbc: JdbcSource, select_sql: str, snapshot: str | None,
             partitions: tuple[str, ...] = (), settings: tuple[str, ...] = ()) -> DataFrame:
        """A DataFrame of ``select_sql`` evaluated by PostgreSQL in ``snapshot``; with ``partitions``
        (disjoint WHERE clauses covering every row) one JDBC read per clause, in parallel
        (``settings``: the caller's ``SET LOCAL`` statements, run in the snapshot's transaction first,
        after ``jdbc``'s own)."""
        options = {"fetchsize": "10000", "preferTimestampNTZ": "true", **jdbc.properties}
        if snapshot is not None:
            options["sessionInitStatement"] = (
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '"
                + checked_snapshot_id(snapshot) + "'"
                + "".join(f"; {setting}" for setting in (*jdbc.read_settings, *settings))
            )
        table = f"({select_sql}\n) AS mvlog_src"
        try:
            if partitions:
                df = self.spark.read.jdbc(jdbc.url, table, predicates=list(partitions), properties=options)
            else:
                df = (self.spark.read.format("jdbc").option("url", jdbc.url).option("dbtable", table)
                      .options(**options).load())
            # Under Spark Connect the read is resolved (PostgreSQL asked for its columns) only when its
            # schema is first needed: here, where a failure becomes mvlog's error; the schema is kept.
            _ = df.schema
            return df
        except Exception as exc:
            raise self.delta.fail("reading from PostgreSQL failed", exc) from None

    def interrupt(self) -> None:
        """Interrupt every operation of this session (from another thread): a refresh whose
        PostgreSQL connections were abandoned stops waiting on Spark."""
        try:
            self.spark.interruptAll()
        except Exception:  # nothing running, or the session is gone: nothing to stop
            return

    def replace(self, location: str, df: DataFrame, metadata: dict, txn: tuple[str, int] | None = None,
                key_columns: tuple[str, ...] = (), change_feed: bool = False,
                deletion_vectors: bool = False, column_mapping: bool = False,
                checkpoint_interval: int | None = None) -> WriteCounts:
        """Atomically replace the table's contents (and schema) with ``df``: one Delta commit.

        The table gets the features the view asks for and its columns need (see
        :mod:`mvlog.spark.features`): a new table from the writer's options; an existing one by
        metadata commits before the write, and features it no longer needs dropped after it. A new
        table takes ``checkpoint_interval`` (None: Delta's); an existing one keeps its own.
        Delta keeps min/max statistics (which MERGE uses to skip files) for the first 32
        columns only; when a key column comes later (a wide view, or hidden key columns after
        many visible ones), the table is told to index that many columns. Each row gets its
        hash (``_mvlog_row_hash``), which later MERGEs compare instead of the row's columns."""
        detail = self._detail(location)
        df = df.selectExpr("*", f"{row_hash_sql(df.columns)} AS {quote_spark(ROW_HASH_COLUMN)}")
        wanted = features.for_columns(df.columns, change_feed, deletion_vectors)
        if wanted.column_mapping and not column_mapping:  # never a table common readers misread, by default
            raise WarehouseError(f"view {metadata.get('view', location)}: {features.refusal(df.columns)}")
        view = str(metadata.get("view", ""))
        before = self.row_count(location) if detail else 0
        last_key = max((df.columns.index(k) + 1 for k in key_columns if k in df.columns), default=0)
        indexed = last_key if last_key > DEFAULT_INDEXED_COLUMNS else None
        with self.delta.failing(f"writing {location} failed"):
            writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
            drops: list[features.Change] = []
            if detail is None:  # a new table takes its properties from the writer
                writer = writer.options(**wanted.creation_options())
                if checkpoint_interval:
                    writer = writer.option(features.CHECKPOINT_INTERVAL, str(checkpoint_interval))
                if indexed:
                    writer = writer.option(INDEXED_COLUMNS, str(indexed))
            else:
                found = features.changes(detail, wanted)
                self._change_features(location, view, [c for c in found if not c.drops])
                drops = [c for c in found if c.drops]
                if indexed:
                    self._index_columns(location, detail, indexed)
            with self.delta.commit_settings(metadata, txn):
                writer.save(location)
            commit = self.commits.own_commit(location, metadata)
            self._change_features(location, view, drops)  # nothing left to rewrite: the write replaced it
        commit = commit or {}
        written = int((commit.get("operationMetrics") or {}).get("numOutputRows", 0))
        return WriteCounts(keys_read=written, rows_inserted=written, rows_deleted=before,
                           version=int_or_none(commit.get("version")))

    def row_count(self, location: str) -> int:
        try:
            return int(self.spark.read.format("delta").load(location).count())
        except Exception as exc:
            raise self.delta.fail(f"reading {location} failed", exc) from None

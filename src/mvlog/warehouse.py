"""The Spark/Delta step: read rows from PostgreSQL through JDBC, write Delta tables.

All reads of one refresh use one exported PostgreSQL snapshot: every JDBC session
(one per partition, and again on a task retry) starts a REPEATABLE READ transaction
and imports it before reading.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from psycopg2.extensions import parse_dsn

from mvlog.errors import ConfigError, SourceError, WarehouseError, redact
from mvlog.model import CHANGED_KEY_PREFIX, PRESENT, checked_snapshot_id

COMMIT_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
OPTIMIZE_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
OPTIMIZE_MIN_FILE_BYTES = 1024 * 1024
OPTIMIZE_MAX_FILE_BYTES = 1024 * 1024 * 1024
BROADCAST_ROWS = 1_000_000  # staged rows up to which the MERGE broadcasts its source
INDEXED_COLUMNS = "delta.dataSkippingNumIndexedCols"
DEFAULT_INDEXED_COLUMNS = 32
# What the PostgreSQL JDBC driver says when the connection, not the statement, failed: the
# same read may succeed later.
JDBC_CONNECTION_LOST = ("terminating connection", "I/O error occurred", "Connection refused",
                        "This connection has been closed", "server closed the connection")


@dataclass(frozen=True)
class JdbcSource:
    """How Spark reaches PostgreSQL: a JDBC URL plus connection properties."""

    url: str
    properties: dict[str, str] = field(repr=False)

    @classmethod
    def from_dsn(cls, dsn: str) -> "JdbcSource":
        try:
            params = parse_dsn(dsn)
        except Exception:
            raise ConfigError("source.dsn is not a valid PostgreSQL connection string") from None
        host = params.get("host") or params.get("hostaddr") or "localhost"
        if host.startswith("/"):
            raise ConfigError("source.dsn must name a TCP host for Spark's JDBC reads, not a Unix socket directory")
        hosts = host.split(",")
        ports = (params.get("port") or "5432").split(",")
        netloc = ",".join(f"[{h}]:{ports[min(i, len(ports) - 1)]}" if ":" in h else f"{h}:{ports[min(i, len(ports) - 1)]}"
                          for i, h in enumerate(hosts))
        dbname = params.get("dbname") or params.get("user") or "postgres"
        properties = {"driver": "org.postgresql.Driver", "ApplicationName": "mvlog-spark"}
        for key, prop in (("user", "user"), ("password", "password"), ("sslmode", "sslmode"),
                          ("sslrootcert", "sslrootcert"), ("sslcert", "sslcert"), ("sslkey", "sslkey"),
                          ("connect_timeout", "connectTimeout")):
            if params.get(key):
                properties[prop] = params[key]
        from urllib.parse import quote

        return cls(f"jdbc:postgresql://{netloc}/{quote(dbname, safe='')}", properties)


@dataclass(frozen=True)
class WriteCounts:
    """What one Delta commit did."""

    keys_read: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0


@dataclass(frozen=True)
class Staged:
    """Rows read from PostgreSQL once and held by the executors for one write, with the range of
    their first key column (``low``/``high``: None if every value is NULL)."""

    df: Any
    rows: int
    low: Any = None
    high: Any = None
    has_nulls: bool = False


def quote_spark(name: str) -> str:
    """A Spark SQL identifier in backticks."""
    return "`" + name.replace("`", "``") + "`"


def short_error(exc: BaseException) -> str:
    """The first meaningful line of a Spark/JVM error."""
    java = getattr(exc, "java_exception", None)  # py4j.protocol.Py4JJavaError
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:
            text = str(exc)
    else:
        text = getattr(exc, "desc", None) or str(exc)
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "JVM stacktrace", "Traceback")):
            line = re.sub(r"^(org\.[\w.$]+|java\.[\w.$]+|py4j\.[\w.$]+): ", "", line)
            return line[:400]
    return exc.__class__.__name__


class Warehouse:
    """Delta tables under one root, written from PostgreSQL reads."""

    def __init__(self, spark: Any, root: str, secrets: list[str] | None = None):
        self.spark = spark
        self.root = root.rstrip("/")
        self.secrets = secrets or []

    def _fail(self, what: str, exc: BaseException) -> Exception:
        message = redact(short_error(exc), self.secrets)
        if "PSQLException" in str(exc) or "postgresql" in message.lower():
            return SourceError(f"{what}: {message}", transient=any(m in str(exc) for m in JDBC_CONNECTION_LOST))
        return WarehouseError(f"{what}: {message}")

    def exists(self, location: str) -> bool:
        from delta.tables import DeltaTable

        try:
            return bool(DeltaTable.isDeltaTable(self.spark, location))
        except Exception as exc:  # e.g. an unreachable object store
            raise self._fail(f"cannot inspect {location}", exc) from None

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
        jvm = self.spark._jvm
        try:
            path = jvm.org.apache.hadoop.fs.Path(self.root)
            fs = path.getFileSystem(self.spark._jsc.hadoopConfiguration())
            probe = jvm.org.apache.hadoop.fs.Path(f"{self.root}/.mvlog-write-probe")
            fs.mkdirs(path)
            fs.create(probe, True).close()
            fs.delete(probe, False)
        except Exception as exc:
            raise WarehouseError(f"the warehouse {self.root} is not writable: {redact(short_error(exc), self.secrets)}") from None

    def delete(self, location: str) -> None:
        """Delete a Delta table's directory (``mvlog drop --delete-data``)."""
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

    @contextlib.contextmanager
    def staged(self, df: Any, range_column: str | None = None) -> Iterator["Staged"]:
        """Read ``df`` from PostgreSQL exactly once, into executor memory (spilling to disk).

        The MERGE then reads the staged rows twice (to find the touched files, then to write)
        without asking PostgreSQL again; the row count tells how to join them, the range of
        ``range_column`` which target files can hold their keys. A local checkpoint, as
        Delta's own source materialization does (Delta refuses a cached source); Spark's
        context cleaner frees its blocks once the DataFrame is gone.
        """
        from pyspark.sql import functions as F

        try:
            checkpointed = df.localCheckpoint(eager=True)
            if range_column is None:
                staged = Staged(checkpointed, checkpointed.count())
            else:
                column = F.col(quote_spark(range_column))
                rows, low, high, non_null = checkpointed.agg(
                    F.count(F.lit(1)), F.min(column), F.max(column), F.count(column)).collect()[0]
                staged = Staged(checkpointed, rows, low, high, non_null < rows)
        except Exception as exc:
            raise self._fail("reading from PostgreSQL failed", exc) from None
        yield staged

    def _with_commit(self, metadata: dict, txn: tuple[str, int] | None, action, conf: dict[str, str] | None = None):
        settings = {COMMIT_METADATA: json.dumps({"mvlog": metadata}, default=str, sort_keys=True), **(conf or {})}
        if txn:
            settings.update({TXN_APP_ID: txn[0], TXN_VERSION: str(txn[1])})
        for key, value in settings.items():
            self.spark.conf.set(key, value)
        try:
            return action()
        finally:
            for key in settings:
                self.spark.conf.unset(key)

    def replace(self, location: str, df: Any, metadata: dict, txn: tuple[str, int] | None = None,
                key_columns: tuple[str, ...] = ()) -> WriteCounts:
        """Atomically replace the table's contents (and schema) with ``df``: one Delta commit.

        Delta keeps min/max statistics (which MERGE uses to skip files) for the first 32
        columns only; when a key column comes later (a wide view, or hidden key columns after
        many visible ones), the table is told to index that many columns."""
        from delta.tables import DeltaTable

        existed = self.exists(location)
        before = self.row_count(location) if existed else 0
        indexed = max((df.columns.index(k) + 1 for k in key_columns if k in df.columns), default=0)
        indexed = indexed if indexed > DEFAULT_INDEXED_COLUMNS else None

        def write() -> None:
            writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
            if txn:
                writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
            if indexed and not existed:  # a new table takes its properties from the writer
                writer = writer.option(INDEXED_COLUMNS, str(indexed))
            writer.save(location)

        try:
            if indexed and existed:
                self._index_columns(location, indexed)
            self.spark.conf.set(COMMIT_METADATA, json.dumps({"mvlog": metadata}, default=str, sort_keys=True))
            try:
                write()
            finally:
                self.spark.conf.unset(COMMIT_METADATA)
            history = DeltaTable.forPath(self.spark, location).history(1).collect()[0]
        except (SourceError, WarehouseError):
            raise
        except Exception as exc:
            raise self._fail(f"writing {location} failed", exc) from None
        written = int((history["operationMetrics"] or {}).get("numOutputRows", 0))
        return WriteCounts(keys_read=written, rows_inserted=written, rows_deleted=before)

    def _index_columns(self, location: str, count: int) -> None:
        """Make an existing table collect statistics on at least its first ``count`` columns (a
        metadata-only commit before the rewrite; an index count, unlike a list of column
        names, stays valid whatever the next schema is)."""
        from delta.tables import DeltaTable

        properties = DeltaTable.forPath(self.spark, location).detail().collect()[0]["properties"] or {}
        current = int(properties.get(INDEXED_COLUMNS, DEFAULT_INDEXED_COLUMNS))
        if 0 <= current < count:  # -1: every column is indexed already
            self.spark.sql(f"ALTER TABLE delta.{quote_spark(location)} "
                           f"SET TBLPROPERTIES ('{INDEXED_COLUMNS}' = '{int(count)}')")

    def merge(self, location: str, staged: "Staged", key_columns: tuple[str, ...], metadata: dict,
              txn: tuple[str, int] | None = None) -> WriteCounts:
        """One MERGE on the view key: the staged rows hold affected keys (``_mvlog_key_<i>``) and
        their current view rows; ``_mvlog_present`` is NULL where the key has no row any more."""
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        if staged.rows == 0:
            return WriteCounts()
        df = staged.df
        # Few affected keys: broadcast them, so the MERGE's join does not shuffle the whole
        # target table (measured: about a third of a small MERGE's time).
        source = F.broadcast(df) if staged.rows <= BROADCAST_ROWS else df
        try:
            target = DeltaTable.forPath(self.spark, location)
            schema = target.toDF().schema
            value_columns = [c for c in df.columns if not c.startswith(CHANGED_KEY_PREFIX) and c != PRESENT]
            s = lambda c: f"s.{quote_spark(c)}"  # noqa: E731
            t = lambda c: f"t.{quote_spark(c)}"  # noqa: E731
            # Null-safe: an aggregate's group key may hold NULLs.
            on = F.expr(" AND ".join(f"{t(k)} <=> {s(CHANGED_KEY_PREFIX + str(i))}" for i, k in enumerate(key_columns)))
            key_range = _key_range(schema[key_columns[0]], staged)
            if key_range is not None:  # a target-only predicate: Delta skips files outside the range
                on = on & key_range
            present = f"{s(PRESENT)} IS NOT NULL"
            unchanged = " AND ".join(f"{t(c)} <=> {s(c)}" for c in value_columns)
            values = {quote_spark(c): s(c) for c in value_columns}
            builder = (
                target.alias("t")
                .merge(source.alias("s"), on)
                .whenMatchedDelete(condition=f"NOT ({present})")
                .whenMatchedUpdate(condition=f"{present} AND NOT ({unchanged})", set=values)
                .whenNotMatchedInsert(condition=present, values=values)
            )
            # The source is staged already: Delta need not materialize it again.
            rows = self._with_commit(metadata, txn, lambda: builder.execute().collect(),
                                     {MATERIALIZE_SOURCE: "none"})
            if not rows:  # Delta skipped the commit: this (txnAppId, txnVersion) was applied already
                return WriteCounts()
        except (SourceError, WarehouseError):
            raise
        except Exception as exc:
            raise self._fail(f"merging into {location} failed", exc) from None
        row = rows[0]
        return WriteCounts(
            keys_read=staged.rows,
            rows_inserted=int(row["num_inserted_rows"]),
            rows_updated=int(row["num_updated_rows"]),
            rows_deleted=int(row["num_deleted_rows"]),
        )

    def optimize(self, location: str, cluster_column: str | None, rows_per_file: int,
                 vacuum: bool = False) -> tuple[int, int]:
        """Delta's OPTIMIZE: rewrite the table into files of about ``rows_per_file`` rows (by the
        table's bytes per row; 1 MB to 1 GB), ordered by ``cluster_column`` (ZORDER BY on one
        column is a sort) so that each file again holds one key range, as after a complete
        refresh — the small files and deletion vectors fast refreshes leave are folded in.
        Without a column, plain compaction. ``vacuum``: then delete files no version inside the
        table's retention period (Delta's default: 7 days) still needs.
        Returns (files removed, files added)."""
        from delta.tables import DeltaTable

        def run() -> Any:
            optimizer = table.optimize()
            result = optimizer.executeZOrderBy(cluster_column) if cluster_column else optimizer.executeCompaction()
            metrics = result.collect()[0]["metrics"]
            if vacuum:
                table.vacuum()
            return metrics

        try:
            table = DeltaTable.forPath(self.spark, location)
            size = int(table.detail().collect()[0]["sizeInBytes"] or 0)
            rows = self.row_count(location)
            file_bytes = min(max(size * rows_per_file // max(rows, 1), OPTIMIZE_MIN_FILE_BYTES), OPTIMIZE_MAX_FILE_BYTES)
            metrics = self._with_commit({"operation": "optimize"}, None, run, {OPTIMIZE_MAX_FILE_SIZE: str(file_bytes)})
        except WarehouseError:
            raise
        except Exception as exc:
            raise self._fail(f"optimizing {location} failed", exc) from None
        return int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])

    def row_count(self, location: str) -> int:
        try:
            return int(self.spark.read.format("delta").load(location).count())
        except Exception as exc:
            raise self._fail(f"reading {location} failed", exc) from None

    def last_commit_metadata(self, location: str) -> dict | None:
        """The mvlog metadata of the newest commit, if it was written by mvlog."""
        from delta.tables import DeltaTable

        row = DeltaTable.forPath(self.spark, location).history(1).collect()[0]
        try:
            return json.loads(row["userMetadata"])["mvlog"] if row["userMetadata"] else None
        except (ValueError, KeyError, TypeError):
            return None


RANGE_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType", "DecimalType", "StringType", "DateType")


def _key_range(field: Any, staged: Staged) -> Any:
    """``t.<first key> BETWEEN low AND high`` (OR IS NULL) over the staged keys, as a Column; None
    for key types whose literals do not round-trip exactly (floats, timestamps)."""
    from pyspark.sql import functions as F

    if type(field.dataType).__name__ not in RANGE_TYPES or (staged.low is None and not staged.has_nulls):
        return None
    column = F.col(f"t.{quote_spark(field.name)}")
    condition = column.between(F.lit(staged.low), F.lit(staged.high)) if staged.low is not None else F.lit(False)
    return condition | column.isNull() if staged.has_nulls else condition


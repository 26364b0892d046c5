"""The MERGE of a fast refresh: staged rows, the unchanged-row test, retries after a lost commit
race (a part of :class:`mvlog.spark.warehouse.Warehouse`, on its :class:`DeltaSession` and
:class:`DeltaHistory`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mvlog.model import CHANGED_KEY_PREFIX, PRESENT, ROW_HASH_COLUMN
from mvlog.spark.commits import DeltaSession, until_committed
from mvlog.spark.sparksql import delta_table, quote_spark, row_hash_sql, spark_literal, types_of
from mvlog.spark.versions import DeltaHistory

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
# Adaptive execution runs each of a MERGE's stages as a job of its own: off for the MERGE, it ran
# 16 jobs instead of 22 and a 1,000-key refresh of a 1M-row view took 0.1-0.6 s less
# (docs/benchmarks-history.md session 14); the staged source is small, so there is nothing to adapt to.
MERGE_CONF = {MATERIALIZE_SOURCE: "none", "spark.sql.adaptive.enabled": "false"}
BROADCAST_ROWS = 1_000_000  # staged rows up to which the MERGE broadcasts its source


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

    df: DataFrame
    rows: int
    low: Any = None
    high: Any = None
    has_nulls: bool = False
    null_key_deletes: int = 0  # rows that delete the view row whose key columns are all NULL
    carried: dict[int, list[str]] | None = None  # rows a carrying read returned for the record (Merger.stage)


class Merger:
    """Staging a fast read and merging it into the view's Delta table (a part of
    :class:`mvlog.spark.warehouse.Warehouse`)."""

    def __init__(self, delta: DeltaSession, history: DeltaHistory):
        self.delta = delta
        self.history = history
        self.spark = delta.spark

    def stage(self, df: DataFrame, carried: tuple[str, str] | None = None, carried_max: int = 0) -> Staged:
        """Read ``df`` from PostgreSQL exactly once, into executor memory (spilling to disk).

        The MERGE then reads the staged rows twice (to find the touched files, then to write)
        without asking PostgreSQL again; the row count tells how to join them, the range of the
        first key column which target files can hold their keys. A local checkpoint, as
        Delta's own source materialization does (Delta refuses a cached source); Spark's
        context cleaner frees its blocks once the DataFrame is gone.

        ``carried``: the columns (number, text) of rows a carrying read returned for the record
        (:meth:`~mvlog.sql.strategies.strategy.Strategy.carrying_read_sql`), NULL in the view's
        rows: those rows are taken out of the staged ones and, up to ``carried_max`` of them, kept
        as ``Staged.carried`` (their texts per number).
        """
        first = quote_spark(CHANGED_KEY_PREFIX + "0")
        own = f"{quote_spark(carried[0])} IS NULL" if carried else "true"
        try:
            stats = {"rows": f"count_if({own})", "low": f"min({first})", "high": f"max({first})",
                     "non_null": f"count({first})",
                     "null_key_deletes": f"count_if({own} AND {_null_key_delete(df.columns)})"}
            if carried:
                stats["carried"] = f"count_if(NOT ({own}))"
            checkpointed, found = _checkpointed_observing(df, stats)
            if found is None:  # a second job over the staged rows
                found = checkpointed.selectExpr(*(f"{sql} AS {key}" for key, sql in stats.items())) \
                    .collect()[0].asDict()
            kept: dict[int, list[str]] | None = None
            if carried:
                if found["carried"] <= carried_max:
                    kept = {}
                    for number, text in checkpointed.where(f"NOT ({own})").select(*map(quote_spark, carried)).collect():
                        kept.setdefault(number, []).append(text)
                checkpointed = checkpointed.where(own).drop(*carried)
        except Exception as exc:
            raise self.delta.fail("reading from PostgreSQL failed", exc) from None
        return Staged(checkpointed, found["rows"], found["low"], found["high"], found["non_null"] < found["rows"],
                      found["null_key_deletes"], kept)

    def present_values(self, staged: Staged, columns: Sequence[str]) -> list[list[Any]]:
        """Per column of ``columns``, its values in the staged rows that have a row now (those
        whose ``_mvlog_present`` is set), the rows in one order for all the columns."""
        try:
            rows = staged.df.where(f"{quote_spark(PRESENT)} IS NOT NULL").select(*map(quote_spark, columns)).collect()
        except Exception as exc:
            raise self.delta.fail("reading the staged rows failed", exc) from None
        return [[row[i] for row in rows] for i in range(len(columns))]

    def merge(self, location: str, staged: Staged, key_columns: tuple[str, ...], metadata: dict,
              txn: tuple[str, int] | None = None, row_hash: bool = True, trust_row_hash: bool = True,
              whole: bool = False) -> WriteCounts:
        """One MERGE on the view key: the staged rows hold affected keys (``_mvlog_key_<i>``) and
        their current view rows; ``_mvlog_present`` is NULL where the key has no row any more.

        A row that did not change is left alone (no deletion vector, no rewrite, no change-feed
        row). With ``row_hash`` (the table has ``_mvlog_row_hash``) that test compares the
        stored hash with the new row's, so the MERGE's scans of the table read its key columns
        and the hash only; a table written before the hash existed compares every column until
        its next complete refresh. ``trust_row_hash`` False (verify --repair, whose rows differ
        from what the table holds) compares every column and rewrites the hash. ``whole``: the
        staged rows are every row of the view (:mod:`mvlog.pipeline.readscope`), and the table's
        rows they do not hold are deleted (``WHEN NOT MATCHED BY SOURCE``)."""
        if staged.rows == 0 and not whole:
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
        try:
            df = in_table_types(df, self.spark.read.format("delta").load(location).schema, value_columns)
        except Exception as exc:
            raise self.delta.fail(f"reading {location} failed", exc) from None
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
        with self.delta.failing(f"merging into {location} failed"):
            bounds = None if whole else key_range(key_columns[0], df.schema[CHANGED_KEY_PREFIX + "0"].dataType, staged)
            if bounds is not None:  # a target-only predicate: Delta skips files outside the range
                on.append(bounds)
            present = f"{s(PRESENT)} IS NOT NULL"
            unchanged = " AND ".join(f"{t(c)} <=> {s(c)}" for c in compared)
            assignments = ", ".join(f"{quote_spark(c)} = {s(c)}" for c in value_columns)
            statement = (
                f"MERGE INTO {delta_table(location)} t USING {quote_spark(view)} s ON {' AND '.join(on)}\n"
                f"WHEN MATCHED AND NOT ({present}) THEN DELETE\n"
                f"WHEN MATCHED AND {present} AND NOT ({unchanged}) THEN UPDATE SET {assignments}\n"
                f"WHEN NOT MATCHED AND {present} THEN INSERT ({', '.join(map(quote_spark, value_columns))}) "
                f"VALUES ({', '.join(map(s, value_columns))})"
                + ("\nWHEN NOT MATCHED BY SOURCE THEN DELETE" if whole else "")
            )
            source.createOrReplaceTempView(view)
            def attempt() -> tuple[list, int | None]:
                # The source is staged already: Delta need not materialize it again.
                with self.delta.commit_settings(metadata, txn, MERGE_CONF):
                    return self.spark.sql(statement).collect(), self.delta.session_commit_version()

            try:
                rows, version = until_committed(attempt)
            finally:
                self.spark.catalog.dropTempView(view)
        # Delta skipped the commit (this transaction was applied already), or committed without
        # telling this session: the commit is looked up in the history.
        if not rows or (version is None and int(rows[0]["num_affected_rows"])):
            try:
                version = self.history.own_version(location, metadata)
            except Exception as exc:
                raise self.delta.fail(f"reading the history of {location} failed", exc) from None
        if not rows:
            return WriteCounts(version=version)
        row = rows[0]
        return WriteCounts(
            keys_read=staged.rows,
            rows_inserted=int(row["num_inserted_rows"]),
            rows_updated=int(row["num_updated_rows"]),
            rows_deleted=int(row["num_deleted_rows"]),
            version=version,
        )

    def rewrite(self, location: str, staged: Staged, key_columns: tuple[str, ...], metadata: dict,
                txn: tuple[str, int] | None = None) -> WriteCounts:
        """The same change as :meth:`merge`, written by rewriting the table whole: for a small view,
        one overwrite costs less than a MERGE's two scans and its commit (docs/benchmarks-history.md). The
        counts are the MERGE's own: rows inserted, updated (the row hash differs) and deleted,
        from one join of the staged keys with the table. Nothing changed: nothing is committed.
        Never for a view with a change feed, whose readers must see only the changed rows."""
        if staged.rows == 0:
            return WriteCounts()
        value_columns = [c for c in staged.df.columns if not c.startswith(CHANGED_KEY_PREFIX) and c != PRESENT]
        source = staged.df.selectExpr("*", f"{row_hash_sql(value_columns)} AS {quote_spark(ROW_HASH_COLUMN)}")
        names = [f"mvlog_{role}_{uuid.uuid4().hex}" for role in ("staged", "target")]
        s = lambda c: f"s.{quote_spark(c)}"  # noqa: E731
        t = lambda c: f"t.{quote_spark(c)}"  # noqa: E731
        on = " AND ".join(f"{t(k)} <=> {s(CHANGED_KEY_PREFIX + str(i))}" for i, k in enumerate(key_columns))
        present, hashes = f"{s(PRESENT)} IS NOT NULL", f"{t(ROW_HASH_COLUMN)} <=> {s(ROW_HASH_COLUMN)}"
        found = f"{t(ROW_HASH_COLUMN)} IS NOT NULL"  # every stored row has a hash
        staged_view, target_view = map(quote_spark, names)
        counts = (f"SELECT count_if({found} AND NOT {present}), count_if({found} AND {present} AND NOT ({hashes})), "
                  f"count_if(NOT {found} AND {present}) FROM {staged_view} s LEFT JOIN {target_view} t ON {on}")
        with self.delta.failing(f"rewriting {location} failed"):
            target = self.spark.read.format("delta").load(location)
            columns = ", ".join(map(quote_spark, target.columns))
            kept = f"SELECT t.* FROM {target_view} t LEFT ANTI JOIN {staged_view} s ON {on}"
            new = f"SELECT {', '.join(map(s, target.columns))} FROM {staged_view} s WHERE {present}"
            source.hint("broadcast").createOrReplaceTempView(names[0])
            statement = f"INSERT OVERWRITE {delta_table(location)} ({columns}) {kept} UNION ALL {new}"
            def attempt() -> tuple[tuple[int, int, int], int | None]:
                self.spark.read.format("delta").load(location).createOrReplaceTempView(names[1])
                changed = tuple(self.spark.sql(counts).collect()[0])
                if not any(changed):
                    return (0, 0, 0), None
                with self.delta.commit_settings(metadata, txn):
                    self.spark.sql(statement).collect()
                    return changed, self.delta.session_commit_version()

            try:
                (deleted, updated, inserted), version = until_committed(attempt)
            finally:
                for name in names:
                    self.spark.catalog.dropTempView(name)
            if not (deleted or updated or inserted):
                return WriteCounts(keys_read=staged.rows)
            if version is None:  # its transaction was applied before, or the session was not told
                version = self.history.own_version(location, metadata)
        return WriteCounts(staged.rows, int(inserted), int(updated), int(deleted), version)

    def _has_null_key_row(self, location: str, key_columns: tuple[str, ...]) -> bool:
        condition = " AND ".join(f"{quote_spark(k)} IS NULL" for k in key_columns)
        try:
            return bool(self.spark.read.format("delta").load(location).where(condition).limit(1).count())
        except Exception as exc:
            raise self.delta.fail(f"reading {location} failed", exc) from None


def in_table_types(df: DataFrame, schema: StructType, value_columns: list[str]) -> DataFrame:
    """``df`` with its ``value_columns`` cast to the table's types (``schema``), as a MERGE's
    assignments would cast them: a count read by state may come as another integer type than
    the complete refresh wrote, and the row hash of equal values must be the stored one."""
    types = types_of(schema)
    keep = [quote_spark(c) for c in df.columns if c not in value_columns]
    typed = [f"CAST({quote_spark(c)} AS {types[c]}) AS {quote_spark(c)}" if c in types else quote_spark(c)
             for c in value_columns]
    return df.selectExpr(*keep, *typed)


def _checkpointed_observing(df: DataFrame, stats: dict[str, str]) -> tuple[DataFrame, dict[str, Any] | None]:
    """``df`` checkpointed (eager, local) and, under Spark Connect, the aggregates ``stats`` (name:
    Spark SQL) of its rows computed by the checkpoint's own job (``DataFrame.observe``: the server
    returns the observed values with the command's result, as ``executionInfo.flows``) — one Spark
    job fewer per fast refresh (~0.1 s on a running engine, BENCHMARKS.md session 52). None when
    they were not returned (a classic session, whose ``pyspark.sql.functions`` pick classic or
    Connect columns by process-wide state: the caller aggregates the staged rows instead)."""
    if not type(df).__module__.startswith("pyspark.sql.connect"):
        return df.localCheckpoint(eager=True), None
    from pyspark.sql.connect.functions import expr

    name = f"mvlog_staged_{uuid.uuid4().hex}"
    observed = df.observe(name, *(expr(sql).alias(key) for key, sql in stats.items()))
    checkpointed = observed.localCheckpoint(eager=True)
    info = observed.executionInfo
    found = dict(info.flows).get(name) if info is not None else None
    return checkpointed, found if found is not None and set(found) == set(stats) else None


def _null_key_delete(columns: list[str]) -> str:
    """Spark SQL: a staged row that deletes the view row whose key columns are all NULL."""
    keys = [c for c in columns if c.startswith(CHANGED_KEY_PREFIX)]
    return " AND ".join([*(f"{quote_spark(k)} IS NULL" for k in keys), f"{quote_spark(PRESENT)} IS NULL"])


RANGE_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType", "DecimalType", "StringType", "DateType")


def key_range(name: str, data_type: DataType, staged: Staged) -> str | None:
    """``t.<first key> BETWEEN low AND high`` (OR IS NULL) over the staged keys, as Spark SQL;
    None for key types whose literals do not round-trip exactly (floats, timestamps)."""
    if type(data_type).__name__ not in RANGE_TYPES or (staged.low is None and not staged.has_nulls):
        return None
    column = f"t.{quote_spark(name)}"
    condition = (f"{column} BETWEEN {spark_literal(staged.low)} AND {spark_literal(staged.high)}"
                 if staged.low is not None else "false")
    return f"({condition} OR {column} IS NULL)" if staged.has_nulls else condition

"""The key-only write of a fast refresh: the changed keys' rows replaced in one Delta commit
(a part of :class:`mvlog.spark.warehouse.Warehouse`, beside :class:`mvlog.spark.merge.Merger`).

A MERGE searches the table for its source's keys: it joins every row of every file its keys
touch, twice, payload columns included (BENCHMARKS.md, sessions 18 and 31). mvlog knows the
changed keys before it writes, so it can name them: Delta's ``replaceWhere`` with a predicate on
the key columns deletes the rows of those keys and adds their new rows in one commit. On a table
with deletion vectors the delete reads the key columns of the touched files and marks rows
deleted without rewriting the files (session 31: 1.51 s against 9.44 s for MERGE, 10M rows,
2,000 keys). The steps:

1. the staged keys are classified against the table (its key columns and row hash only): a key
   is inserted, updated (the hash differs), deleted, or left alone (unchanged, or absent both);
2. one ``replaceWhere`` on exactly the inserted, updated and deleted keys writes the new rows of
   the inserted and updated ones. Unchanged rows are not touched, and the counts are the MERGE's.

The predicate is built of literals (a ``replaceWhere`` takes no subquery), so the write is used
for key types whose literals round-trip exactly and up to :data:`REPLACE_MAX_KEYS` changed keys;
:func:`unreplaceable` says why not, and the caller merges instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mvlog.errors import SourceError, WarehouseError
from mvlog.model import CHANGED_KEY_PREFIX, PRESENT, ROW_HASH_COLUMN
from mvlog.spark.commits import DeltaSession, int_or_none
from mvlog.spark.history import DeltaHistory
from mvlog.spark.merge import Staged, WriteCounts, key_range, until_committed
from mvlog.spark.sparksql import quote_spark, row_hash_sql, spark_literal

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# Above this many staged keys the predicate's literals are a large plan; a MERGE's join scales.
REPLACE_MAX_KEYS = 100_000
# Types whose values come back to Python and go into Spark SQL as literals unchanged.
EXACT_KEY_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType", "DecimalType", "StringType", "DateType")
# Delta checks each written row against replaceWhere's predicate, an IN list it evaluates row by
# row (4 of 6 s at 20,000 keys, BENCHMARKS.md session 32); the rows are the predicate's by
# construction: their keys are the ones it names.
REPLACE_CONF = {"spark.databricks.delta.replaceWhere.constraintCheck.enabled": "false"}
CHANGE = "_mvlog_change"  # the classification of a staged key: 'i'nserted, 'u'pdated, 'd'eleted
INSERTED, UPDATED, DELETED = "i", "u", "d"


def unreplaceable(staged: Staged) -> str | None:
    """Why the staged rows cannot be written by :meth:`Replacer.replace`, or None."""
    if staged.rows > REPLACE_MAX_KEYS:
        return f"{staged.rows} changed keys (more than {REPLACE_MAX_KEYS})"
    return _inexact_key(staged.df.schema)


def _inexact_key(schema: StructType) -> str | None:
    for field in schema.fields:
        if field.name.startswith(CHANGED_KEY_PREFIX) and type(field.dataType).__name__ not in EXACT_KEY_TYPES:
            return f"a key column of type {field.dataType.simpleString()}"
    return None


def key_predicate(key_columns: Sequence[str], keys: Sequence[tuple]) -> str:
    """Spark SQL true for exactly the rows whose key columns equal one of ``keys`` (NULL equal to
    NULL, as the MERGE's ``<=>``), ANDed with the first column's range so that Delta skips the
    files outside it by their statistics."""
    columns = [quote_spark(c) for c in key_columns]
    whole = [k for k in keys if None not in k]
    parts = []
    if whole:
        if len(columns) == 1:
            parts.append(f"{columns[0]} IN ({', '.join(spark_literal(k[0]) for k in whole)})")
        else:
            tuples = ", ".join("(" + ", ".join(map(spark_literal, k)) + ")" for k in whole)
            parts.append(f"({', '.join(columns)}) IN ({tuples})")
    for key in (k for k in keys if None in k):
        parts.append("(" + " AND ".join(f"{c} IS NULL" if v is None else f"{c} = {spark_literal(v)}"
                                        for c, v in zip(columns, key, strict=True)) + ")")
    firsts = [k[0] for k in keys if k[0] is not None]
    bounds = [f"{columns[0]} BETWEEN {spark_literal(min(firsts))} AND {spark_literal(max(firsts))}"] if firsts else []
    if len(firsts) < len(keys):
        bounds.append(f"{columns[0]} IS NULL")
    return f"({' OR '.join(bounds)}) AND ({' OR '.join(parts)})"


class Replacer:
    """The key-only write (see the module docstring), on the warehouse's Delta session."""

    def __init__(self, delta: DeltaSession, history: DeltaHistory):
        self.delta = delta
        self.history = history
        self.spark = delta.spark

    def replace(self, location: str, staged: Staged, key_columns: tuple[str, ...], metadata: dict,
                txn: tuple[str, int] | None = None) -> WriteCounts:
        """The change of :meth:`mvlog.spark.merge.Merger.merge`, in one ``replaceWhere`` commit on
        the changed keys. The table must store row hashes; nothing changed: nothing is committed."""
        if staged.rows == 0:
            return WriteCounts()
        value_columns = [c for c in staged.df.columns if not c.startswith(CHANGED_KEY_PREFIX) and c != PRESENT]
        source = staged.df.selectExpr("*", f"{row_hash_sql(value_columns)} AS {quote_spark(ROW_HASH_COLUMN)}")
        names = [f"mvlog_{role}_{uuid.uuid4().hex}" for role in ("staged", "target")]
        staged_view, target_view = map(quote_spark, names)
        staged_keys = [CHANGED_KEY_PREFIX + str(i) for i in range(len(key_columns))]

        bounds = key_range(key_columns[0], source.schema[staged_keys[0]].dataType, staged)
        classify = _classify(key_columns, staged_view, target_view, bounds)

        def attempt() -> tuple[tuple[int, int, int], int | None]:
            target = self.spark.read.format("delta").load(location)
            target.createOrReplaceTempView(names[1])
            classified = self.spark.sql(classify).localCheckpoint(eager=True)
            changes = classified.where(f"{CHANGE} IS NOT NULL").select(CHANGE, *staged_keys).collect()
            kinds = [row[0] for row in changes]
            counts = (kinds.count(DELETED), kinds.count(UPDATED), kinds.count(INSERTED))
            if not changes:
                return (0, 0, 0), None
            predicate = key_predicate(key_columns, [tuple(row[1:]) for row in changes])
            written = classified.where(f"{CHANGE} IN ('{INSERTED}', '{UPDATED}')")
            rows = written.select(*map(quote_spark, target.columns))
            with self.delta.commit_settings(metadata, txn, REPLACE_CONF):
                rows.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(location)
                return counts, self.delta.session_commit_version()

        try:
            source.createOrReplaceTempView(names[0])
            try:
                (deleted, updated, inserted), version = until_committed(attempt)
            finally:
                for name in names:
                    self.spark.catalog.dropTempView(name)
            if not (deleted or updated or inserted):
                return WriteCounts(keys_read=staged.rows)
            if version is None:  # its transaction was applied before, or the session was not told
                version = int_or_none((self.history.own_commit(location, metadata) or {}).get("version"))
        except (SourceError, WarehouseError):
            raise
        except Exception as exc:
            raise self.delta.fail(f"replacing the changed keys in {location} failed", exc) from None
        return WriteCounts(staged.rows, inserted, updated, deleted, version)


def _classify(key_columns: Sequence[str], staged_view: str, target_view: str, bounds: str | None) -> str:
    """Spark SQL: every staged row with :data:`CHANGE`, what the write does to its key (NULL:
    nothing). The table's rows of the staged keys are found by a broadcast join that reads their
    key columns and row hash only (and skips the files outside the first key's range)."""
    s = lambda c: f"s.{quote_spark(c)}"  # noqa: E731
    t = lambda c: f"t.{quote_spark(c)}"  # noqa: E731
    m = lambda c: f"m.{quote_spark(c)}"  # noqa: E731
    on = lambda o: " AND ".join(f"{o(k)} <=> {s(CHANGED_KEY_PREFIX + str(i))}"  # noqa: E731
                                for i, k in enumerate(key_columns))
    stored, present = f"{m(ROW_HASH_COLUMN)} IS NOT NULL", f"{s(PRESENT)} IS NOT NULL"  # every stored row has a hash
    change = (f"CASE WHEN {stored} AND NOT {present} THEN '{DELETED}' "
              f"WHEN NOT {stored} AND {present} THEN '{INSERTED}' "
              f"WHEN {stored} AND NOT ({m(ROW_HASH_COLUMN)} <=> {s(ROW_HASH_COLUMN)}) THEN '{UPDATED}' END")
    matched = (f"SELECT /*+ BROADCAST(s) */ {', '.join(map(t, [*key_columns, ROW_HASH_COLUMN]))} "
               f"FROM {target_view} t JOIN {staged_view} s ON {on(t)}" + (f" WHERE {bounds}" if bounds else ""))
    return (f"SELECT /*+ BROADCAST(m) */ s.*, {change} AS {CHANGE} "
            f"FROM {staged_view} s LEFT JOIN ({matched}) m ON {on(m)}")

"""The key-only write of a fast refresh: the changed keys' rows replaced in one Delta commit
(a part of :class:`mvlog.spark.warehouse.Warehouse`, beside :class:`mvlog.spark.merge.Merger`).

A MERGE searches the table for its source's keys: it joins every row of every file its keys
touch, twice, payload columns included (docs/benchmarks-history.md, sessions 18 and 31). mvlog knows the
changed keys before it writes, so it can name them: Delta's ``replaceWhere`` with a predicate on
the key columns deletes the rows of those keys and adds their new rows in one commit. On a table
with deletion vectors the delete reads the key columns of the touched files and marks rows
deleted without rewriting the files; without them it rewrites the touched files, reading them
once (10M rows, 2,000 random keys, a new process on the engine: 4.0x / 2.6x faster than a
complete refresh with / without deletion vectors, against 2.2x / 1.7x by MERGE; docs/benchmarks-history.md
session 32). The steps:

1. the staged keys are classified against the table (its key columns and row hash only, joined
   with the staged keys broadcast): a key is inserted, updated (the hash differs), deleted, or
   left alone (unchanged, or absent both);
2. one ``replaceWhere`` on exactly the inserted, updated and deleted keys writes the new rows of
   the inserted and updated ones. Unchanged rows are not touched, and the counts are the MERGE's.

The predicate is built of literals (a ``replaceWhere`` takes no subquery), so the write is used
for key types whose literals round-trip exactly and up to :data:`REPLACE_MAX_KEYS` changed keys;
:func:`unreplaceable` says why not, and the caller merges instead.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mvlog.model import CHANGED_KEY_PREFIX, PRESENT, ROW_HASH_COLUMN
from mvlog.spark.commits import DeltaSession, until_committed
from mvlog.spark.merge import Staged, WriteCounts, in_table_types
from mvlog.spark.sparksql import quote_spark, row_hash_sql, spark_literal, types_of
from mvlog.spark.versions import DeltaHistory

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

# Above this many staged keys the predicate's literals are a large plan; a MERGE's join scales.
REPLACE_MAX_KEYS = 100_000
# Types whose values come back to Python and go into Spark SQL as literals unchanged.
EXACT_KEY_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType", "DecimalType", "StringType", "DateType")
# The staged keys' tuple hash, and the table rows', joined in the lookup.
STAGED_HASH, TABLE_HASH = "_mvlog_staged_hash", "_mvlog_table_hash"
# Delta checks each written row against replaceWhere's predicate, an IN list it evaluates row by
# row (4 of 6 s at 20,000 keys, docs/benchmarks-history.md session 32); the rows are the predicate's by
# construction: their keys are the ones it names.
REPLACE_CONF = {"spark.databricks.delta.replaceWhere.constraintCheck.enabled": "false"}


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


def key_predicate(key_columns: Sequence[str], keys: Sequence[tuple], types: Sequence[str] = (),
                  hashes: Mapping[tuple, int] | None = None, hash_of: str | None = None) -> str:
    """Spark SQL true for exactly the rows whose key columns equal one of ``keys`` (NULL equal to
    NULL, as the MERGE's ``<=>``), ANDed with the first column's range so that Delta skips the
    files outside it by their statistics.

    A key of several columns is named by its tuple hash (``hashes``: key -> :func:`tuple_hash_sql`
    of it; ``hash_of``: that expression over the compared columns, by default over the key
    columns): Spark tests one long against a hash set, where it compares a tuple with a list of
    tuples one by one (TPC-H's lineitem view, 38,624 keys: 25 s, docs/benchmarks-history.md session 32). A hash
    names more rows than its key only if another key has the same hash: :meth:`Replacer.replace`
    checks that no row it finds has one. Without ``hashes`` the tuples are listed, as literals of
    the columns' ``types`` exactly (Spark does not widen the fields of a tuple: ``1`` is no
    ``bigint``). Keys with a NULL are named column by column."""
    columns = [quote_spark(c) for c in key_columns]
    whole = [k for k in keys if None not in k]
    parts = []
    if whole:
        if len(columns) == 1:
            parts.append(f"{columns[0]} IN ({', '.join(spark_literal(k[0]) for k in whole)})")
        else:
            # The first column's hash set first: the rest is evaluated for its matches only.
            heads = ", ".join(spark_literal(v) for v in dict.fromkeys(k[0] for k in whole))
            if hashes is not None:
                listed = ", ".join(str(hashes[k]) + "L" for k in whole)
                named = f"{hash_of or tuple_hash_sql(key_columns)} IN ({listed})"
            else:
                typed = list(types) or [""] * len(columns)
                named = (f"({', '.join(columns)}) IN ("
                         + ", ".join("(" + ", ".join(map(typed_literal, k, typed)) + ")" for k in whole) + ")")
            parts.append(f"({columns[0]} IN ({heads}) AND {named})")
    for key in (k for k in keys if None in k):
        parts.append("(" + " AND ".join(f"{c} IS NULL" if v is None else f"{c} = {spark_literal(v)}"
                                        for c, v in zip(columns, key, strict=True)) + ")")
    return f"{key_bounds(key_columns, keys)} AND ({' OR '.join(parts)})"


def key_bounds(key_columns: Sequence[str], keys: Sequence[tuple]) -> str:
    """Spark SQL true for the rows whose first key column lies in the range of ``keys``' (or is
    NULL, if a key's is): what lets Delta skip files by their statistics."""
    first = quote_spark(key_columns[0])
    firsts = [k[0] for k in keys if k[0] is not None]
    bounds = [f"{first} BETWEEN {spark_literal(min(firsts))} AND {spark_literal(max(firsts))}"] if firsts else []
    if len(firsts) < len(keys):
        bounds.append(f"{first} IS NULL")
    return f"({' OR '.join(bounds)})"


def tuple_hash_sql(columns: Sequence[str], types: Sequence[str] = ()) -> str:
    """Spark SQL of the 64-bit hash of a key tuple: ``xxhash64`` of the columns, each cast to its
    Spark type where ``types`` gives one (a value's hash depends on its type: the staged keys are
    hashed as the table's key columns are)."""
    typed = list(types) or [""] * len(columns)
    return "xxhash64(" + ", ".join(f"CAST({quote_spark(c)} AS {t})" if t else quote_spark(c)
                                   for c, t in zip(columns, typed, strict=True)) + ")"


INTEGER_SUFFIXES = {"bigint": "L", "smallint": "S", "tinyint": "Y"}


def typed_literal(value: object, type_name: str) -> str:
    """``value`` as a Spark SQL literal of the type ``type_name`` (a Spark simple string; empty:
    the literal's own type)."""
    literal = spark_literal(value)
    if type_name in INTEGER_SUFFIXES:
        return literal + INTEGER_SUFFIXES[type_name]
    if type_name.startswith("decimal"):
        return f"CAST({literal} AS {type_name})"
    return literal


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
        staged_keys = [CHANGED_KEY_PREFIX + str(i) for i in range(len(key_columns))]
        with self.delta.failing(f"replacing the changed keys in {location} failed"):
            # The new rows in the table's types, as a MERGE's assignments cast them (a count read by
            # state may come as another integer type than the complete refresh wrote): the row hash
            # is then the one the table stores for the same values, and Delta need not merge types.
            schema = self.spark.read.format("delta").load(location).schema
            source = in_table_types(staged.df, schema, value_columns) \
                .selectExpr("*", f"{row_hash_sql(value_columns)} AS {quote_spark(ROW_HASH_COLUMN)}")
            table_types = types_of(schema)
            key_types = [table_types[k] for k in key_columns]
            staged_hash = tuple_hash_sql(staged_keys, key_types)  # a staged key's hash as its table row's
            # key -> the new row's hash (None: the key has no row now), key -> its tuple hash
            new, hashes = {}, {}
            for *key, present, row_hash, key_hash in source.selectExpr(
                    *map(quote_spark, [*staged_keys, PRESENT, ROW_HASH_COLUMN]), staged_hash).collect():
                new[tuple(key)] = row_hash if present is not None else None
                hashes[tuple(key)] = key_hash
            named = naming(hashes) if len(key_columns) > 1 else None

            keys = source.selectExpr(*map(quote_spark, staged_keys), f"{staged_hash} AS {quote_spark(STAGED_HASH)}")

            def attempt() -> tuple[Changes, int | None]:
                target = self.spark.read.format("delta").load(location)
                stored = {tuple(r[:-1]): r[-1] for r in self._stored(target, keys, key_columns, key_types, list(new),
                                                                     named is not None).collect()}
                exact = naming(named, stored) if named is not None else None
                changes = classify(new, stored)
                if not changes.keys:
                    return changes, None
                rows = source.where(f"{quote_spark(PRESENT)} IS NOT NULL")
                if changes.unchanged:
                    unchanged = key_predicate(staged_keys, changes.unchanged, key_types, named, staged_hash)
                    rows = rows.where(f"NOT coalesce({unchanged}, false)")
                predicate = key_predicate(key_columns, changes.keys, key_types, exact)
                with self.delta.commit_settings(metadata, txn, REPLACE_CONF):
                    rows.select(*map(quote_spark, target.columns)).write.format("delta").mode("overwrite") \
                        .option("replaceWhere", predicate).save(location)
                    return changes, self.delta.session_commit_version()

            changes, version = until_committed(attempt)
            if not changes.keys:
                return WriteCounts(keys_read=staged.rows)
            if version is None:  # its transaction was applied before, or the session was not told
                version = self.history.own_version(location, metadata)
        return WriteCounts(staged.rows, changes.inserted, changes.updated, changes.deleted, version)

    def _stored(self, target: DataFrame, keys: DataFrame, key_columns: Sequence[str], key_types: Sequence[str],
                listed: Sequence[tuple], hashed: bool) -> DataFrame:
        """The key columns and row hash of the table's rows that the write's predicate
        (:func:`key_predicate`) would name, or more: one scan, files outside the first key column's
        range skipped by their statistics, the rows joined with the staged keys (``keys``) broadcast.
        A join, not the predicate: Spark parses, analyses and optimizes an IN list of 38,000 literals
        for about a second, each time it meets one (docs/benchmarks-history.md, session 45). Named by
        their tuple hashes (``hashed``), the keys are joined by hash, so that a row sharing a staged
        key's hash is found (:func:`naming`); else column by column, NULL equal to NULL."""
        # DataFrame methods only: pyspark.sql.functions picks classic or Connect columns by how the
        # process started, not by the DataFrame's session (a classic column on the engine's failed).
        stored = [*map(quote_spark, key_columns), quote_spark(ROW_HASH_COLUMN)]
        scanned = target.where(key_bounds(key_columns, listed))
        if hashed:
            scanned = scanned.selectExpr(*stored, f"{tuple_hash_sql(key_columns, key_types)} AS {TABLE_HASH}")
            on = scanned[TABLE_HASH] == keys[STAGED_HASH]
        else:
            on = functools.reduce(lambda a, b: a & b, [
                scanned[quote_spark(c)].eqNullSafe(keys[quote_spark(CHANGED_KEY_PREFIX + str(i))])
                for i, c in enumerate(key_columns)])
        return scanned.join(keys.hint("broadcast"), on, "left_semi").select(*stored)


def naming(hashes: Mapping[tuple, int], found: Collection[tuple] = ()) -> Mapping[tuple, int] | None:
    """The staged keys' tuple hashes if they name those keys exactly, else None (the tuples are
    listed instead): no two staged keys share a hash, and every row that a predicate of these
    hashes found in the table (``found``: their keys) has a staged key — a row whose key shares
    a staged key's hash would be replaced with it."""
    if len(set(hashes.values())) < len(hashes) or any(key not in hashes for key in found):
        return None
    return hashes


@dataclass(frozen=True)
class Changes:
    """What the write does, key by key: the keys it replaces (``keys``: inserted, updated, deleted)
    and the keys whose new row equals the stored one (``unchanged``: not written)."""

    keys: list[tuple]
    unchanged: list[tuple]
    inserted: int
    updated: int
    deleted: int


def classify(new: dict[tuple, int | None], stored: dict[tuple, int]) -> Changes:
    """The staged keys (``new``: key -> the new row's hash, None if the key has no row now)
    against the table's (``stored``: key -> row hash), as a MERGE on the key would apply them."""
    keys, unchanged = [], []
    inserted = updated = deleted = 0
    for key, hash_ in new.items():
        old = stored.get(key)
        if key not in stored:
            if hash_ is None:
                continue  # no row before or after
            inserted += 1
        elif hash_ is None:
            deleted += 1
        elif old == hash_:
            unchanged.append(key)
            continue
        else:
            updated += 1
        keys.append(key)
    return Changes(keys, unchanged, inserted, updated, deleted)

"""``mvlog verify``: compare a view's Delta table with its query in PostgreSQL, without moving its rows.

Both sides are read at matching points: PostgreSQL at one exported snapshot, Delta at its
newest version, whose last mvlog commit must not be newer than the stamp the catalog records
for the view in that snapshot (else a refresh is between its Delta commit and its record, and
verify looks again). Changes logged after that stamp are not mismatches: the view keys they
affect (found as a fast refresh finds them) are *pending* and left out on both sides.

Every row is reduced to a fingerprint (:mod:`mvlog.ops.fingerprint`). ``--full`` compares count and
fingerprint sums per bucket of view keys (256 numbers a side), then the fingerprints of the
mismatching buckets' rows; a sample compares the fingerprints of every row in random buckets
holding about N rows. Either way PostgreSQL computes the query once; only fingerprints travel.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from mvlog.config import ViewConfig
from mvlog.errors import MvlogError, UsageError, WarehouseError
from mvlog.model import CHANGED_KEY_PREFIX, PRESENT, ROW_HASH_COLUMN, RefreshMethod
from mvlog.ops import fingerprint
from mvlog.ops.fingerprint import KEY_HASH, ROW_HASH, Column
from mvlog.pipeline.parts import ProjectParts, ProjectWorker
from mvlog.pipeline.plan import plan_refresh
from mvlog.postgres.jdbc import JdbcSource
from mvlog.postgres.source import Cursor
from mvlog.postgres.windows import StampedSnapshot
from mvlog.spark.sparksql import quote_spark
from mvlog.spark.warehouse import WriteCounts
from mvlog.sql.pieces.shape import ViewShape
from mvlog.sql.strategies.registry import strategy_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SHOWN = 20  # mismatched keys described per view
ATTEMPTS = 5  # times verify looks again while a refresh is between its Delta commit and its record


@dataclass
class Mismatch:
    """One view key (a keyless view: one row) whose rows differ: each side's columns as canonical text."""

    key: dict[str, str | None]
    delta: dict[str, str | None] | None  # None: no such row in Delta
    source: dict[str, str | None] | None  # None: no such row in PostgreSQL

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "delta": self.delta, "postgres": self.source}


@dataclass
class VerifyResult:
    view: str
    mode: str  # "full" or "sample"
    status: str = "ok"  # ok, mismatch, repaired, pending, failed
    rows_compared: int = 0
    pending_keys: int = 0
    mismatched: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    delta_version: int | None = None
    snaptime: datetime | None = None
    repaired: int = 0
    reason: str | None = None  # why the view was not compared (pending), or the error
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "view": self.view, "mode": self.mode, "status": self.status, "rows_compared": self.rows_compared,
            "pending_keys": self.pending_keys, "mismatched": self.mismatched,
            "mismatches": [m.to_json() for m in self.mismatches], "delta_version": self.delta_version,
            "snaptime": self.snaptime.isoformat() if self.snaptime else None, "repaired": self.repaired,
            "reason": self.reason, "seconds": round(self.seconds, 3),
        }


class Verifier(ProjectWorker):
    """Verifies views of one project (see the module docstring)."""

    def __init__(self, parts: ProjectParts, jdbc: JdbcSource, progress: Callable[[str], None]):
        super().__init__(parts)
        self.jdbc = jdbc
        self.progress = progress

    def verify(self, view: ViewConfig, sample: int | None, repair: bool = False) -> VerifyResult:
        """Compare one view (``sample``: about that many rows; None: all of them); with ``repair``,
        re-merge the mismatched keys from PostgreSQL (holding the view's refresh lock throughout,
        so no refresh lands between the comparison and the repair)."""
        started = time.monotonic()
        result = VerifyResult(view.name, "sample" if sample else "full")
        try:
            if repair:
                with self.catalog.lock_views([view.name]):
                    self._verify(view, sample, result, repair)
            else:
                self._verify(view, sample, result, repair)
        except MvlogError as exc:
            result.status, result.reason = "failed", str(exc)
        result.seconds = time.monotonic() - started
        return result

    def _verify(self, view: ViewConfig, sample: int | None, result: VerifyResult, repair: bool) -> None:
        shape = self.compiler.check(view).shape
        location = self.config.view_location(view.name)
        self.progress(f"{view.name}: verifying")
        for _ in range(ATTEMPTS):
            with self.source.exported_snapshot() as (snapshot, cur):
                stamp, needs_complete = self.catalog.recorded_stamp(cur, view.name) or (None, None)
                if stamp is None:
                    raise UsageError(f"view {view.name} has not been refreshed yet; run 'mvlog refresh' first")
                version, written = self.warehouse.mvlog_version(location)
                if written is not None and written > stamp:
                    time.sleep(1)  # a refresh committed to Delta and has not recorded it yet
                    continue
                result.delta_version, result.snaptime = version, stamp
                # The snapshot read as a refresh reads its own: windows after the view's stamp.
                at = StampedSnapshot(stamp, snapshot, cur.connection, self.source,
                                     self.logs.unseen(cur, shape.logs))
                self._compare(view, shape, location, at, cur, needs_complete, sample, result, repair)
                return
        raise WarehouseError(f"the Delta table of view {view.name} holds a refresh the catalog has not recorded "
                             f"(one is running, or died after its commit); run 'mvlog refresh' and verify again")

    def _compare(self, view: ViewConfig, shape: ViewShape, location: str, at: StampedSnapshot, cur: Cursor,
                 needs_complete: str | None, sample: int | None, result: VerifyResult, repair: bool) -> None:
        spark = self.warehouse.spark
        assert result.delta_version is not None  # the version _verify matched with the stamp
        delta = self.warehouse.read_version(location, result.delta_version)
        columns = [Column(name, dtype) for name, dtype in delta.dtypes if name != ROW_HASH_COLUMN]
        fingerprint.check_columns(columns)
        keyed = bool(shape.fast_possible and shape.key_columns)
        by_name = {c.name: c for c in columns}
        keys = [by_name[k] for k in shape.key_columns] if keyed else []

        whole = _pending_view(shape, at, needs_complete, keyed)
        if whole:
            result.status, result.reason = "pending", whole
            return
        pending = self._pending_keys(shape, location, at, keys) if keyed else []
        result.pending_keys = len(pending)

        pg_hashed = fingerprint.pg_hashes(shape.select_sql, columns, keys)
        spark_hashed = delta.selectExpr(*fingerprint.spark_hashes(columns, keys))
        if pending:
            pending_df = spark.createDataFrame([(h,) for h in pending], f"{KEY_HASH} string")
            spark_hashed = spark_hashed.join(pending_df, KEY_HASH, "left_anti")
        pg_kept = exp.select(exp.Star()).from_(fingerprint.subquery(pg_hashed, "h"))
        if pending:
            pg_kept = pg_kept.where(exp.not_(_is_one_of(exp.column(KEY_HASH, "h", quoted=True), pending)))

        if sample:
            total = spark_hashed.count()
            wanted = max(1, math.ceil(256 * sample / max(total, 1)))
            buckets = sorted(random.sample([f"{i:02x}" for i in range(256)], min(256, wanted)))
        else:
            cur.execute(fingerprint.pg_bucket_sums(pg_kept).sql(dialect=fingerprint.DIALECT))
            pg_sums = {b: (int(n), s) for b, n, s in cur.fetchall()}
            table = f"mvlog_verify_{view.name}_{id(result)}"
            spark_hashed.createOrReplaceTempView(table)
            try:
                spark_sums = {r["bucket"]: (int(r["n"]), r["s"])
                              for r in spark.sql(fingerprint.spark_bucket_sums(quote_spark(table))).collect()}
            finally:
                spark.catalog.dropTempView(table)
            result.rows_compared = sum(n for n, _ in pg_sums.values())
            buckets = sorted(b for b in set(pg_sums) | set(spark_sums) if pg_sums.get(b) != spark_sums.get(b))
        pairs_pg, pairs_delta = self._pairs(cur, pg_kept, spark_hashed, buckets)
        if sample:
            result.rows_compared = max(sum(pairs_pg.values()), sum(pairs_delta.values()))
        bad = sorted({kh for kh, _ in (pairs_pg - pairs_delta) + (pairs_delta - pairs_pg)})
        result.mismatched = len(bad)
        if not bad:
            return
        result.status = "mismatch"
        result.mismatches = self._describe(cur, shape, columns, keys, delta, bad[:SHOWN])
        if repair and keyed:
            row_hash = ROW_HASH_COLUMN in delta.columns
            result.repaired = self._repair(view, shape, location, at, delta, columns, keys, bad, row_hash).keys_read
            result.status = "repaired"
        elif repair:
            raise UsageError(f"view {view.name} has no view key to re-merge by; run 'mvlog refresh --complete "
                             f"{view.name}' to rebuild it")

    def _pending_keys(self, shape: ViewShape, location: str, at: StampedSnapshot, keys: list[Column]) -> list[str]:
        """Fingerprints of the view keys that changes logged after the view's stamp affect: the
        keys a fast refresh would read now."""
        plan = plan_refresh(shape, location, RefreshMethod.FAST, at.time, None, True)
        key_columns = [Column(f"{CHANGED_KEY_PREFIX}{i}", k.spark_type) for i, k in enumerate(keys)]
        hashed = fingerprint.pg_hashes(plan.read_sql(strategy_of(shape).null_safe(at.time)), key_columns, key_columns)
        distinct = exp.select(exp.column(KEY_HASH, quoted=True)).distinct().from_(fingerprint.subquery(hashed, "p"))
        return [r[0] for r in at.query(distinct.sql(dialect=fingerprint.DIALECT))]

    def _pairs(self, cur: Cursor, pg_kept: exp.Select, spark_hashed: DataFrame,
               buckets: list[str]) -> tuple[Counter, Counter]:
        """(key fingerprint, row fingerprint) pairs of the given buckets, as multisets, from each side."""
        if not buckets:
            return Counter(), Counter()
        key_hash = exp.column(KEY_HASH, "p", quoted=True)
        bucket = exp.Substring(this=key_hash, start=exp.Literal.number(1),
                               length=exp.Literal.number(fingerprint.BUCKET_DIGITS))
        pairs = (exp.select(key_hash.copy(), exp.column(ROW_HASH, "p", quoted=True))
                 .from_(fingerprint.subquery(pg_kept, "p")).where(_is_one_of(bucket, buckets)))
        cur.execute(pairs.sql(dialect=fingerprint.DIALECT))
        pg = Counter(map(tuple, cur.fetchall()))
        rows = spark_hashed.where(
            f"substr({KEY_HASH}, 1, {fingerprint.BUCKET_DIGITS}) IN ({_spark_strings(buckets)})").collect()
        return pg, Counter((r[KEY_HASH], r[ROW_HASH]) for r in rows)

    def _describe(self, cur: Cursor, shape: ViewShape, columns: list[Column], keys: list[Column], delta: DataFrame,
                  bad: list[str]) -> list[Mismatch]:
        """Both sides' rows of the mismatched key fingerprints ``bad``, as canonical text."""
        texts = fingerprint.pg_texts(shape.select_sql, columns, keys)
        texts = (exp.select(exp.Star()).from_(fingerprint.subquery(texts, "t"))
                 .where(_is_one_of(exp.column(KEY_HASH, "t", quoted=True), bad)))
        cur.execute(texts.sql(dialect=fingerprint.DIALECT))
        names = [c.name for c in columns]
        pg_rows = {r[0]: dict(zip(names, r[1:])) for r in cur.fetchall()}
        delta_rows = {r[0]: dict(zip(names, r[1:]))
                      for r in delta.selectExpr(*fingerprint.spark_texts(columns, keys))
                      .where(f"{KEY_HASH} IN ({_spark_strings(bad)})").collect()}
        described = []
        for kh in bad:
            either = pg_rows.get(kh) or delta_rows.get(kh) or {}
            key: dict[str, str | None] = {k.name: either.get(k.name) for k in keys} if keys else {"row": kh}
            described.append(Mismatch(key, delta_rows.get(kh), pg_rows.get(kh)))
        return described

    def _repair(self, view: ViewConfig, shape: ViewShape, location: str, at: StampedSnapshot, delta: DataFrame,
                columns: list[Column], keys: list[Column], bad: list[str], row_hash: bool) -> WriteCounts:
        """Re-merge the keys ``bad``: their rows in PostgreSQL (read at the verify snapshot, where
        keys with nothing pending are as at the view's stamp), or their deletion; one Delta
        commit, recorded in the history."""
        source_sql = exp.select(exp.Star(), exp.alias_(exp.true(), PRESENT)).from_(
            exp.Subquery(this=exp.maybe_parse(shape.select_sql, dialect=fingerprint.DIALECT),
                         alias=exp.TableAlias(this=exp.to_identifier("v", quoted=True)))
        ).where(exp.In(this=fingerprint.pg_fingerprint(keys), expressions=[exp.Literal.string(h) for h in bad]))
        source_rows = self.warehouse.read(self.jdbc, source_sql.sql(dialect=fingerprint.DIALECT), at.snapshot)
        values = [quote_spark(c.name) for c in columns]
        key_aliases = [f"{quote_spark(k.name)} AS {quote_spark(CHANGED_KEY_PREFIX + str(i))}"
                       for i, k in enumerate(keys)]
        present = source_rows.selectExpr(*key_aliases, *values, quote_spark(PRESENT))
        in_source = source_rows.selectExpr(f"{fingerprint.spark_fingerprint(keys)} AS {KEY_HASH}")
        gone = (delta.selectExpr(f"{fingerprint.spark_fingerprint(keys)} AS {KEY_HASH}", *values)
                .where(f"{KEY_HASH} IN ({_spark_strings(bad)})").join(in_source, KEY_HASH, "left_anti")
                .selectExpr(*key_aliases, *[f"CAST(NULL AS {c.spark_type}) AS {quote_spark(c.name)}" for c in columns],
                            f"CAST(NULL AS BOOLEAN) AS {quote_spark(PRESENT)}"))
        staged = self.warehouse.stage(present.unionByName(gone))
        history = self.catalog.history_start(view.name, RefreshMethod.FAST,
                                             f"verify --repair: {len(bad)} mismatched keys re-merged", at.time)
        metadata = {"view": view.name, "snaptime": at.time.isoformat(), "method": "repair"}
        try:
            # A mismatched row need not match its stored hash (another writer): compare the columns.
            counts = self.warehouse.merge(location, staged, shape.key_columns, metadata,
                                          row_hash=row_hash, trust_row_hash=False)
        except MvlogError as exc:
            self.catalog.history_end(history, WriteCounts(), error=str(exc))
            raise
        self.catalog.history_end(history, counts)
        return counts


def _pending_view(shape: ViewShape, at: StampedSnapshot, needs_complete: str | None, keyed: bool) -> str | None:
    """Why the whole view is pending (its next refresh is complete, or it has no keys to leave
    out), if it is."""
    if needs_complete:
        return f"its next refresh is complete ({needs_complete})"
    for log in shape.logs:
        replaced = at.replaced_since(log, at.time)
        if replaced:
            return f"{replaced} since the last refresh"
        if not keyed and at.window_has_rows(log, at.time):
            return f"{log.qualified_table} changed since the last refresh (a complete-refresh view)"
    return None


def _is_one_of(value: exp.Expression, strings: list[str]) -> exp.In:
    """``value IN ('a', 'b', …)``: md5 fingerprints and bucket prefixes, as string literals."""
    return exp.In(this=value, expressions=[exp.Literal.string(s) for s in strings])


def _spark_strings(values: list[str]) -> str:
    """Spark SQL string literals, comma-separated (md5 fingerprints and bucket prefixes: hex digits)."""
    return ", ".join(exp.Literal.string(v).sql("spark") for v in values)

"""Every way a fast refresh finds and writes its rows, over Spark Connect, in one shop.

The other refresh modules run on the test process's SparkSession; what Spark Connect changes is
the Spark side — the JDBC read at the stamp's snapshot, the staging, the MERGE or the rewrite, the
commit and its version — not how a view's affected keys are found. So one shop on the ``mvlog
engine`` holds one view per strategy (simple, join, aggregate by deltas, aggregate recomputed,
outer join, UNION, grouping sets, a view over a view, a window, a subquery), most of them written
by the rewrite path and the change-feed views (always a MERGE) with NULL keys, and a fixed
scenario checks every view against PostgreSQL after each refresh.
"""

from __future__ import annotations

import pytest
from conftest import refresh_ok
from shop import check_fast_views, fast_refresh_and_check, shared_shop, strategy_views

pytestmark = pytest.mark.integration

# Its ten first: the other two (a row against an average, a top-N) read as a join's and an
# aggregate's do; the whole-read test takes all twelve.
VIEWS = strategy_views("c_")[:10]


@pytest.fixture(scope="module")
def built_shop(request, pg, tmp_path_factory):
    with shared_shop(request, pg, tmp_path_factory.mktemp("shop"), VIEWS, "connect",
                     rewrite_max_rows=1000) as built:
        yield built


def test_every_strategy_over_connect_rewrites_or_merges_exactly(built_shop):
    shop, db = built_shop.seeded(), built_shop.db
    assert {v["name"]: shop.plan(v["name"]).to_json()["write"] for v in VIEWS} == {
        v["name"]: "merge" if v.get("change_feed") else "rewrite" for v in VIEWS}
    check_fast_views(shop, VIEWS)
    db.execute("INSERT INTO customers VALUES (9, 'New', NULL, 'corp')")          # a root without partners
    db.execute("UPDATE orders SET customer_id = NULL WHERE id = 3")              # an order loses its customer
    db.execute("INSERT INTO orders VALUES (6, 9, 'open', 1.00, 1)")              # ... and Nine gets one
    db.execute("DELETE FROM orders WHERE id = 5")                                # empties 'cancelled'
    db.execute("UPDATE customers SET id = 40 WHERE id = 4")                      # a key update: orders dangle
    db.execute("UPDATE orders SET status = NULL WHERE id = 1")                   # into the NULL group
    db.execute("UPDATE nation SET name = 'République' WHERE id = 1")             # a dimension fans out
    fast_refresh_and_check(shop, VIEWS)
    db.execute("DELETE FROM nation WHERE id = 1; UPDATE customers SET nation_id = 1 WHERE id = 2")
    db.execute("UPDATE orders SET customer_id = 40 WHERE id = 3; UPDATE orders SET id = 16 WHERE id = 2")
    fast_refresh_and_check(shop, VIEWS)
    # a change no view row sees: read, nothing written
    db.execute("UPDATE orders SET priority = priority + 1 WHERE id = 1")
    results = refresh_ok(shop, ["c_simple", "c_by_status"])
    assert {(r.method, r.rows_inserted, r.rows_updated, r.rows_deleted) for r in results.values()} == {
        ("fast", 0, 0, 0)}, results


def test_staging_over_connect_counts_its_rows_in_the_checkpoint_s_own_job(built_shop):
    """Under Spark Connect the staged rows' count, key range and NULL counts come back with the
    checkpoint's result (observed), not from a second job: the same values that job would give,
    for rows with and without NULL keys and for no rows at all."""
    from mvlog.spark.merge import _checkpointed_observing

    spark = built_shop.changed().warehouse.spark
    assert type(spark).__module__.startswith("pyspark.sql.connect")
    stats = {"rows": "count(1)", "low": "min(_mvlog_key_0)", "high": "max(_mvlog_key_0)",
             "non_null": "count(_mvlog_key_0)", "null_key_deletes": "count_if(_mvlog_key_0 IS NULL AND p IS NULL)"}
    rows = spark.sql("SELECT CASE WHEN id % 5 = 0 THEN NULL ELSE CAST(id * 3 AS decimal(12, 2)) END AS _mvlog_key_0,"
                     " CASE WHEN id % 2 = 0 THEN 1 END AS p FROM range(1, 50)")
    for df in (rows, rows.where("false")):
        checkpointed, found = _checkpointed_observing(df, stats)
        want = checkpointed.selectExpr(*(f"{sql} AS {key}" for key, sql in stats.items())).collect()[0].asDict()
        assert found == want and checkpointed.count() == want["rows"]

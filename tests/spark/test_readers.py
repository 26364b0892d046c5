"""Views that every common reader opens: after fast refreshes with deletes, updates and key changes,
each view class is read without Spark — by ``deltalake`` (delta-rs), polars, DuckDB over Arrow and
pandas — and equals its query run in PostgreSQL; a change feed is read by ``deltalake`` too. A view
that asks for deletion vectors, or whose column names need column mapping, has them; turning
deletion vectors off again makes the view readable by every reader."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import deltalake
import duckdb
import polars
import pyarrow
import pytest
from conftest import assert_views_match, refresh_ok
from shop import build_shop

pytestmark = pytest.mark.integration
SUMS = ["status", "n", "total", "mean"]

VIEWS = [
    {"name": "r_simple", "refresh": "fast", "query": "SELECT id, status, amount FROM orders WHERE amount > 1"},
    {"name": "r_join", "refresh": "fast",
     "query": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id"},
    {"name": "r_outer", "refresh": "fast",
     "query": "SELECT c.id AS customer, c.name, o.id AS order_id, o.amount "
              "FROM customers c LEFT JOIN orders o ON o.customer_id = c.id"},
    {"name": "r_sums", "refresh": "fast", "change_feed": True,
     "query": "SELECT status, count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM orders GROUP BY status"},
    {"name": "r_max", "refresh": "fast",
     "query": "SELECT customer_id, max(amount) AS top, min(priority) AS low FROM orders GROUP BY customer_id"},
    {"name": "r_union", "refresh": "fast",
     "query": "SELECT id, name FROM customers WHERE segment = 'retail' UNION ALL SELECT id, name FROM nation"},
    {"name": "r_distinct", "refresh": "fast", "query": "SELECT DISTINCT status, customer_id FROM orders"},
    {"name": "r_exists", "refresh": "fast",
     "query": "SELECT c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"},
    {"name": "r_window", "refresh": "fast",
     "query": "SELECT id, customer_id, rank() OVER (PARTITION BY customer_id ORDER BY id) AS nth FROM orders"},
]
DML = """
INSERT INTO orders VALUES (6, 2, 'open', 99.95, 1), (7, 4, NULL, 12.30, 2), (8, 1, 'shipped', 0.50, 3);
UPDATE orders SET amount = amount + 1.11, status = 'shipped' WHERE id = 1;
UPDATE orders SET id = 20 WHERE id = 2;
UPDATE customers SET id = 9, segment = 'retail' WHERE id = 3;
DELETE FROM orders WHERE id = 5;
DELETE FROM customers WHERE id = 4;
UPDATE nation SET name = 'Chile' WHERE id = 3;
"""


def _rows(records) -> Counter:
    """Rows as a multiset of tuples; numbers compared as Decimals (readers differ in float/decimal)."""
    def value(v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return Decimal(str(v))
        return v
    return Counter(tuple(value(v) for v in r) for r in records)


def _postgres(db, query: str) -> Counter:
    return _rows(db.execute(query))


def _visible(columns) -> list[str]:
    return [c for c in columns if not c.startswith("_mvlog_")]


def read_with_every_reader(path: str, columns: list[str]) -> dict[str, Counter]:
    """The view at ``path`` as rows of ``columns``, read by each reader without Spark."""
    table = deltalake.DeltaTable(path)
    arrow = table.to_pyarrow_table(columns=columns)
    by_polars = polars.read_delta(path, columns=columns)
    # DuckDB over the Arrow data deltalake gives (DuckDB's own delta extension is a download away)
    con = duckdb.connect()
    con.register("view", arrow)
    frame = table.to_pandas(columns=columns)
    return {
        "deltalake": _rows(zip(*(arrow.column(c).to_pylist() for c in columns))) if arrow.num_rows else Counter(),
        "polars": _rows(by_polars.select(columns).iter_rows()),
        "duckdb": _rows(con.sql(f"SELECT {', '.join(duckdb_quote(c) for c in columns)} FROM view").fetchall()),
        "pandas": _rows(tuple(None if _missing(v) else v for v in row)
                        for row in frame[columns].itertuples(index=False, name=None)),
    }


def duckdb_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _missing(value) -> bool:
    import pandas

    return value is None or (not isinstance(value, (list, tuple)) and bool(pandas.isna(value)))


def table_features(spark, path: str) -> set[str]:
    return set(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["tableFeatures"])


def test_every_view_class_is_read_exactly_by_readers_without_spark(db, make_project):
    project = build_shop(db, make_project, VIEWS, "local")
    spark = project.warehouse.spark
    for view in VIEWS:  # the defaults: no feature a reader may lack
        features = table_features(spark, project.config.view_location(view["name"]))
        assert not features & {"deletionVectors", "columnMapping"}, (view["name"], features)
    fed = project.config.view_location("r_sums")
    before = deltalake.DeltaTable(fed).version()
    old_sums = _rows(tuple(r[c] for c in SUMS) for r in deltalake.DeltaTable(fed).to_pyarrow_table(columns=SUMS)
                     .to_pylist())

    db.execute(DML)
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}, {v: r.method for v, r in results.items()}
    assert_views_match(project, VIEWS)
    for view in VIEWS:
        path = project.config.view_location(view["name"])
        columns = _visible(deltalake.DeltaTable(path).schema().to_arrow().names)
        expected = _postgres(db, view["query"])
        for reader, rows in read_with_every_reader(path, columns).items():
            assert rows == expected, (view["name"], reader, rows - expected, expected - rows)

    # The change feed of the refresh, read by deltalake: the old rows minus the deleted and the
    # pre-images, plus the inserted and the post-images, are the new rows.
    feed = deltalake.DeltaTable(fed).load_cdf(starting_version=before + 1)
    changes = pyarrow.RecordBatchReader.from_stream(feed).read_all().to_pylist()
    assert changes, "the refresh changed groups: the feed has rows"
    by_type = {t: _rows(tuple(r[c] for c in SUMS) for r in changes if r["_change_type"] == t)
               for t in ("insert", "delete", "update_preimage", "update_postimage")}
    assert old_sums - by_type["delete"] - by_type["update_preimage"] + by_type["insert"] + \
        by_type["update_postimage"] == _postgres(db, VIEWS[3]["query"])


def test_deletion_vectors_and_column_mapping_are_there_when_asked_for_and_go_when_not(db, make_project):
    views = [{"name": "dv_orders", "refresh": "fast", "deletion_vectors": True,
              "query": "SELECT id, status, amount FROM orders"},
             {"name": "spaced", "refresh": "fast", "query": 'SELECT id, amount AS "order total" FROM orders'}]
    project = build_shop(db, make_project, views, "local")
    spark = project.warehouse.spark
    dv_path, spaced_path = (project.config.view_location(v["name"]) for v in views)
    assert "deletionVectors" in table_features(spark, dv_path)
    assert "columnMapping" in table_features(spark, spaced_path)
    assert "column mapping: column 'order total'" in project.explain("spaced").table_features[0]
    db.execute("DELETE FROM orders WHERE id = 2; UPDATE orders SET amount = 1 WHERE id = 3")
    refresh_ok(project)
    assert_views_match(project, views)
    with pytest.raises(Exception, match="(?i)deletionVectors"):  # what deltalake users meet: the choice is theirs
        deltalake.DeltaTable(dv_path).to_pyarrow_table()
    assert _rows(polars.read_delta(dv_path, columns=["id", "status", "amount"]).iter_rows()) == \
        _postgres(db, views[0]["query"])

    # Switched off: apply drops the feature (the table is rewritten without deletion vectors).
    project = make_project(["nation", "customers", "orders"], [{**views[0], "deletion_vectors": False}, views[1]])
    report = project.apply()
    assert report.features == {"dv_orders": ["deletion vectors off"]}
    assert "deletionVectors" not in table_features(project.warehouse.spark, dv_path)
    assert read_with_every_reader(dv_path, ["id", "status", "amount"])["deltalake"] == \
        _postgres(db, views[0]["query"])
    db.execute("DELETE FROM orders WHERE id = 1")
    refresh_ok(project)
    assert_views_match(project, views)

"""Views that every common reader opens: after fast refreshes with deletes, updates and key changes,
each view class is read without Spark — by ``deltalake`` (delta-rs), polars, DuckDB over Arrow and
pandas — and equals its query run in PostgreSQL; a change feed is read by ``deltalake`` too. A view
that asks for deletion vectors, or allows column mapping, has them; turning deletion vectors off
again makes the view readable by every reader. What each reader does with a table that has deletion
vectors or column mapping — reads it, refuses it, or reads wrong values — is what the README and
``mvlog explain`` say (:data:`mvlog.spark.features.READERS`), each reader run in a process of its
own; and a view whose column names need column mapping is refused unless it allows it."""

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

from mvlog.errors import ConfigError
from mvlog.spark import features

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
             {"name": "spaced", "refresh": "fast", "column_mapping": True,
              "query": 'SELECT id, amount AS "order total" FROM orders'}]
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


# One reader, in a process of its own: the rows of ``columns`` as JSON, or the error. deltalake
# 1.6.6 may abort the interpreter at its exit after reading right ("terminate called without an
# active exception"): the script leaves with os._exit once it has said what it read.
READ_ONE = """
import decimal, json, os, sys
import deltalake, duckdb, polars, pyarrow
reader, path, columns = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    if reader == "Spark (delta-spark)":
        raise SystemExit("read in the test process")
    if reader == "deltalake QueryBuilder":
        names = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
        table = pyarrow.table(deltalake.QueryBuilder().register("v", deltalake.DeltaTable(path))
                              .execute(f"SELECT {names} FROM v").read_all())
        rows = [list(r.values()) for r in table.to_pylist()]
    elif reader == "deltalake to_pyarrow_table / to_pandas":
        frame = deltalake.DeltaTable(path).to_pandas(columns=columns)
        arrow = deltalake.DeltaTable(path).to_pyarrow_table(columns=columns)
        rows = [[None if v != v else v for v in row] for row in frame.itertuples(index=False, name=None)]
        assert rows == [list(r.values()) for r in arrow.to_pylist()] or arrow.num_rows == len(rows)
    elif reader == "polars read_delta / scan_delta":
        rows = [list(r) for r in polars.read_delta(path, columns=columns).iter_rows()]
    else:  # DuckDB over the Arrow data deltalake gives
        con = duckdb.connect()
        con.register("v", deltalake.DeltaTable(path).to_pyarrow_table(columns=columns))
        names = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
        rows = [list(r) for r in con.sql(f"SELECT {names} FROM v").fetchall()]
    print(json.dumps({"rows": rows}, default=lambda v: float(v) if isinstance(v, decimal.Decimal) else str(v)),
          flush=True)
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
os._exit(0)
"""


def read_in_a_process(reader: str, path: str, columns: list[str]) -> dict:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", READ_ONE, reader, path, json.dumps(columns)], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip(), (reader, done.returncode, done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def verdict(read: dict, expected: Counter) -> str:
    """What a reader did: READS (the query's rows), REFUSES (an error), MISREADS (other rows)."""
    if "error" in read:
        return features.REFUSES
    return features.READS if _rows(tuple(r) for r in read["rows"]) == expected else features.MISREADS


def test_each_reader_does_what_the_readme_says_with_column_mapping_and_deletion_vectors(db, make_project):
    views = [{"name": "mapped", "refresh": "fast", "column_mapping": True,
              "query": 'SELECT customer_id AS "customer id", sum(amount) AS "order total", '
                       'count(*) AS "orders (count)" FROM orders GROUP BY customer_id'},
             {"name": "dv", "refresh": "fast", "deletion_vectors": True,
              "query": "SELECT id, status, amount FROM orders"},
             {"name": "plain", "refresh": "fast", "query": "SELECT id, status, amount FROM orders"}]
    project = build_shop(db, make_project, views, "local")
    db.execute(DML)
    refresh_ok(project)
    assert_views_match(project, views)  # Spark reads each of them right
    for view in views:
        path = project.config.view_location(view["name"])
        found = table_features(project.warehouse.spark, path)
        expected = _postgres(db, view["query"])
        columns = [c for c in project.warehouse.columns(path) if not c.startswith("_mvlog_")]
        said = project.explain(view["name"])
        assert said.readers_of == "table" and said.readers == features.readers(found), (view["name"], said.readers)
        seen = {reader: features.READS if reader == "Spark (delta-spark)"
                else verdict(read_in_a_process(reader, path, columns), expected) for reader in features.READERS}
        assert {reader: v.split(" (")[0] for reader, v in said.readers.items()} == seen, (view["name"], found, seen)
    # What the issue saw: deltalake's pandas gives the right number of rows, every value NULL.
    mapped = read_in_a_process("deltalake to_pyarrow_table / to_pandas", project.config.view_location("mapped"),
                               ["customer id", "order total", "orders (count)"])
    assert mapped["rows"] and all(value is None for row in mapped["rows"] for value in row), mapped


def test_a_column_name_that_needs_column_mapping_is_refused_unless_the_view_allows_it(db, make_project):
    db.execute("CREATE TABLE sales (id int PRIMARY KEY, customer int, amount numeric(10, 2))")
    spaced = {"name": "totals", "query": 'SELECT customer AS "customer id", sum(amount) AS "order total" '
                                         "FROM sales GROUP BY customer"}
    with pytest.raises(ConfigError) as refused:
        make_project(["sales"], [spaced]).validate()
    message = str(refused.value)
    for part in ("views[0] (totals): column 'customer id' needs Delta column mapping",
                 "deltalake's to_pandas() and to_pyarrow_table()", "as NULLs", "polars refuses it",
                 "rename the column (AS customer_id)", "set column_mapping: true on the view"):
        assert part in message, message
    make_project(["sales"], [{**spaced, "column_mapping": True}]).validate()  # allowed: accepted
    renamed = {**spaced, "query": "SELECT customer AS customer_id, sum(amount) AS order_total FROM sales "
                                  "GROUP BY customer"}
    explained = make_project(["sales"], [renamed]).explain("totals")
    assert explained.readers_of == "configuration"  # not built: as mvlog would write it
    assert set(explained.readers.values()) == {features.READS}

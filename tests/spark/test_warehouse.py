"""The Delta layout: complete refreshes read in key ranges (one file per range), and a MERGE
skips the files its changed keys cannot be in. Real PostgreSQL, Spark and Delta."""

from __future__ import annotations

import contextlib
import shutil
from urllib.parse import urlparse

import pytest
from conftest import assert_view_matches, assert_views_match, refresh_ok

import mvlog.pipeline.plan

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE orders (id integer PRIMARY KEY, customer_id integer, amount numeric(10,2));
INSERT INTO orders SELECT g, CASE WHEN g % 37 = 0 THEN NULL ELSE g % 200 END, g / 7.0 FROM generate_series(1, 2000) g;
CREATE TABLE tags (code text PRIMARY KEY, v integer);
INSERT INTO tags SELECT 'tag-' || lpad(g::text, 4, '0'), g FROM generate_series(1, 600) g;
ANALYZE orders; ANALYZE tags;
"""

VIEWS = [
    {"name": "big_orders", "refresh": "fast", "query": "SELECT id, customer_id, amount FROM orders WHERE amount > 1"},
    {"name": "per_customer", "refresh": "fast",
     "query": "SELECT customer_id, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer_id"},
    {"name": "tag_values", "refresh": "fast", "query": "SELECT code, v FROM tags"},
]


def data_files(project, view, key: str) -> dict[str, tuple]:
    """The Delta table's data files: path -> (min, max) of ``key`` in it."""
    from pyspark.sql import functions as F

    df = project.warehouse.spark.read.format("delta").load(project.config.view_location(view))
    rows = df.groupBy(F.input_file_name().alias("f")).agg(F.min(key), F.max(key)).collect()
    return {row[0]: (row[1], row[2]) for row in rows}


@contextlib.contextmanager
def files_hidden(paths):
    """Move data files away: a MERGE that reads any of them fails (the proof that it skipped them)."""
    moved = []
    try:
        for path in paths:
            local = urlparse(path).path
            shutil.move(local, local + ".hidden")
            moved.append(local)
        yield
    finally:
        for local in moved:
            shutil.move(local + ".hidden", local)


def test_complete_refresh_reads_in_key_ranges_and_merge_skips_untouched_files(db, make_project, monkeypatch):
    monkeypatch.setattr(mvlog.pipeline.plan, "ROWS_PER_PARTITION", 100)
    db.execute(SCHEMA)
    project = make_project(["orders", "tags"], VIEWS)
    project.apply()
    partitions = {v["name"]: project.plan(v["name"], complete=True).partitions for v in VIEWS}
    assert len(partitions["big_orders"]) == 20 and len(partitions["tag_values"]) == 6
    assert len(partitions["per_customer"]) == 2  # ~200 groups
    assert "IS NULL" in partitions["per_customer"][0]
    assert_views_match(project, VIEWS)
    files = data_files(project, "big_orders", "id")
    assert len(files) == 20
    assert sorted(files.values())[0][0] == 8 and sorted(files.values())[-1][1] == 2000
    assert all(a[1] < b[0] for a, b in zip(sorted(files.values()), sorted(files.values())[1:])), "ranges overlap"
    tag_files = data_files(project, "tag_values", "code")

    # Recent orders change (the common case): only the file of the top key range is read; the
    # others are moved away during the refresh, and the MERGE does not miss them.
    db.execute("UPDATE orders SET amount = amount + 1 WHERE id > 1950;"
               "INSERT INTO orders SELECT g, NULL, 5 FROM generate_series(2001, 2010) g;"
               "UPDATE tags SET v = -v WHERE code >= 'tag-0590'")
    untouched = [f for f, (low, high) in files.items() if high < 1951]
    untouched += [f for f, (low, high) in tag_files.items() if high < "tag-0590"]
    assert len(untouched) == 19 + 5
    with files_hidden(untouched):
        results = refresh_ok(project, ["big_orders", "tag_values"])
    assert {name: r.method for name, r in results.items()} == {"big_orders": "fast", "tag_values": "fast"}
    assert results["big_orders"].rows_updated == 50 and results["big_orders"].rows_inserted == 10
    refresh_ok(project, ["per_customer"])  # the NULL group and others changed: found through IS NULL
    assert_views_match(project, VIEWS)

    # Keys spread over the whole range, and deletes: every file may be touched, still exact.
    db.execute("DELETE FROM orders WHERE id % 97 = 0; UPDATE orders SET customer_id = NULL WHERE id % 101 = 0;"
               "DELETE FROM tags WHERE v % 50 = 0")
    refresh_ok(project)
    assert_views_match(project, VIEWS)

    # Maintenance: OPTIMIZE folds the files the refreshes left into files ordered by the key
    # again; nothing changes in the view, and fast refresh goes on. (Without deletion vectors a
    # MERGE that touches every file rewrites them all, so there may be few files left here.)
    before = data_files(project, "big_orders", "id")
    done = dict(project.optimize(["big_orders", "per_customer"]))["big_orders"]
    files = f"{len(before)} file{'s' if len(before) != 1 else ''}"
    assert done.startswith(f"{files} compacted into 1 "), done  # ZORDER rewrites even one file
    after = data_files(project, "big_orders", "id")
    assert len(after) == 1
    assert_views_match(project, VIEWS)
    db.execute("UPDATE orders SET amount = 0 WHERE id < 100")
    assert refresh_ok(project, ["big_orders"])["big_orders"].rows_deleted == 91
    assert_view_matches(project, "big_orders")


def test_merge_skips_files_of_a_view_whose_key_comes_after_32_columns(db, make_project, monkeypatch):
    # Delta indexes the first 32 columns only; this view's (hidden) key column is the 41st.
    monkeypatch.setattr(mvlog.pipeline.plan, "ROWS_PER_PARTITION", 500)
    db.execute(SCHEMA)
    wide = ", ".join(f"amount + {i} AS a{i}" for i in range(40))
    view = {"name": "wide", "refresh": "fast", "query": f"SELECT {wide} FROM orders"}
    project = make_project(["orders", "tags"], [view])
    project.apply()
    files = data_files(project, "wide", "_mvlog_id")
    assert len(files) == 4
    db.execute("UPDATE orders SET amount = amount + 1 WHERE id > 1990")
    with files_hidden([f for f, (low, high) in files.items() if high < 1991]):
        assert refresh_ok(project, ["wide"])["wide"].rows_updated == 10
    assert_view_matches(project, "wide")
    # A rebuild of a table created before (default statistics) gets the setting too.
    location = project.config.view_location("wide")
    project.warehouse.spark.sql(f"ALTER TABLE delta.`{location}` "
                                "UNSET TBLPROPERTIES ('delta.dataSkippingNumIndexedCols')")
    refresh_ok(project, ["wide"], complete=True)
    properties = project.warehouse.spark.sql(f"DESCRIBE DETAIL delta.`{location}`").collect()[0]["properties"]
    assert properties["delta.dataSkippingNumIndexedCols"] == "41"
    # Its own checkpoint interval, from its creation (a rebuild keeps it).
    assert properties["delta.checkpointInterval"] == str(project.config.checkpoint_interval(project.config.views[-1]))


@pytest.mark.parametrize("value", [
    0, -2**63, 2**63 - 1, "plain", "", "'); DROP TABLE victim; --", "\\x00 ' \" ` ${HOME} ${spark:x}",
    "a\\'b\\", "é\n\t\r\u2028 ☃", "$$x$$",
])
def test_range_literals_read_back_as_the_value(spark, value):
    """MERGE's key range is rendered as literals: each must mean exactly its value to Spark
    (quotes, backslashes and ${…}, which Spark would substitute as a variable)."""
    from decimal import Decimal

    from mvlog.spark.sparksql import spark_literal

    assert spark.sql(f"SELECT {spark_literal(value)} AS v").collect()[0]["v"] == value
    for number in (Decimal("-12.50"), Decimal("0.000001"), Decimal("12345678901234567890.12")):
        assert spark.sql(f"SELECT {spark_literal(number)} AS v").collect()[0]["v"] == number


def test_a_merge_that_lost_a_commit_race_is_run_again_and_no_other_failure_is():
    from mvlog.spark.commits import lost_commit_race

    class DeltaError(Exception):
        def __init__(self, condition: str):
            super().__init__(f"[{condition}] …")
            self.condition = condition

        def getCondition(self):  # noqa: N802 (Spark's name)
            return self.condition

    for condition in ("DELTA_CONCURRENT_TRANSACTION", "DELTA_CONCURRENT_APPEND", "DELTA_METADATA_CHANGED"):
        assert lost_commit_race(DeltaError(condition))
    assert lost_commit_race(RuntimeError("[DELTA_CONCURRENT_TRANSACTION] ConcurrentTransactionException: …"))
    for condition in ("DELTA_MERGE_INCOMPATIBLE_DATATYPE", "JDBC_EXTERNAL_ENGINE_SYNTAX_ERROR"):
        assert not lost_commit_race(DeltaError(condition))


def _merge_scans(spark, run) -> list[str]:
    """The read schemas of the Parquet scans of the SQL executions ``run()`` starts (Spark's SQL
    status store: what each scan of the table actually read)."""
    import re

    def plans() -> dict[int, str]:
        # By execution id: the store keeps the last spark.sql.ui.retainedExecutions only, which a
        # long test session's shared Spark has long passed.
        executions = spark._jsparkSession.sharedState().statusStore().executionsList().iterator()
        found = {}
        while executions.hasNext():
            execution = executions.next()
            found[execution.executionId()] = execution.physicalPlanDescription()
        return found

    before = max(plans(), default=-1)
    run()
    schemas = [m for i, p in plans().items() if i > before for m in re.findall(r"ReadSchema: (struct<[^\n]*>)", p)]
    return [s for s in schemas if not s.startswith("struct<txn:")]  # Delta's own log reads


def test_merge_leaves_unchanged_rows_alone_and_its_scans_read_keys_and_row_hash_only(spark, tmp_path):
    """A MERGE tells a changed row from an unchanged one by the stored row hash: the scans of the
    table read the key and the hash, not the value columns. The hash tells which columns are
    NULL ((NULL, 1) and (1, NULL) differ), and a table written without hashes still merges."""
    from mvlog.model import ROW_HASH_COLUMN
    from mvlog.spark.warehouse import Warehouse

    warehouse = Warehouse(spark, str(tmp_path))
    location = str(tmp_path / "v")
    table = spark.sql("SELECT id, CASE WHEN id = 3 THEN NULL ELSE id END AS a, CASE WHEN id = 3 THEN 1L END AS b, "
                      "'x' AS c FROM range(0, 1000)")
    # With deletion vectors: without them a MERGE rewrites the files it touches, reading every column.
    warehouse.replace(location, table, {"view": "v", "snaptime": "2026-01-01"}, None, ("id",), deletion_vectors=True)
    assert spark.read.format("delta").load(location).columns == ["id", "a", "b", "c", ROW_HASH_COLUMN]
    source = spark.sql("""SELECT * FROM VALUES
        (3L, 3L, 1L, NULL, 'x', true),            -- (NULL, 1) -> (1, NULL): changed
        (4L, 4L, 4L, NULL, 'x', true),            -- as it is
        (5L, NULL, NULL, NULL, NULL, NULL),       -- deleted
        (6L, 6L, 6L, 7L, 'x', true),              -- changed
        (2000L, 2000L, 1L, NULL, 'y', true)       -- new
        AS s(_mvlog_key_0, id, a, b, c, _mvlog_present)""")
    counts = []
    scans = _merge_scans(spark, lambda: counts.append(warehouse.merge(
        location, warehouse.stage(source), ("id",), {"view": "v", "snaptime": "2026-01-02"})))
    assert (counts[0].rows_inserted, counts[0].rows_updated, counts[0].rows_deleted) == (1, 2, 1)
    assert scans and all(
        {field.split(":")[0] for field in s[len("struct<"):-1].split(",")} - {"__delta_internal_is_row_deleted",
                                                                             "_tmp_metadata_row_index"}
        == {"id", ROW_HASH_COLUMN} or s == "struct<id:bigint>" for s in scans), scans
    after = spark.read.format("delta").load(location)
    assert {tuple(r) for r in after.where("id IN (3, 4, 5, 6, 2000)").select("id", "a", "b", "c").collect()} == {
        (3, 1, None, "x"), (4, 4, None, "x"), (6, 6, 7, "x"), (2000, 1, None, "y")}
    from mvlog.spark.sparksql import row_hash_sql
    stale = after.where(f"{ROW_HASH_COLUMN} <> {row_hash_sql(['id', 'a', 'b', 'c'])}").count()
    assert stale == 0

    legacy = str(tmp_path / "legacy")
    table.write.format("delta").save(legacy)  # as mvlog wrote views before row hashes
    counts = warehouse.merge(legacy, warehouse.stage(source), ("id",), {"view": "legacy", "snaptime": "2026-01-02"},
                             row_hash=False)
    assert (counts.rows_inserted, counts.rows_updated, counts.rows_deleted) == (1, 2, 1)
    assert spark.read.format("delta").load(legacy).columns == ["id", "a", "b", "c"]


@pytest.mark.parametrize("spark_mode", ["local", "connect"])
def test_a_merge_knows_its_version_without_reading_the_history(db, make_project, monkeypatch, spark_mode):
    """Views refreshed at once (each on a session of its own) record the version their write
    committed, told by Delta in the session; a window that changed no row commits nothing."""
    from mvlog.spark.versions import DeltaHistory

    db.execute(SCHEMA)
    project = make_project(["orders", "tags"], VIEWS, spark_mode=spark_mode)
    project.apply()
    db.execute("UPDATE orders SET amount = amount + 1 WHERE id <= 20")
    db.execute("UPDATE tags SET v = v WHERE code = 'tag-0001'")  # logged, but tag_values' row stays as it is

    def no_history(self, location, metadata):
        raise AssertionError(f"the history of {location} was read after a write")

    monkeypatch.setattr(DeltaHistory, "own_commit", no_history)
    results = refresh_ok(project)
    monkeypatch.undo()
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    recorded = dict(db.execute(
        "SELECT DISTINCT ON (view_name) view_name, delta_version FROM mvlog.refresh_history "
        "WHERE status = 'succeeded' ORDER BY view_name, id DESC"))
    newest = {v["name"]: project.warehouse.mvlog_version(project.config.view_location(v["name"]))[0] for v in VIEWS}
    assert recorded == newest
    assert_views_match(project, VIEWS)
    assert newest["tag_values"] == 0  # the build only: the window changed no row
    assert (results["tag_values"].keys_read, results["tag_values"].rows_updated) == (1, 0)
    assert results["big_orders"].rows_updated + results["big_orders"].rows_inserted == 20
    assert results["per_customer"].rows_updated > 0


def test_a_warmed_table_s_next_read_builds_no_delta_state(spark, tmp_path):
    """``Warehouse.warm`` builds the state of the table's newest version (what the scheduler does
    after a refresh commits): the next read of that version runs only the jobs of any later read
    (no job to build the state). Without it, the first read after a commit builds it (3 jobs more)."""
    from mvlog.spark.warehouse import Warehouse

    warehouse = Warehouse(spark, str(tmp_path))
    location = str(tmp_path / "v")
    warehouse.replace(location, spark.sql("SELECT id, id AS a FROM range(0, 100)"), {"view": "v"}, None, ("id",))
    context = spark.sparkContext

    def jobs_of_a_read(group: str) -> int:
        context.setJobGroup(group, group)
        try:
            spark.read.format("delta").load(location).inputFiles()
        finally:
            context.setJobGroup("", "")
        return len(context.statusTracker().getJobIdsForGroup(group))

    def commit(n: int) -> None:
        spark.sql(f"INSERT INTO delta.`{location}` (id, a) VALUES ({1000 + n}, {n})").collect()

    commit(1)
    first, again = jobs_of_a_read("cold"), jobs_of_a_read("cold again")  # a read lists files: one job
    assert first > again
    commit(2)
    warehouse.warm(location)
    assert jobs_of_a_read("warm") == again


@pytest.mark.parametrize("spark_mode", ["local", "connect"])
def test_a_read_from_an_unreachable_postgresql_fails_as_mvlog_s_transient_error_at_once(db, make_project, spark_mode):
    """Spark Connect resolves a JDBC read lazily: unless the read asks for its schema, PostgreSQL's
    refusal surfaces later, outside mvlog's wording, and stopped the scheduler (a restart)."""
    from mvlog.errors import SourceError
    from mvlog.postgres.jdbc import JdbcSource
    from mvlog.postgres.pgtemp import free_port

    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    project = make_project(["t"], [], spark_mode=spark_mode)
    away = JdbcSource.from_dsn(f"host=127.0.0.1 port={free_port()} dbname={db.name} user=nobody")
    with pytest.raises(SourceError) as failed:
        project.warehouse.read(away, "SELECT 1 AS one", None)
    assert failed.value.transient, str(failed.value)
    assert str(failed.value).startswith("reading from PostgreSQL failed: "), str(failed.value)


def test_a_fence_fails_an_interrupted_refresh_s_write_in_flight_and_skips_one_not_begun(spark, tmp_path):
    """A Spark Connect server finishes a killed client's MERGE, which may commit after the next
    refresh looked at the history. The fence (an empty commit of the view's transaction id at a
    version below the new refresh's) makes such a write of an older stamp fail at its commit
    while it runs, and be skipped if it begins after; the new refresh's own write commits; and
    the fence hides no older write from the restore, as it carries no stamp of its own."""
    import threading
    import time
    from datetime import UTC, datetime, timedelta

    from pyspark.sql import functions as F

    from mvlog.pipeline.refresh import refresh_txn
    from mvlog.spark.commits import DeltaSession
    from mvlog.spark.warehouse import Warehouse

    warehouse = Warehouse(spark, str(tmp_path))
    location = str(tmp_path / "v")
    recorded, killed, new = (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=m) for m in (0, 1, 2))
    warehouse.replace(location, spark.range(10).selectExpr("id", "id AS a"),
                      {"view": "v", "snaptime": recorded.isoformat()}, refresh_txn("v", recorded), ("id",))

    @F.udf("long")
    def slowly(x):
        time.sleep(8)
        return x

    orphan = DeltaSession(spark.newSession(), [])  # the killed client's write, running on
    orphan.spark.range(1).select((slowly(F.col("id")) + 100).alias("id")).createOrReplaceTempView("late")
    failed: list[BaseException] = []

    def write_late() -> None:
        try:
            with orphan.commit_settings({"view": "v", "snaptime": killed.isoformat()}, refresh_txn("v", killed)):
                orphan.spark.sql(f"MERGE INTO delta.`{location}` t USING late s ON t.id = s.id "
                                 "WHEN NOT MATCHED THEN INSERT (id, a) VALUES (s.id, s.id)").collect()
        except Exception as exc:
            failed.append(exc)

    tracker = spark.sparkContext.statusTracker()
    writer = threading.Thread(target=write_late)
    writer.start()
    deadline = time.monotonic() + 120
    while not tracker.getActiveJobsIds() and time.monotonic() < deadline:  # the MERGE is running
        time.sleep(0.1)
    app, version = refresh_txn("v", new)
    warehouse.fence(location, "v", (app, version - 1))
    writer.join()
    assert failed and "DELTA_CONCURRENT_TRANSACTION" in str(failed[0]), failed
    table = lambda: sorted(r.id for r in spark.read.format("delta").load(location).collect())  # noqa: E731
    assert table() == list(range(10))
    assert warehouse.restore_to_stamp(location, "v", recorded) is None  # nothing unrecorded to take back

    late = spark.createDataFrame([(100, 100, 100, True)], "_mvlog_key_0 long, id long, a long, _mvlog_present boolean")
    skipped = warehouse.merge(location, warehouse.stage(late), ("id",), {"view": "v", "snaptime": killed.isoformat()},
                              refresh_txn("v", killed))
    assert skipped.rows_inserted == 0 and table() == list(range(10))
    counts = warehouse.merge(location, warehouse.stage(late), ("id",), {"view": "v", "snaptime": new.isoformat()},
                             (app, version))
    assert counts.rows_inserted == 1 and table() == [*range(10), 100]

    # An older write that committed before the fence: the restore still finds it newer than the
    # recorded stamp and takes it back.
    later = new + timedelta(minutes=1)
    with orphan.commit_settings({"view": "v", "snaptime": later.isoformat()}, ("mvlog:w", 1)):
        orphan.spark.sql(f"INSERT INTO delta.`{location}` (id, a) VALUES (200, 200)").collect()
    assert table() == [*range(10), 100, 200]
    warehouse.fence(location, "v", ("mvlog:w", 2))
    assert warehouse.restore_to_stamp(location, "v", new) is not None
    assert table() == [*range(10), 100]

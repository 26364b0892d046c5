"""Spark's reads from PostgreSQL carry the driver settings mvlog gives them — its name in
``pg_stat_activity``, its bounds, and, in a refresh's read at its snapshot, the server's end of a
session left idle in its transaction (a cancelled task's, whose goodbye a stalled path lost) and
serial plans (the driver's batched fetch runs a parallel plan without its workers) — on a Spark of
the process's own and over Spark Connect, where a reader's camelCase options never reached the
driver (its reads ran as "PostgreSQL JDBC Driver", without their ``source.timeouts``)."""

from __future__ import annotations

import pytest

from mvlog.config import SparkConfig
from mvlog.postgres.jdbc import JdbcSource
from mvlog.spark.session import connect_session
from mvlog.spark.warehouse import Warehouse

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["local", "connect"])
def test_a_jdbc_read_runs_with_mvlog_s_driver_settings(db, request, mode, tmp_path):
    spark = (request.getfixturevalue("spark") if mode == "local"
             else connect_session(request.getfixturevalue("connect_engine").remote, SparkConfig()))
    jdbc = JdbcSource.from_dsn(db.dsn)
    query = ("(SELECT current_setting('application_name') AS app, "
             "(SELECT count(*) FROM pg_stat_activity WHERE application_name = 'mvlog-spark') AS seen) q")
    row = (spark.read.format("jdbc").option("url", jdbc.url).option("dbtable", query)
           .options(**jdbc.properties).load().collect()[0])
    assert (row.app, row.seen) == ("mvlog-spark", 1)
    # A read at a snapshot, as a refresh's: the session ends if left idle in its transaction, and
    # PostgreSQL plans it serially (the driver's batched fetch runs a parallel plan without workers).
    holder = db.connect()
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT pg_export_snapshot()")
            (snapshot,) = cur.fetchone()
        read = Warehouse(spark, str(tmp_path)).read(
            jdbc, "SELECT current_setting('idle_in_transaction_session_timeout') AS idle, "
            "current_setting('max_parallel_workers_per_gather') AS workers", snapshot)
        assert tuple(read.collect()[0]) == ("1min", "0")  # source.timeouts.statement's default; serial plans
    finally:
        holder.close()

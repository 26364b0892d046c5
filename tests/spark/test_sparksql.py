"""Spark SQL as text, and Spark's errors read back (pure, no Spark)."""

from __future__ import annotations

from mvlog.spark.sparksql import delta_table, postgres_message, quote_spark, short_error

JDBC_SCHEMA_ERROR = """org.apache.spark.SparkException: \
[JDBC_EXTERNAL_ENGINE_SYNTAX_ERROR.DURING_OUTPUT_SCHEMA_RESOLUTION] \
JDBC external engine syntax error. The error was caused by the query SELECT * FROM (WITH affected AS (SELECT 1)
) AS mvlog_src WHERE 1=0. ERROR: operator does not exist: numeric > boolean
  Hint: No operator matches the given name and argument types. You might need to add explicit type casts.
  Position: 49. The error occurred during output schema resolution. SQLSTATE: 42000"""


def test_postgresql_s_own_message_is_found_inside_a_spark_jdbc_error():
    error = Exception(JDBC_SCHEMA_ERROR)
    assert short_error(error).startswith("[JDBC_EXTERNAL_ENGINE_SYNTAX_ERROR")  # Spark's first line: the query
    assert postgres_message(error) == "ERROR: operator does not exist: numeric > boolean"
    lost = Exception("Job aborted.\norg.postgresql.util.PSQLException: FATAL: terminating connection due to "
                     "administrator command\n\tat org.postgresql.core.v3.QueryExecutorImpl")
    assert postgres_message(lost) == "FATAL: terminating connection due to administrator command"
    assert postgres_message(Exception("[DELTA_MISSING_DELTA_TABLE] not a Delta table")) is None


def test_names_are_backquoted():
    assert quote_spark("we`ird") == "`we``ird`"
    assert delta_table("/wh/v") == "delta.`/wh/v`"

"""Fingerprints: PostgreSQL and Spark write every value of a view in the same canonical text."""

from __future__ import annotations

import pytest
from spark.test_warehouse_types import ROW, SETUP, TABLE, VALUES

from mvlog.errors import UsageError
from mvlog.model import ROW_HASH_COLUMN
from mvlog.ops import fingerprint
from mvlog.ops.fingerprint import Column


def test_every_type_the_warehouse_writes_has_a_text_form():
    for spark_type in ("int", "bigint", "decimal(20,6)", "string", "boolean", "date", "timestamp", "timestamp_ntz",
                       "binary", "double", "float", "array<int>", "array<string>", "array<decimal(10,2)>"):
        assert fingerprint.spark_text(Column("c", spark_type))
        assert fingerprint.pg_text(Column("c", spark_type)).sql("postgres")


def test_types_without_a_shared_text_form_are_refused_by_name():
    with pytest.raises(UsageError, match="column tags has type array<double>"):
        fingerprint.check_columns([Column("id", "int"), Column("tags", "array<double>")])
    with pytest.raises(UsageError, match="struct"):
        fingerprint.check_columns([Column("s", "struct<a:int>")])


def test_names_are_quoted_on_both_sides():
    column = Column('we"ird`name', "string")
    assert '`we"ird``name`' in fingerprint.spark_text(column)
    assert '"we""ird`name"' in fingerprint.pg_text(column).sql("postgres")


@pytest.mark.integration
def test_postgres_and_spark_fingerprint_every_row_alike(db, make_project):
    """Every type of the round-trip table, NULLs, unicode, extremes: one fingerprint per row on both sides."""
    db.execute(SETUP)
    for values in VALUES:
        db.execute(ROW.format(table=TABLE), values)
    db.execute(ROW.format(table=TABLE), (4, 1, 2, "-12.500000", float("nan"), float("-inf"), "x", "y", "z", None,
                                         "2024-02-29", "2024-02-29 23:59:59", "2024-02-29 23:59:59.5-08", None,
                                         "null", b"\x10", [None], [None, "ü"]))
    project = make_project([TABLE], [{"name": "everything", "refresh": "fast", "column_mapping": True,  # "small one"
                                      "query": f"SELECT * FROM {TABLE}"}])
    assert not [r for r in project.apply().builds if r.error]
    project.refresh()
    df = project.warehouse.spark.read.format("delta").load(project.config.view_location("everything"))
    columns = [Column(name, spark_type) for name, spark_type in df.dtypes if name != ROW_HASH_COLUMN]
    keys = [c for c in columns if c.name == "Id"]
    spark_rows = dict(df.selectExpr(*fingerprint.spark_hashes(columns, keys)).collect())
    query = fingerprint.pg_hashes(f"SELECT * FROM {TABLE}", columns, keys).sql("postgres")
    pg_rows = dict(db.execute(query))
    # The canonical texts themselves, for a failing column to show up by name.
    for column in columns:
        text = fingerprint.pg_text(column).sql("postgres")
        pg_texts = [r[0] for r in db.execute(f'SELECT {text} FROM {TABLE} AS v ORDER BY "Id"')]
        spark_texts = [r[0] for r in df.orderBy("Id").selectExpr(fingerprint.spark_text(column)).collect()]
        assert pg_texts == spark_texts, column
    assert len(spark_rows) == len(pg_rows) == 4
    assert spark_rows == pg_rows

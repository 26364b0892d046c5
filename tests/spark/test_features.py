"""Delta table features: which a view's table needs, and what moves an existing table to them
(pure: the statements, not their effect on Delta, which tests/spark/test_readers.py checks)."""

from __future__ import annotations

from mvlog.spark.features import (
    MISREADS,
    READS,
    REFUSES,
    TableFeatures,
    changes,
    for_columns,
    needs_column_mapping,
    readers,
    refusal,
)


def test_column_mapping_only_for_names_delta_cannot_store():
    assert not needs_column_mapping(["id", "Amount", "grüße", "_mvlog_row_hash", "a.b", "x-y", 'say"hi"'])
    for name in ("order total", "a,b", "f(x)", "k=v", "a;b", "tab\there", "{x}"):
        assert needs_column_mapping(["id", name]), name


def test_a_new_table_gets_exactly_the_features_asked_for():
    assert for_columns(["id", "n"], False, False).creation_options() == {
        "delta.enableChangeDataFeed": "false", "delta.enableDeletionVectors": "false"}
    assert for_columns(["id", "n n"], True, True).creation_options() == {
        "delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"}


def test_an_existing_table_is_moved_to_the_features_asked_for_drops_last():
    # A table as mvlog wrote views before: column mapping and deletion vectors on.
    old = {"properties": {"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"},
           "tableFeatures": ["columnMapping", "deletionVectors", "appendOnly", "invariants"]}
    found = changes(old, TableFeatures())
    assert [c.description for c in found] == ["deletion vectors off", "column mapping off"]
    assert all(c.drops for c in found) and "DROP FEATURE deletionVectors" in found[0].statement

    assert changes(old, TableFeatures(deletion_vectors=True, column_mapping=True)) == []
    plain = {"properties": {}, "tableFeatures": ["appendOnly", "invariants"]}
    assert changes(plain, TableFeatures()) == []
    found = changes(plain, TableFeatures(change_feed=True, deletion_vectors=True, column_mapping=True))
    assert [c.description for c in found] == ["column mapping on", "change data feed on", "deletion vectors on"]
    assert not any(c.drops for c in found)
    fed = {"properties": {"delta.enableChangeDataFeed": "true"}, "tableFeatures": ["changeDataFeed"]}
    assert [c.description for c in changes(fed, TableFeatures())] == ["change data feed off"]


def test_a_name_that_needs_column_mapping_is_refused_with_the_readers_and_the_ways_out():
    assert refusal(["id", "order_total"]) is None
    said = refusal(["id", "order total", "30 days"])
    assert said is not None and said.startswith("column 'order total' needs Delta column mapping")
    assert "(AS order_total)" in said and "column_mapping: true" in said and "as NULLs" in said


def test_a_reader_s_verdict_is_the_worst_its_table_s_features_give():
    plain = readers({"appendOnly", "invariants"})
    assert set(plain.values()) == {READS}
    mapped = readers({"columnMapping", "deletionVectors"})
    assert mapped["Spark (delta-spark)"] == READS
    assert mapped["deltalake to_pyarrow_table / to_pandas"] == f"{MISREADS} (columnMapping)"  # worse than refusing
    assert mapped["polars read_delta / scan_delta"] == f"{REFUSES} (columnMapping)"
    assert readers({"deletionVectors"})["polars read_delta / scan_delta"] == READS

"""Delta table features: which a view's table needs, and what moves an existing table to them
(pure: the statements, not their effect on Delta, which tests/spark/test_readers.py checks)."""

from __future__ import annotations

from mvlog.spark.features import TableFeatures, changes, for_columns, needs_column_mapping


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

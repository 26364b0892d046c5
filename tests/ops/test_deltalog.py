"""A Delta table's summary read from its ``_delta_log`` with pyarrow alone (mvlog.ops.deltalog)
agrees with what Delta's own readers say: ``deltalake`` for the tables it writes (appends, an
overwrite, deletes, partitions, checkpoints, log cleanup, on a local disk and on S3), and Spark's
``DESCRIBE DETAIL``/``DESCRIBE HISTORY`` for a table with deletion vectors, which ``deltalake``
refuses."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from mvlog.errors import WarehouseError
from mvlog.ops.deltalog import DeltaSummary, filesystem_for, read_summary


def rows(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "label": [f"row {i}" for i in range(start, start + n)], "part": [part] * n})


def deltalake_view(path: str, storage_options: dict[str, str] | None = None, history: bool = True) -> dict:
    """What ``deltalake`` says of the table, in DeltaSummary's terms (the last commit's with ``history``)."""
    table = DeltaTable(path, storage_options=storage_options)
    adds = pa.table(table.get_add_actions(flatten=True))
    view = {"version": table.version(), "files": len(table.file_uris()), "bytes": sum(adds["size_bytes"].to_pylist()),
            "columns": [(f.name, f.type.type) for f in table.schema().fields],  # primitive types only here
            "partition_columns": table.metadata().partition_columns}
    if history:
        newest = table.history(1)[0]
        view.update(last_commit=datetime.fromtimestamp(newest["timestamp"] / 1000, UTC),
                    last_operation=newest["operation"])
    return view


def summary_dict(summary: DeltaSummary | None, history: bool = True) -> dict:
    assert summary is not None
    return {k: getattr(summary, k) for k in ("version", "files", "bytes", "columns", "partition_columns")
            + (("last_commit", "last_operation") if history else ())}


def log_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir() if p.is_file())


def test_the_summary_follows_deltalake_through_appends_an_overwrite_deletes_and_a_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    steps = [lambda: write_deltalake(path, rows(0, 5), partition_by=["part"]),
             lambda: write_deltalake(path, rows(5, 5, "b"), mode="append"),
             lambda: write_deltalake(path, rows(10, 5, "c"), mode="append"),
             lambda: write_deltalake(path, rows(100, 7, "b"), mode="overwrite"),
             lambda: write_deltalake(path, rows(200, 3, "a"), mode="append"),
             lambda: DeltaTable(path).delete("id = 101"),  # rewrites a file
             lambda: DeltaTable(path).create_checkpoint(),
             lambda: write_deltalake(path, rows(300, 4, "d"), mode="append"),
             lambda: DeltaTable(path).delete("part = 'a'"),  # removes whole files
             lambda: write_deltalake(path, rows(400, 2, "e"), mode="append")]
    operations = []
    for step in steps:
        step()
        summary = read_summary(path)
        assert summary_dict(summary) == deltalake_view(path)
        operations.append(summary.last_operation)
    assert summary.partition_columns == ["part"] and summary.version == 8
    assert "DELETE" in operations and "WRITE" in operations
    assert "00000000000000000005.checkpoint.parquet" in log_files(tmp_path / "t")


def test_columns_have_the_type_names_of_delta_s_schema(tmp_path):
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    table = pa.table({"id": pa.array([1], pa.int64()), "n": pa.array([1], pa.int32()),
                      "amount": pa.array([Decimal("1.25")], pa.decimal128(12, 2)),
                      "at": pa.array([at], pa.timestamp("us", tz="UTC")), "ok": [True],
                      "tags": pa.array([[1, 2]], pa.list_(pa.int64())),
                      "point": pa.array([{"x": 1.5, "name": "p"}],
                                        pa.struct([("x", pa.float64()), ("name", pa.string())])),
                      "attrs": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))})
    write_deltalake(str(tmp_path), table)
    assert read_summary(str(tmp_path)).columns == [
        ("id", "long"), ("n", "integer"), ("amount", "decimal(12,2)"), ("at", "timestamp"), ("ok", "boolean"),
        ("tags", "array<long>"), ("point", "struct<x:double,name:string>"), ("attrs", "map<string,long>")]


def test_a_checkpoint_covers_the_commits_log_cleanup_removed_but_no_other_gap(tmp_path):
    path = str(tmp_path)
    for i in range(4):
        write_deltalake(path, rows(10 * i, 3), mode="append")
    DeltaTable(path).create_checkpoint()  # version 3
    DeltaTable(path).delete("id = 1")
    write_deltalake(path, rows(50, 2), mode="append")
    expected = deltalake_view(path)
    for version in range(4):  # what metadata cleanup deletes once the commits are old enough
        (tmp_path / "_delta_log" / f"{version:020d}.json").unlink()
    assert summary_dict(read_summary(path)) == expected
    (tmp_path / "_delta_log" / f"{4:020d}.json").unlink()
    with pytest.raises(WarehouseError, match="misses commit 4"):
        read_summary(path)


def test_the_newest_commit_in_the_checkpoint_gives_the_last_operation(tmp_path):
    path = str(tmp_path)
    write_deltalake(path, rows(0, 3))
    DeltaTable(path).delete("id = 0")
    DeltaTable(path).create_checkpoint()  # at the newest version: nothing to replay after it
    assert summary_dict(read_summary(path)) == deltalake_view(path)


def test_a_multi_part_checkpoint_is_read_and_an_incomplete_one_ignored(tmp_path):
    path = str(tmp_path)
    for i in range(3):
        write_deltalake(path, rows(10 * i, 3, part=str(i)), mode="append", partition_by=["part"])
    DeltaTable(path).create_checkpoint()  # version 2
    write_deltalake(path, rows(90, 1), mode="append")
    expected = deltalake_view(path)
    log = tmp_path / "_delta_log"
    classic = pq.read_table(log / f"{2:020d}.checkpoint.parquet")
    half = classic.num_rows // 2
    pq.write_table(classic.slice(0, half), log / f"{2:020d}.checkpoint.0000000001.0000000002.parquet")
    pq.write_table(classic.slice(half), log / f"{2:020d}.checkpoint.0000000002.0000000002.parquet")
    for name in [f"{2:020d}.checkpoint.parquet", *(f"{v:020d}.json" for v in range(3))]:
        (log / name).unlink()
    assert summary_dict(read_summary(path)) == expected
    # a checkpoint being written (one part of three) is not one yet: were it read, its garbage would fail
    (log / f"{3:020d}.checkpoint.0000000001.0000000003.parquet").write_bytes(b"not parquet")
    assert summary_dict(read_summary(path)) == expected


@pytest.mark.parametrize("beside_a_classic_one", [False, True])
def test_a_v2_checkpoint_with_its_files_in_a_sidecar(tmp_path, beside_a_classic_one):
    """A V2 checkpoint (``N.checkpoint.<uuid>.json``) names sidecar files in ``_delta_log/_sidecars``
    that hold its file actions; its ``remove`` lines are tombstones. Beside a classic checkpoint of
    the same version (as Delta writes for readers without V2), either one is read."""
    path = str(tmp_path)
    for i in range(3):
        write_deltalake(path, rows(10 * i, 4), mode="append")
    DeltaTable(path).delete("id = 11")  # version 3
    DeltaTable(path).create_checkpoint()
    write_deltalake(path, rows(70, 2), mode="append")
    expected = deltalake_view(path)
    log = tmp_path / "_delta_log"
    classic = pq.read_table(log / f"{3:020d}.checkpoint.parquet")
    (log / "_sidecars").mkdir()
    sidecar = f"{uuid.uuid4()}.parquet"
    files = classic.select(["add", "remove"]).filter(pa.compute.is_valid(classic["add"]))
    pq.write_table(files, log / "_sidecars" / sidecar)
    commit_zero = [json.loads(line) for line in (log / f"{0:020d}.json").read_text().splitlines()]
    removed = next(json.loads(line) for line in (log / f"{3:020d}.json").read_text().splitlines() if '"remove"' in line)
    top = [{"checkpointMetadata": {"version": 3}}, *(a for a in commit_zero if "protocol" in a or "metaData" in a),
           {"sidecar": {"path": sidecar, "sizeInBytes": (log / "_sidecars" / sidecar).stat().st_size,
                        "modificationTime": 0}},
           removed]
    (log / f"{3:020d}.checkpoint.{uuid.uuid4()}.json").write_text("\n".join(json.dumps(a) for a in top) + "\n")
    gone = [] if beside_a_classic_one else [f"{3:020d}.checkpoint.parquet"]
    for name in [*gone, *(f"{v:020d}.json" for v in range(3))]:
        (log / name).unlink()
    assert summary_dict(read_summary(path)) == expected


def test_files_are_identified_by_path_and_deletion_vector(tmp_path):
    """A DELETE with deletion vectors removes a file and adds it back with one, in either order
    within its commit. Without commitInfo, the last commit's time is its file's."""
    log = tmp_path / "_delta_log"
    log.mkdir()
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1, "sizeInBytes": 36,
          "cardinality": 2}
    commits = [
        [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                       "writerFeatures": ["deletionVectors"]}},
         {"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}},
                       "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {}}},
         {"add": {"path": "a.parquet", "size": 10, "partitionValues": {}, "modificationTime": 0, "dataChange": True}},
         {"add": {"path": "b.parquet", "size": 20, "partitionValues": {}, "modificationTime": 0, "dataChange": True}}],
        [{"add": {"path": "a.parquet", "size": 10, "partitionValues": {}, "modificationTime": 0, "dataChange": True,
                  "deletionVector": dv}},
         {"remove": {"path": "a.parquet", "dataChange": True}}],
        [{"remove": {"path": "b.parquet", "dataChange": True}}, {"txn": {"appId": "x", "version": 1}}],
    ]
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    os.utime(log / f"{2:020d}.json", (1_700_000_000, 1_700_000_000))
    summary = read_summary(str(tmp_path))
    assert (summary.version, summary.files, summary.bytes) == (2, 1, 10)
    assert summary.last_commit == datetime.fromtimestamp(1_700_000_000, UTC) and summary.last_operation is None
    assert summary.features == ["deletionVectors"]  # from the protocol


def test_features_come_from_the_protocol_and_from_properties_an_older_protocol_turns_on(tmp_path):
    """Column mapping needs reader version 2, which lists no features; a checkpoint holds the
    properties as a map (pairs, to pyarrow). Both say the table has it."""
    for name, configuration, expected in (("fed", {"delta.enableChangeDataFeed": "true"}, ["changeDataFeed"]),
                                          ("mapped", {"delta.columnMapping.mode": "name"}, ["columnMapping"])):
        path = str(tmp_path / name)
        write_deltalake(path, rows(0, 3), mode="append")
        assert read_summary(path).features == []
        log = tmp_path / name / "_delta_log"
        metadata = next(json.loads(line)["metaData"] for line in (log / f"{0:020d}.json").read_text().splitlines()
                        if '"metaData"' in line)
        (log / f"{1:020d}.json").write_text(
            json.dumps({"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}) + "\n"
            + json.dumps({"metaData": {**metadata, "configuration": configuration}}) + "\n")
        assert read_summary(path).features == expected
    DeltaTable(str(tmp_path / "fed")).create_checkpoint()  # (deltalake checkpoints no fake column mapping)
    write_deltalake(str(tmp_path / "fed"), rows(10, 1), mode="append")
    for version in (0, 1):
        (tmp_path / "fed" / "_delta_log" / f"{version:020d}.json").unlink()
    assert read_summary(str(tmp_path / "fed")).features == ["changeDataFeed"]


def test_no_table_is_none(tmp_path):
    assert read_summary(str(tmp_path / "missing")) is None
    assert read_summary(str(tmp_path)) is None
    (tmp_path / "_delta_log").mkdir()
    assert read_summary(str(tmp_path)) is None


def test_a_file_uri_reads_as_its_path_and_the_summary_as_json(tmp_path):
    write_deltalake(str(tmp_path), rows(0, 3))
    summary = read_summary(str(tmp_path))
    assert read_summary(tmp_path.as_uri()) == summary == read_summary(f"file:{tmp_path}/")
    document = json.loads(json.dumps(summary.to_json()))
    assert document["columns"] == [["id", "long"], ["label", "string"], ["part", "string"]]
    assert datetime.fromisoformat(document["last_commit"]) == summary.last_commit
    assert (document["version"], document["files"], document["last_operation"]) == (0, 1, "WRITE")


def test_filesystem_for_mirrors_the_s3a_settings():
    assert filesystem_for("/srv/warehouse", {}) is None
    assert filesystem_for("file:///srv/warehouse", {}) is None
    conf = {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000", "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.access.key": "key", "spark.hadoop.fs.s3a.secret.key": "secret",
            "spark.hadoop.fs.s3a.bucket.other.endpoint": "minio.internal:9443",
            "spark.hadoop.fs.s3a.bucket.other.path.style.access": "false"}
    options = filesystem_for("s3a://lake/views", conf).__reduce__()[1][0]
    assert options["endpoint_override"] == "127.0.0.1:9000" and options["scheme"] == "http"
    assert (options["access_key"], options["secret_key"], options["region"]) == ("key", "secret", "us-east-1")
    assert options["force_virtual_addressing"] is False
    other = filesystem_for("s3a://other", conf).__reduce__()[1][0]  # a bucket's own settings win
    assert (other["endpoint_override"], other["scheme"], other["force_virtual_addressing"]) == (
        "minio.internal:9443", "https", True)
    with pytest.raises(WarehouseError, match="abfss://"):
        filesystem_for("abfss://c@account.dfs.core.windows.net/w", {})
    with pytest.raises(WarehouseError, match="filesystem_for"):
        read_summary("s3a://lake/views/v")


def test_a_table_on_s3_reads_through_the_s3a_settings(tmp_path):
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        endpoint = "http://{}:{}".format(*server.get_host_and_port())
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k",
                     aws_secret_access_key="s").create_bucket(Bucket="lake")
        options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                   "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true", "AWS_REGION": "us-east-1"}
        write_deltalake("s3://lake/w/v", rows(0, 3), partition_by=["part"], storage_options=options)
        write_deltalake("s3://lake/w/v", rows(3, 3, "b"), mode="append", storage_options=options)
        DeltaTable("s3://lake/w/v", storage_options=options).create_checkpoint()
        DeltaTable("s3://lake/w/v", storage_options=options).delete("id = 4")
        conf = {"spark.hadoop.fs.s3a.endpoint": endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.access.key": "k", "spark.hadoop.fs.s3a.secret.key": "s",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false"}
        filesystem = filesystem_for("s3a://lake/w", conf)
        summary = read_summary("s3a://lake/w/v", filesystem)
        # deltalake's history() hangs on moto (a list request times out after 180 s): the last commit by hand
        assert summary_dict(summary, history=False) == deltalake_view("s3://lake/w/v", options, history=False)
        assert summary.version == 2 and summary.last_operation == "DELETE" and summary.files == 2
        assert read_summary("s3a://lake/w/none", filesystem) is None
    finally:
        server.stop()


@pytest.mark.integration
def test_a_table_spark_writes_with_deletion_vectors_and_checkpoints(spark, tmp_path):
    """MERGEs and DELETEs that mark rows deleted in files (deletion vectors) instead of rewriting
    them, checkpoints (classic, and V2 with sidecars on a second table): as Spark describes them."""
    for policy in ("classic", "v2"):
        location = str(tmp_path / policy)
        spark.range(0, 60).selectExpr("id", "id % 3 AS grp", "cast(id AS decimal(12,2)) AS amount") \
            .repartition(3).write.format("delta").partitionBy("grp") \
            .option("delta.enableDeletionVectors", "true").option("delta.checkpointInterval", "3") \
            .option("delta.checkpointPolicy", policy).save(location)
        table = f"delta.`{location}`"
        spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0").collect()
        for round_ in range(2):  # then a checkpoint (version 3), and a commit after it
            spark.range(50, 70).selectExpr(f"id + {round_} AS id", "id % 3 AS grp",
                                           "cast(id AS decimal(12,2)) AS amount").createOrReplaceTempView("changes")
            spark.sql(f"MERGE INTO {table} t USING changes s ON t.id = s.id "
                      "WHEN MATCHED AND s.amount > 60 THEN DELETE WHEN MATCHED THEN UPDATE SET amount = s.amount + 1 "
                      "WHEN NOT MATCHED THEN INSERT (id, grp, amount) VALUES (s.id, s.grp, s.amount)").collect()
        spark.sql(f"DELETE FROM {table} WHERE id = 5").collect()
        detail = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]
        history = spark.sql(f"DESCRIBE HISTORY {table}").collect()[0]
        log = Path(location) / "_delta_log"
        checkpoints = sorted(p.name for p in log.glob("[0-9]*.checkpoint.*"))
        if policy == "v2":  # a JSON top-level file naming its sidecar, which holds the files
            assert [len(name.split(".")) for name in checkpoints] == [4] and list(log.glob("_sidecars/[0-9]*.parquet"))
        else:
            assert checkpoints == [f"{3:020d}.checkpoint.parquet"]
        summary = read_summary(location)
        assert (summary.version, summary.files, summary.bytes) == (history["version"], detail["numFiles"],
                                                                   detail["sizeInBytes"]), (policy, log)
        assert summary.last_operation == history["operation"] == "DELETE"
        # the history's time is the commit file's (no in-commit timestamps), a moment after commitInfo's
        assert abs((summary.last_commit - history["timestamp"].replace(tzinfo=UTC)).total_seconds()) < 5
        assert summary.columns == [("id", "long"), ("grp", "long"), ("amount", "decimal(12,2)")]
        assert summary.partition_columns == ["grp"]
        actions = [json.loads(line) for v in range(1, 5) for line in (log / f"{v:020d}.json").read_text().splitlines()]
        # a file that had a deletion vector removed, and added back with another one
        assert any(a.get("remove", {}).get("deletionVector") for a in actions), actions
        for version in range(4):  # the checkpoint covers these: as after log cleanup
            (log / f"{version:020d}.json").unlink()
        assert read_summary(location) == summary

"""PostgreSQL types and awkward identifiers round-trip exactly into Delta (DESIGN.md section 6)."""

from __future__ import annotations

import json
import struct
from datetime import UTC

import pytest
from conftest import assert_view_matches

pytestmark = pytest.mark.integration

TABLE = '"Mixed Schema"."Odd ""Table"" name"'
SETUP = f"""
CREATE SCHEMA "Mixed Schema";
CREATE TABLE {TABLE} (
    "Id"          integer PRIMARY KEY,
    "small one"   smallint,
    "q""uote"     bigint,
    amount        numeric(20,6),
    ratio         real,
    score         double precision,
    "Text"        text,
    code          varchar(10),
    padded        char(5),
    ok            boolean,
    day           date,
    at_local      timestamp,
    at_utc        timestamptz,
    uid           uuid,
    doc           jsonb,
    raw           bytea,
    tags          integer[],
    names         text[]
);
"""
ROW = """INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"""
VALUES = [
    (1, 32767, 9223372036854775807, "12345678901234.123456", 0.1, 1e-300, "Grüße, 世界 🚀", "abc", "ab",
     True, "2026-02-28", "2026-03-01 12:34:56.789012", "2026-03-01 12:34:56.789012+05:30",
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", '{"k": [1, 2.5, null], "ü": "x"}', b"\x00\x01\xff", [1, None, 3],
     ["a b", 'q"uote']),
    (2, -32768, -1, "-0.000001", -3.5, 2.0 ** 60, "", "", "", False, "0001-01-01", "1970-01-01 00:00:00",
     "1999-12-31 23:59:59.999999+00", "00000000-0000-0000-0000-000000000000", "[]", b"", [], []),
    (3,) + (None,) * 17,
]


def normalize_pg(value, column):
    if value is None:
        return None
    if column == "ratio":  # real: compare as the 32-bit float both sides hold
        return struct.unpack("f", struct.pack("f", value))[0]
    if column == "at_utc":
        return value.astimezone(UTC).replace(tzinfo=None)
    if column == "doc":
        return value  # psycopg2 parses jsonb
    if column == "raw":
        return bytes(value)
    return value


def normalize_delta(value, column):
    if value is None:
        return None
    if column == "doc":
        return json.loads(value)
    if column == "raw":
        return bytes(value)
    if column == "uid":
        return str(value)
    return value


def test_types_and_quoted_identifiers_round_trip(db, make_project):
    db.execute(SETUP)
    for values in VALUES[:2]:
        db.execute(ROW.format(table=TABLE), values)
    project = make_project(
        ['"Mixed Schema"."Odd ""Table"" name"'],
        # Names with spaces: the views allow column mapping (Spark reads them right; see test_readers).
        [{"name": "everything", "refresh": "fast", "column_mapping": True, "query": f"SELECT * FROM {TABLE}"},
         {"name": "renamed", "refresh": "fast", "column_mapping": True,
          "query": f'SELECT t."Text" AS "Ünïcode ""label""", t.amount * 2 AS "double amount", t.ok '
                   f'FROM {TABLE} AS t WHERE t."Id" > 0'}],
    )
    assert not [r for r in project.apply().builds if r.error]
    db.execute(ROW.format(table=TABLE), VALUES[2])
    db.execute(f'UPDATE {TABLE} SET "Text" = %s, amount = amount + 0.000001 WHERE "Id" = 1', ("ß→∑ 'quoted'",))
    results = {r.view: r for r in project.refresh()}
    assert all(r.method == "fast" and not r.error for r in results.values()), results

    columns = [r[0] for r in db.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum",
        (TABLE,))]
    expected = sorted(
        (tuple(normalize_pg(v, c) for v, c in zip(row, columns)) for row in db.execute(f"SELECT * FROM {TABLE}")),
        key=lambda r: r[0],
    )
    spark = project.warehouse.spark
    df = spark.read.format("delta").load(project.config.view_location("everything"))
    assert df.columns == [*columns, "_mvlog_row_hash"]  # the row hash: mvlog's, after the query's columns
    actual = sorted((tuple(normalize_delta(v, c) for v, c in zip(row, columns)) for row in df.collect()),
                    key=lambda r: r[0])
    assert actual == expected

    types = dict(df.dtypes)
    assert types["amount"] == "decimal(20,6)"
    assert types["at_local"] == "timestamp_ntz" and types["at_utc"] == "timestamp"
    assert types["raw"] == "binary" and types["tags"] == "array<int>" and types["small one"] == "smallint"
    assert types["uid"] == "string" and types["doc"] == "string"

    renamed = spark.read.format("delta").load(project.config.view_location("renamed"))
    assert [c for c in renamed.columns if not c.startswith("_mvlog_")] == ['Ünïcode "label"', "double amount", "ok"]
    assert "_mvlog_Id" in renamed.columns  # the key the query does not output is kept hidden
    assert_view_matches(project, "everything")
    assert_view_matches(project, "renamed")

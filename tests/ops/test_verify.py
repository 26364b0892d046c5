"""mvlog verify: a view corrupted behind mvlog's back is caught key by key, pending changes are not
mismatches, and --repair makes the view exact again."""

from __future__ import annotations

import pytest
from conftest import assert_view_matches, assert_views_match, refresh_ok

from mvlog.commands.cli import main
from mvlog.spark.sparksql import delta_table

pytestmark = pytest.mark.integration

SETUP = """
CREATE TABLE item (
    id     integer PRIMARY KEY,
    label  text,
    amount numeric(12,3),
    at     timestamptz,
    flag   boolean
);
INSERT INTO item
SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE 'Grüße ' || (i % 5) || ' 世界' END,
       CASE WHEN i % 11 = 0 THEN NULL ELSE i * 1.125 END,
       timestamptz '2026-01-01 00:00:00.000001+00' + i * interval '1 hour 1 microsecond',
       CASE WHEN i % 13 = 0 THEN NULL ELSE i % 2 = 0 END
FROM generate_series(1, 400) AS i;
"""
VIEWS = [
    {"name": "items", "refresh": "fast", "query": "SELECT id, label, amount, at, flag FROM item WHERE id % 10 <> 9"},
    {"name": "per_label", "refresh": "fast",
     "query": "SELECT label, count(*) AS n, sum(amount) AS total, max(at) AS latest FROM item GROUP BY label"},
]


@pytest.fixture
def project(db, make_project):
    db.execute(SETUP)
    project = make_project(["item"], VIEWS)
    assert not [r for r in project.apply().builds if r.error]
    return project


def corrupt(project, view: str, *statements: str) -> None:
    spark = project.warehouse.spark
    table = delta_table(project.config.view_location(view))
    for statement in statements:
        spark.sql(statement.format(t=table)).collect()


def mismatched_keys(result, column: str) -> set:
    return {m.key[column] for m in result.mismatches}


def test_verify_finds_exactly_the_corrupted_keys_and_repair_mends_them(project, db):
    clean = {r.view: r for r in project.verify(sample=None)}
    assert {r.status for r in clean.values()} == {"ok"}, [(r.view, r.status, r.reason) for r in clean.values()]
    assert clean["items"].rows_compared == 360 and clean["per_label"].rows_compared == 6

    corrupt(project, "items",
            "DELETE FROM {t} WHERE id = 3",                                        # a row goes missing
            "UPDATE {t} SET amount = amount + 0.001 WHERE id = 5",                 # a numeric changes
            "UPDATE {t} SET at = at + INTERVAL 1 MICROSECOND WHERE id = 6",        # a timestamptz moves by 1 µs
            "UPDATE {t} SET label = 'Grüße 2 世界!' WHERE id = 8",                  # unicode text
            "UPDATE {t} SET flag = NULL WHERE id = 10",                            # a value becomes NULL
            "UPDATE {t} SET amount = 1 WHERE id = 22",                             # a NULL gets a value
            "INSERT INTO {t} (id, label, amount, at, flag) "                       # a row too many
            "VALUES (1000, 'extra', 1.000, current_timestamp(), true)")
    corrupt(project, "per_label", "UPDATE {t} SET n = n + 1 WHERE label IS NULL")
    # Writers keep writing: changes after the last refresh are pending, not mismatches.
    db.execute("UPDATE item SET amount = amount + 1 WHERE id IN (12, 13)")
    db.execute("DELETE FROM item WHERE id = 16")

    full = {r.view: r for r in project.verify(sample=None)}
    assert full["items"].status == "mismatch"
    assert mismatched_keys(full["items"], "id") == {"3", "5", "6", "8", "10", "22", "1000"}
    assert full["items"].pending_keys == 3
    by_key = {m.key["id"]: m for m in full["items"].mismatches}
    assert by_key["3"].delta is None and by_key["3"].source["id"] == "3"
    assert by_key["1000"].source is None and by_key["1000"].delta["label"] == "extra"
    assert by_key["8"].delta["label"] == "Grüße 2 世界!" and by_key["8"].source["label"] == "Grüße 3 世界"
    assert by_key["10"].delta["flag"] is None and by_key["10"].source["flag"] == "t"
    # Pending label groups (12, 13, 16 change three groups) are left out; the NULL group is caught.
    assert full["per_label"].pending_keys == 3
    assert full["per_label"].status == "mismatch" and mismatched_keys(full["per_label"], "label") == {None}

    # A sample as large as the view compares every row: the same keys.
    sampled = {r.view: r for r in project.verify(["items"], sample=10_000)}
    assert mismatched_keys(sampled["items"], "id") == {"3", "5", "6", "8", "10", "22", "1000"}

    repaired = {r.view: r for r in project.verify(sample=None, repair=True)}
    assert repaired["items"].status == "repaired" and repaired["items"].repaired == 7
    assert project.history("items")[0].reason.startswith("verify --repair: 7 mismatched keys")
    after = {r.view: r for r in project.verify(sample=None)}
    assert {r.status for r in after.values()} == {"ok"}, after
    refresh_ok(project)
    assert_views_match(project, ("items", "per_label"))


def test_a_numeric_computed_past_the_column_scale_is_compared_at_that_scale(db, make_project):
    """avg() of a numeric has more fractional digits than the view's decimal(38,18) holds: verify
    compares at the view's scale, as the JDBC read rounds; a difference in the kept digits is found."""
    db.execute(SETUP)
    query = "SELECT id % 7 AS g, avg(amount) / 1000000 AS mean, sum(amount) / 3 AS third FROM item GROUP BY id % 7"
    project = make_project(["item"], [{"name": "means", "refresh": "fast", "query": query}])
    assert not [r for r in project.apply().builds if r.error]
    scale = db.execute(f"SELECT max(greatest(scale(mean), scale(third))) FROM ({query}) AS q")[0][0]
    assert scale > 18  # the test means something only if PostgreSQL has digits Delta does not
    assert [r.status for r in project.verify(sample=None)] == ["ok"]

    corrupt(project, "means", "UPDATE {t} SET mean = mean + 0.000000000000000001 WHERE g = 3")
    (result,) = project.verify(sample=None)
    assert result.status == "mismatch" and mismatched_keys(result, "g") == {"3"}


def test_cli_exit_code_and_json(project, capsys):
    config = str(project.config.base_dir / "mvlog.yaml")
    assert main(["-q", "-c", config, "verify", "--full"]) == 0
    corrupt(project, "items", "UPDATE {t} SET label = NULL WHERE id = 1")
    assert main(["-q", "-c", config, "verify", "items", "--json"]) == 1
    out, err = capsys.readouterr()
    assert '"status": "mismatch"' in out and "Error: view items differs from its query in 1 keys" in err


def test_verify_and_repair_over_spark_connect(db, make_project):
    """The same comparison and repair on a Spark Connect server (``spark.remote``)."""
    db.execute(SETUP)
    project = make_project(["item"], VIEWS[:1], spark_mode="connect")
    assert not [r for r in project.apply().builds if r.error]
    assert [r.status for r in project.verify(sample=None)] == ["ok"]
    corrupt(project, "items", "DELETE FROM {t} WHERE id = 4", "UPDATE {t} SET amount = 0 WHERE id = 7")
    db.execute("UPDATE item SET label = 'pending' WHERE id = 15")
    (found,) = project.verify(sample=None)
    assert found.status == "mismatch" and mismatched_keys(found, "id") == {"4", "7"} and found.pending_keys == 1
    (repaired,) = project.verify(sample=None, repair=True)
    assert repaired.status == "repaired" and repaired.repaired == 2
    assert [r.status for r in project.verify(sample=None)] == ["ok"]
    refresh_ok(project)
    assert_view_matches(project, "items")

"""Every TRUNCATE reaches the logs under both capture kinds (#48, item 1), PostgreSQL only.

Under logical capture PostgreSQL publishes a TRUNCATE of a partitioned table through its root,
but not one aimed at a partition (``publish_via_partition_root``): the log's TRUNCATE-only
statement trigger, on the table and on every partition, writes the 'T' row in the TRUNCATE's
own transaction. Every form is checked: a partition, a sub-partition, the DEFAULT partition,
``TRUNCATE … CASCADE`` and one statement naming several tables. No views, so no Spark.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE ev (id int, day date, v int, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE ev_a PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
CREATE TABLE ev_b PARTITION OF ev FOR VALUES FROM ('2026-02-01') TO ('2026-03-01') PARTITION BY HASH (id);
CREATE TABLE ev_b0 PARTITION OF ev_b FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE ev_b1 PARTITION OF ev_b FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE ev_d PARTITION OF ev DEFAULT;
INSERT INTO ev SELECT g, date '2026-01-01' + (g % 120), g FROM generate_series(1, 600) AS g;
CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent (id));
CREATE TABLE other (id int PRIMARY KEY);
INSERT INTO parent SELECT generate_series(1, 10);
INSERT INTO child SELECT g, g % 10 + 1 FROM generate_series(1, 30) AS g;
INSERT INTO other SELECT generate_series(1, 5);
"""
TABLES = ["ev", "parent", "child", "other"]
# Each statement, and the tables whose logs must hold a new TRUNCATE row after it.
STATEMENTS = [
    ("TRUNCATE ev_a", {"ev"}),  # a partition
    ("TRUNCATE ev_b1", {"ev"}),  # a sub-partition
    ("TRUNCATE ev_d", {"ev"}),  # the DEFAULT partition
    ("TRUNCATE ev_b", {"ev"}),  # a partitioned partition
    ("TRUNCATE parent CASCADE", {"parent", "child"}),
    ("TRUNCATE other, ev_a", {"other", "ev"}),  # several tables in one statement
    ("TRUNCATE ev", {"ev"}),  # the root (published as well: one 'T' row or two)
]


def truncations(db, table: str) -> int:
    ((log,),) = db.execute("SELECT log_name FROM mvlog.logs WHERE table_name = %s", (table,))
    return db.execute(f"""SELECT count(*) FROM mvlog."{log}" WHERE "dmltype$$" = 'T'""")[0][0]


@pytest.mark.parametrize("capture", ["trigger", "logical"])
def test_every_truncate_reaches_the_logs(db, make_project, capture):
    """Each form of TRUNCATE leaves a 'T' row in the log of every table it emptied, and in no other."""
    db.execute(SCHEMA)
    project = make_project([{"table": t, "capture": capture} for t in TABLES], [])
    project.apply()
    for statement, emptied in STATEMENTS:
        before = {t: truncations(db, t) for t in TABLES}
        db.execute(statement)
        if capture == "logical":
            project.logs.decoding.reach_now(30)  # what was published (a root's TRUNCATE) is written too
        after = {t: truncations(db, t) for t in TABLES}
        assert {t for t in TABLES if after[t] > before[t]} == emptied, statement


def test_a_logical_log_keeps_only_its_truncate_trigger_on_every_partition(db, make_project):
    """Writers of a logically captured table run no mvlog trigger but on TRUNCATE: the table and
    each member of its partition tree, including one created later, carry that one trigger."""
    db.execute(SCHEMA)
    project = make_project([{"table": "ev", "capture": "logical"}], [])
    project.apply()
    db.execute("CREATE TABLE ev_c PARTITION OF ev FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')")
    rows = db.execute("SELECT c.relname, array_agg(g.tgname::text ORDER BY g.tgname) "
                      "FROM pg_partition_tree('ev') AS t JOIN pg_class AS c ON c.oid = t.relid "
                      "LEFT JOIN pg_trigger AS g ON g.tgrelid = t.relid AND g.tgname LIKE 'mvlog$%' "
                      "GROUP BY c.relname ORDER BY 1")
    assert rows == [(name, ["mvlog$truncate"]) for name in
                    ("ev", "ev_a", "ev_b", "ev_b0", "ev_b1", "ev_c", "ev_d")]
    before = truncations(db, "ev")
    db.execute("TRUNCATE ev_c")
    assert truncations(db, "ev") == before + 1

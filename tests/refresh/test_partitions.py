"""Partitioned tables: a log on the parent covers every partition, whichever table a write names;
ATTACH, DETACH and DROP of partitions reach the views; tables mvlog cannot log exactly are refused."""

from __future__ import annotations

import psycopg2
import pytest
from conftest import assert_view_matches, assert_views_match, examples, refresh_ok, varied
from hypothesis import given, settings
from hypothesis import strategies as st

from mvlog.errors import ConfigError

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL, segment text);
CREATE TABLE events (
    id          integer NOT NULL,
    day         integer NOT NULL,
    customer_id integer,
    val         numeric(10,2),
    kind        text,
    PRIMARY KEY (id, day)
) PARTITION BY RANGE (day);
CREATE TABLE events_01 PARTITION OF events FOR VALUES FROM (0) TO (10);
CREATE TABLE events_02 PARTITION OF events FOR VALUES FROM (10) TO (20) PARTITION BY RANGE (day);
CREATE TABLE events_02a PARTITION OF events_02 FOR VALUES FROM (10) TO (15);
CREATE TABLE events_02b PARTITION OF events_02 FOR VALUES FROM (15) TO (20);
CREATE TABLE events_def PARTITION OF events DEFAULT;
INSERT INTO customers VALUES (1, 'ann', 'retail'), (2, 'bob', 'retail'), (3, 'cy', 'corp'), (4, 'di', NULL);
"""

VIEWS = [
    {"name": "ev_simple", "refresh": "fast",
     "query": "SELECT id, day, val * 2 AS val2, kind FROM events WHERE kind IS DISTINCT FROM 'x'"},
    {"name": "ev_join", "refresh": "fast",
     "query": "SELECT e.id, e.day, e.val, c.name, c.segment FROM events e JOIN customers c ON c.id = e.customer_id"},
    {"name": "ev_agg", "refresh": "fast",
     "query": "SELECT c.segment, e.kind, count(*) AS n, sum(e.val) AS total "
              "FROM events e JOIN customers c ON c.id = e.customer_id GROUP BY c.segment, e.kind"},
]

# Which table of the tree holds a day, from the leaf up (a write may name any of them).
ATTACHED_RANGE = (100, 110)  # events_new: created outside the tree, loaded, then attached


def tables_for(day: int) -> list[str]:
    if 0 <= day < 10:
        return ["events_01", "events"]
    if 10 <= day < 15:
        return ["events_02a", "events_02", "events"]
    if 15 <= day < 20:
        return ["events_02b", "events_02", "events"]
    if ATTACHED_RANGE[0] <= day < ATTACHED_RANGE[1]:
        return ["events_new", "events"]
    return ["events_def", "events"]


ids = st.integers(1, 12)
days = st.sampled_from([1, 5, 11, 14, 16, 19, 25, 103])
level = st.integers(0, 2)  # 0: the leaf, 1: its parent, 2: the root (clamped to the tree's depth)
values = st.fixed_dictionaries({
    "customer_id": st.none() | st.integers(1, 5),
    "val": st.none() | st.decimals(min_value=-100, max_value=100, places=2, allow_nan=False, allow_infinity=False),
    "kind": st.none() | st.sampled_from(["a", "b", "x"]),
})
single_ops = st.one_of(
    st.tuples(st.just("insert"), level, ids, days, values),
    st.tuples(st.just("update"), level, ids, days, values),
    st.tuples(st.just("delete"), level, ids, days),
    st.tuples(st.just("move"), ids, days, days),  # a new day through the parent: across partitions
    st.tuples(st.just("bump"), st.sampled_from(["events_02", "events_02b", "events_def", "events_01"])),
    st.tuples(st.just("segment"), st.integers(1, 4), st.sampled_from(["retail", "corp", None])),
    st.tuples(st.just("detach"), st.sampled_from(["events_01", "events_new"])),
    st.tuples(st.just("attach"), st.sampled_from(["events_01", "events_new"])),
)
operations = st.lists(
    st.one_of(single_ops, st.tuples(st.just("txn"), st.lists(single_ops, min_size=2, max_size=4)),
              st.just(("refresh",))),
    min_size=4, max_size=16,
).filter(varied)

BOUNDS = {"events_01": "FROM (0) TO (10)", "events_new": f"FROM ({ATTACHED_RANGE[0]}) TO ({ATTACHED_RANGE[1]})"}


def run_op(cur, op) -> None:
    """Apply one operation; one PostgreSQL refuses (a key taken, a row outside the named
    partition, a partition attached twice) is skipped."""
    kind = op[0]
    cur.execute("SAVEPOINT op")
    try:
        if kind in ("insert", "update", "delete"):
            tables = tables_for(op[3])
            table = tables[min(op[1], len(tables) - 1)]
            if kind == "insert":
                v = op[4]
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)",
                            (op[2], op[3], v["customer_id"], v["val"], v["kind"]))
            elif kind == "update":
                v = op[4]
                cur.execute(f"UPDATE {table} SET customer_id = %s, val = %s, kind = %s WHERE id = %s",
                            (v["customer_id"], v["val"], v["kind"], op[2]))
            else:
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (op[2],))
        elif kind == "move":
            cur.execute("UPDATE events SET day = %s WHERE id = %s AND day = %s", (op[3], op[1], op[2]))
        elif kind == "bump":
            cur.execute(f"UPDATE {op[1]} SET val = val + 1")
        elif kind == "segment":
            cur.execute("UPDATE customers SET segment = %s WHERE id = %s", (op[2], op[1]))
        elif kind == "detach":
            cur.execute(f"ALTER TABLE events DETACH PARTITION {op[1]}")
        elif kind == "attach":
            cur.execute(f"ALTER TABLE events ATTACH PARTITION {op[1]} FOR VALUES {BOUNDS[op[1]]}")
        cur.execute("RELEASE SAVEPOINT op")
    except (psycopg2.errors.UniqueViolation, psycopg2.errors.CheckViolation,
            psycopg2.errors.ObjectNotInPrerequisiteState, psycopg2.errors.WrongObjectType,
            psycopg2.errors.UndefinedTable, psycopg2.errors.InvalidObjectDefinition):
        cur.execute("ROLLBACK TO SAVEPOINT op")


@pytest.fixture
def events_project(db, make_project, request):
    db.execute(SCHEMA)
    project = make_project(["public.events", "public.customers"], VIEWS, spark_mode=getattr(request, "param", "local"))
    project.apply()
    return project


def reset(db) -> None:
    """The tree as SCHEMA made it, events_new loaded and standing apart, every table empty of events."""
    tree = {r[0] for r in db.execute("SELECT relid::regclass::text FROM pg_partition_tree('events')")}
    if "events_01" not in tree:
        db.execute("DELETE FROM events_01")
        db.execute("DELETE FROM events WHERE day >= 0 AND day < 10")  # rows the default took meanwhile
        db.execute(f"ALTER TABLE events ATTACH PARTITION events_01 FOR VALUES {BOUNDS['events_01']}")
    if "events_new" in tree:
        db.execute("ALTER TABLE events DETACH PARTITION events_new")
    db.execute("DELETE FROM events")
    db.execute("CREATE TABLE IF NOT EXISTS events_new (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    db.execute("DELETE FROM events_new")
    db.execute("ALTER TABLE events_new DROP CONSTRAINT IF EXISTS events_new_pkey")
    db.execute("ALTER TABLE events_new ADD PRIMARY KEY (id, day)")
    db.execute("INSERT INTO events_new VALUES (1, 101, 1, 7.5, 'a'), (2, 102, 3, NULL, 'b'), (13, 104, NULL, 1, NULL)")


@pytest.mark.slow
@settings(max_examples=examples(1))
@given(ops=operations)
def test_random_dml_on_parent_and_partitions_with_attach_and_detach(events_project, db, ops):
    random_dml_then_refresh(events_project, db, ops)


def random_dml_then_refresh(events_project, db, ops) -> None:
    reset(db)
    refresh_ok(events_project)
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            for op in ops:
                if op[0] == "refresh":
                    conn.commit()
                    check(events_project)
                    continue
                for inner in (op[1] if op[0] == "txn" else [op]):
                    run_op(cur, inner)
                conn.commit()
    finally:
        conn.close()
    check(events_project)


def check(project) -> None:
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}, {r.view: r.reason for r in results.values()}
    assert_views_match(project, VIEWS)


# Under logical capture the same writes are the contract suite's (tests/postgres/capture/test_contract.py:
# partition TRUNCATE, DETACH and ATTACH) and test_truncate.py's.
@pytest.mark.parametrize("events_project", ["local"], indirect=True)
def test_writes_named_to_partitions_attach_and_detach_reach_the_views(events_project, db):
    """The issue's scenario, fixed: each kind of write the parent's triggers alone would miss."""
    reset(db)
    db.execute("INSERT INTO events VALUES (1, 1, 1, 10, 'a'), (2, 12, 2, 20, 'b'), (3, 25, 3, 30, 'a')")
    check(events_project)
    db.execute("INSERT INTO events_02b VALUES (4, 16, 1, 40, 'a')")      # a leaf
    db.execute("UPDATE events_01 SET val = val + 100")                    # a leaf
    db.execute("UPDATE events_02 SET kind = 'x' WHERE id = 2")            # a partitioned partition
    db.execute("DELETE FROM events_def WHERE id = 3")                     # the default partition
    check(events_project)
    keys = lambda: db.execute('SELECT count(*) FROM mvlog."' + log_name(db) + '"')[0][0]  # noqa: E731
    before = keys()
    db.execute("INSERT INTO events VALUES (5, 3, 1, 1, 'a')")            # through the parent: logged once
    if events_project.logs.decoding.exists():  # logical capture: logged once the capture has run
        events_project.logs.decoding.catch_up()
    assert keys() == before + 1
    db.execute("ALTER TABLE events ATTACH PARTITION events_new FOR VALUES FROM (100) TO (110)")
    check(events_project)
    db.execute("ALTER TABLE events DETACH PARTITION events_01")
    db.execute("UPDATE events_01 SET val = 0")                            # no longer part of events
    check(events_project)
    db.execute("CREATE TABLE events_03 PARTITION OF events FOR VALUES FROM (30) TO (40)")
    db.execute("INSERT INTO events_03 VALUES (7, 31, 2, 5, 'b')")
    check(events_project)
    status = {log["table"]: log for log in events_project.status()["logs"]}
    assert status["public.events"]["partitions"] == ["public.events_02", "public.events_02a", "public.events_02b",
                                                     "public.events_03", "public.events_def", "public.events_new"]


def log_name(db) -> str:
    return db.execute("SELECT log_name FROM mvlog.logs WHERE table_name = 'events'")[0][0]


def test_dropping_a_partition_with_rows_refreshes_views_completely(db, make_project):
    db.execute(SCHEMA)
    db.execute("INSERT INTO events VALUES (1, 1, 1, 10, 'a'), (2, 12, 2, 20, 'b'), (3, 25, 3, 30, 'a')")
    project = make_project(["events", "customers"], [
        {"name": "v_force", "query": VIEWS[0]["query"]},
        {"name": "v_fast", "refresh": "fast", "query": "SELECT id, day FROM events"},
    ])
    project.apply()
    db.execute("DROP TABLE events_02a")
    results = {r.view: r for r in project.refresh()}
    assert (results["v_force"].method == "complete"
            and "a partition of public.events was dropped" in results["v_force"].reason)
    assert (results["v_fast"].error
            and "cannot be fast-refreshed: a partition of public.events was dropped" in results["v_fast"].error)
    refresh_ok(project, ["v_fast"], complete=True)
    assert_views_match(project, ("v_force", "v_fast"))
    # DETACH first, then DROP: exact key by key, so the views stay fast.
    db.execute("ALTER TABLE events DETACH PARTITION events_01")
    db.execute("DROP TABLE events_01")
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    assert_views_match(project, ("v_force", "v_fast"))


def test_partitions_that_change_unwatched_make_views_complete_until_apply(db, make_project):
    """Without the event triggers (a non-superuser apply, or disabled), a partition created or
    detached goes unlogged: the refresh sees the tree differ from what the log covers."""
    db.execute(SCHEMA)
    db.execute("INSERT INTO events VALUES (1, 1, 1, 10, 'a'), (2, 12, 2, 20, 'b')")
    project = make_project(["events", "customers"], [
        {"name": "v_force", "query": VIEWS[0]["query"]},
        {"name": "v_fast", "refresh": "fast", "query": "SELECT id, day FROM events"},
    ])
    project.apply()
    db.execute("ALTER EVENT TRIGGER mvlog_cover_partitions DISABLE")
    db.execute("CREATE TABLE events_03 PARTITION OF events FOR VALUES FROM (30) TO (40)")
    db.execute("INSERT INTO events_03 VALUES (7, 31, 2, 5, 'b')")
    for _ in range(2):  # every refresh until apply covers the partition
        results = {r.view: r for r in project.refresh()}
        assert results["v_force"].method == "complete"
        assert "partition public.events_03 of public.events is not covered by its log" in results["v_force"].reason
        assert "run 'mvlog apply'" in results["v_fast"].error
        assert_view_matches(project, "v_force")
    db.execute("ALTER EVENT TRIGGER mvlog_cover_partitions ENABLE")
    project.apply()  # covers events_03; what happened meanwhile is unknown: one complete refresh
    results = {r.view: r for r in project.refresh()}
    assert results["v_force"].method == "complete" and "partitions changed while" in results["v_force"].reason
    refresh_ok(project, ["v_fast"], complete=True)
    db.execute("INSERT INTO events_03 VALUES (8, 32, 1, 6, 'a')")
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}
    assert_views_match(project, ("v_force", "v_fast"))


def test_tables_mvlog_cannot_log_exactly_are_refused_at_apply(db, make_project):
    db.execute(SCHEMA)
    db.execute("CREATE TABLE animals (id integer PRIMARY KEY, name text)")
    db.execute("CREATE TABLE dogs (bark text, PRIMARY KEY (id)) INHERITS (animals)")
    db.execute("CREATE MATERIALIZED VIEW mv AS SELECT id FROM customers")
    db.execute("CREATE VIEW cv AS SELECT id FROM customers")
    db.execute("CREATE EXTENSION file_fdw")
    db.execute("CREATE SERVER files FOREIGN DATA WRAPPER file_fdw")
    db.execute("CREATE FOREIGN TABLE ft (id integer) SERVER files OPTIONS (filename '/dev/null')")
    cases = {
        "events_01": "table public.events_01 is a partition of events: declare the log on events",
        "animals": "table public.animals has INHERITS children",
        "dogs": "table public.dogs inherits from animals",
        "mv": "public.mv is a materialized view: mvlog cannot log it",
        "cv": "public.cv is a view: log the tables it reads",
        "ft": "public.ft is a foreign table",
    }
    for table, message in cases.items():
        project = make_project([table], [])
        with pytest.raises(ConfigError, match=r"logs\[0\]: " + message.replace(".", r"\.")):
            project.apply()
        assert db.execute("SELECT to_regnamespace('mvlog') IS NULL AND NOT EXISTS "
                          "(SELECT FROM pg_trigger WHERE tgname LIKE 'mvlog$%%')")[0][0]  # nothing applied
    # A view reading one partition names the table to read instead.
    project = make_project(["events"], [{"name": "v", "query": "SELECT id FROM events_02a"}])
    with pytest.raises(ConfigError, match=r"views\[0\] \(v\): table public.events_02a is a partition of events: "
                                          r"declare the log on events"):
        project.apply()

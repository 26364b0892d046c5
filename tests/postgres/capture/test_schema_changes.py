"""pgoutput's documented gaps that a table's own DDL opens (#48, item 1), PostgreSQL only.

A replica identity changed after ``apply``: PostgreSQL itself refuses the writers' UPDATEs and
DELETEs (the publication's column list no longer covers the identity), so no write goes by
uncaptured, and the next ``apply`` says what to do in one sentence. A column's type changed while
the capture streams: the publication carries only the key, decoded as text, so every write
before and after the change reaches the log, and the DDL is logged for the views' next refresh;
PostgreSQL refuses to change a key column's type while the table is in the publication.
"""

from __future__ import annotations

import threading

import psycopg2
import psycopg2.errors
import pytest

from mvlog.errors import ConfigError

pytestmark = pytest.mark.integration


def window_keys(project) -> set[int]:
    """The keys of every log row a new stamp holds (all of them: no consumer has read any)."""
    (log,) = project.logs.registered().values()
    with project.logs.stamp([log]) as stamped:
        return {row[0] for row in stamped.query(f'SELECT id FROM mvlog."{log.log_name}" '
                                                f"""WHERE "dmltype$$" <> 'T'""")}


def test_a_replica_identity_changed_after_apply_stops_writers_not_the_capture(logical, db):
    db.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 20) g")
    db.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    with pytest.raises(psycopg2.Error, match="replica identity"):
        db.execute("UPDATE t SET v = 0 WHERE id = 1")  # PostgreSQL's own refusal: nothing goes by
    db.execute("INSERT INTO t VALUES (100, 1)")  # inserts need no identity
    with pytest.raises(ConfigError) as refused:
        logical.apply()
    assert str(refused.value) == ("logs[0]: table public.t has REPLICA IDENTITY FULL; capture: logical needs its "
                                  "primary key (ALTER TABLE public.t REPLICA IDENTITY DEFAULT)")
    db.execute("ALTER TABLE t REPLICA IDENTITY DEFAULT")
    db.execute("UPDATE t SET v = 0 WHERE id = 2")
    logical.apply()
    assert {2, 100} <= window_keys(logical)


def test_column_types_changed_while_the_capture_streams_lose_no_write(logical, db):
    db.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 20) g")
    stop = threading.Event()
    capture = threading.Thread(target=lambda: list(logical.capture(stop=stop.is_set)))
    capture.start()
    try:
        db.execute("UPDATE t SET v = v + 1 WHERE id IN (1, 2)")
        db.execute("ALTER TABLE t ALTER COLUMN v TYPE bigint")  # not published: a new Relation message
        db.execute("UPDATE t SET v = v + 1 WHERE id = 3; UPDATE t SET id = 4000 WHERE id = 4")
        with pytest.raises(psycopg2.errors.FeatureNotSupported, match="publication"):
            db.execute("ALTER TABLE t ALTER COLUMN id TYPE bigint")  # the key is in the publication's column list
        db.execute("INSERT INTO t VALUES (5000, 0)")
        keys = window_keys(logical)
    finally:
        stop.set()
        capture.join(30)
    assert {1, 2, 3, 4, 4000, 5000} <= keys
    logged = {tag for (tag,) in db.execute("SELECT command_tag FROM mvlog.ddl_log "
                                            "WHERE table_oid = 't'::regclass")}
    assert logged == {"ALTER TABLE"}  # the views' next refresh sees the DDL (README "Schema changes")
    assert db.execute("SELECT key_types FROM mvlog.logs") == [(["integer"],)]

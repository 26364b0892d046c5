"""Creating the replication slot never waits in silence (#48, item 3), PostgreSQL only.

A transaction of another database that holds an xid keeps PostgreSQL from making a logical slot.
``mvlog apply`` says within seconds which session it waits for, gives up after
``source.capture_wait`` with one sentence, and leaves nothing made: no slot, no publication, the
log still captured by its triggers. Once the transaction ends, the same apply succeeds.
"""

from __future__ import annotations

import time

import psycopg2
import pytest
import yaml

from mvlog.config import load_config
from mvlog.errors import SourceError
from mvlog.project import Project

pytestmark = pytest.mark.integration


def project(db, tmp_path, capture: str, messages: list[str]) -> Project:
    path = tmp_path / f"{capture}.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn, "capture_wait": 4},
        "warehouse": str(tmp_path / "warehouse"),
        "logs": [{"table": "acct", "capture": capture}],
        "views": [],
    }))
    return Project(load_config(str(path)), progress=messages.append)


def test_a_slot_held_up_by_an_open_transaction_says_why_and_leaves_nothing(pg, db, tmp_path):
    db.execute("CREATE TABLE acct (id int PRIMARY KEY, balance int); INSERT INTO acct VALUES (1, 10)")
    messages: list[str] = []
    with project(db, tmp_path, "trigger", messages) as before:
        before.apply()
    blocker = psycopg2.connect(pg.dsn())  # another database of the cluster
    try:
        with blocker.cursor() as cur:
            cur.execute("SELECT pg_backend_pid(), pg_current_xact_id()")  # holds an xid, idle in transaction
            pid = cur.fetchone()[0]
        started = time.monotonic()
        with project(db, tmp_path, "logical", messages) as logical, pytest.raises(SourceError) as failed:
            logical.apply()
        waited = time.monotonic() - started
        said = [m for m in messages if "creating the replication slot waits" in m]
        assert said and f"pid {pid} (database postgres" in said[0] and "idle in transaction" in said[0], messages
        assert 4 <= waited < 30, waited
        assert f"pid {pid}" in str(failed.value) and "nothing was created" in str(failed.value)
        assert "\n" not in str(failed.value)
        assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(0,)]
        assert db.execute("SELECT count(*) FROM pg_publication") == [(0,)]
        assert db.execute("SELECT capture FROM mvlog.logs") == [("trigger",)]
        assert db.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'acct'::regclass "
                          "AND tgname LIKE 'mvlog$%'") == [(4,)]
    finally:
        blocker.rollback()
        blocker.close()
    with project(db, tmp_path, "logical", messages) as logical:
        logical.apply()
    assert db.execute("SELECT capture FROM mvlog.logs") == [("logical",)]
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(1,)]

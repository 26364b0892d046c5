"""The main connection of a Source outlives its server closing it (a restart, a crash, an
administrator's ``pg_terminate_backend``): found idle and dead without a round trip, and opened
again; a connection lost in the middle of a statement is a transient SourceError, never psycopg2's
``InterfaceError``, and the next call works."""

from __future__ import annotations

import time

import psycopg2
import pytest

from mvlog.errors import SourceError
from mvlog.postgres.liveness import server_gone
from mvlog.postgres.source import Source

pytestmark = pytest.mark.integration


def backend(source: Source) -> int:
    return source.query("SELECT pg_backend_pid()")[0][0]


def terminate(db, pid: int) -> None:
    db.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    time.sleep(0.05)  # the backend's goodbye reaches the client's socket


def test_an_idle_connection_the_server_closed_is_replaced(db):
    source = Source(db.dsn)
    first = backend(source)
    assert not server_gone(source.conn)
    terminate(db, first)
    assert server_gone(source._conn)
    assert backend(source) != first  # a new session, and no error on the way


def test_a_notification_waiting_on_a_live_connection_is_not_death(db):
    source = Source(db.dsn)
    source.query("LISTEN mvlog_test")
    db.execute("NOTIFY mvlog_test, 'hello'")
    time.sleep(0.05)
    assert not server_gone(source.conn)


def test_a_connection_lost_inside_a_transaction_is_a_transient_error_and_the_next_call_works(db):
    source = Source(db.dsn)
    first = backend(source)
    with pytest.raises(SourceError) as lost:
        with source.transaction() as cur:
            cur.execute("SELECT 1")
            terminate(db, first)  # in the middle of the transaction: only its next statement can tell
            cur.execute("SELECT 2")
    assert lost.value.transient, lost.value
    assert backend(source) != first
    # A look that changes nothing passes PostgreSQL's error on for its caller to word: the lost
    # connection's, not the InterfaceError its rollback would raise.
    with pytest.raises(psycopg2.OperationalError):
        with source.inspection() as cur:
            terminate(db, backend_of(cur))
            cur.execute("SELECT 1")
    assert source.query("SELECT 3") == [(3,)]


def backend_of(cur) -> int:
    cur.execute("SELECT pg_backend_pid()")
    return cur.fetchone()[0]

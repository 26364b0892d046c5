"""Every call on a connection has a deadline: through a proxy that stops forwarding without closing
anything (tests/stallproxy.py), a statement, a connect and a refresh's lock session end with a
transient error naming the setting within their bounds; the connections of the same source are
given up together; and once PostgreSQL answers again, the backends the server kept for the
abandoned connections (and their advisory locks) are ended by the next connection."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg2
import pytest
from stallproxy import StallProxy

from mvlog.errors import SourceError
from mvlog.postgres import deadlines
from mvlog.postgres.locks import view_locks
from mvlog.postgres.source import Source
from mvlog.timeouts import Timeouts

pytestmark = pytest.mark.integration

QUICK = Timeouts(connect=2, keepalive=3, statement=2, long_statement=20, stream=3)


@pytest.fixture
def proxy(pg):
    with StallProxy("127.0.0.1", pg.port) as stalling:
        yield stalling


def through(proxy: StallProxy, db) -> str:
    return proxy.dsn({"user": "postgres", "password": db.pg.password, "dbname": db.name})


def alive(db, pid: int) -> bool:
    return bool(db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))[0][0])


def test_a_statement_the_server_never_answers_is_abandoned_at_its_bound_with_its_siblings(db, proxy):
    source = Source(through(proxy, db), timeouts=QUICK)
    other = source.connect()
    main_pid = source.query("SELECT pg_backend_pid()")[0][0]
    proxy.stall()
    started = time.monotonic()
    with pytest.raises(SourceError) as stalled:
        source.query("SELECT 1")
    took = time.monotonic() - started
    assert 2 <= took < 5.5, took  # the bound, then a look at the server that cannot connect (2 s)
    assert stalled.value.transient
    assert "PostgreSQL stopped answering" in str(stalled.value)
    assert "source.timeouts.statement" in str(stalled.value)
    # The other connection of the source shares its fate at once, with the same reason.
    started = time.monotonic()
    with pytest.raises(deadlines.Stalled, match="stopped answering"), other.cursor() as cur:
        cur.execute("SELECT 1")
    assert time.monotonic() - started < 1
    # The server still keeps the abandoned backend (the proxy holds its socket open) ...
    assert alive(db, main_pid)
    proxy.heal()
    # ... until the next connection of this process ends it, and the main connection is a new one.
    assert source.query("SELECT pg_backend_pid()")[0][0] != main_pid
    assert not alive(db, main_pid)


def test_a_connect_during_a_stall_fails_within_the_connect_bound_saying_so(db, proxy):
    proxy.stall()
    source = Source(through(proxy, db), timeouts=QUICK)
    started = time.monotonic()
    with pytest.raises(SourceError) as failed:
        source.query("SELECT 1")
    assert time.monotonic() - started < 5
    assert failed.value.transient
    assert "timeout expired (no answer within 2 s, source.timeouts.connect)" in str(failed.value)


def test_a_lock_held_by_a_connection_that_never_answers_is_released_for_the_next_refresh(db, proxy):
    """A refresh's lock session stalls: its heartbeat gives the refresh up within the keepalive
    bound (telling its Spark work to stop), and after healing the next refresh of the view takes
    the lock at once (the backend that held it was ended), with no wait for the server."""
    source = Source(through(proxy, db), timeouts=QUICK)
    given_up: list[str] = []
    name = f"v_{uuid.uuid4().hex[:6]}"
    with source.on_abandon(given_up.append), view_locks(source, [name]):
        proxy.stall()
        deadline = time.monotonic() + 10
        while not given_up:
            assert time.monotonic() < deadline, "the heartbeat never gave the stalled refresh up"
            time.sleep(0.1)
        took = time.monotonic() - (deadline - 10)
    assert took < QUICK.keepalive + QUICK.keepalive / 3 + 1, took
    assert "a heartbeat" in given_up[0] and "source.timeouts.keepalive" in given_up[0], given_up
    proxy.heal()
    again = Source(through(proxy, db), timeouts=QUICK)
    started = time.monotonic()
    with view_locks(again, [name], wait=0.0):  # taken at once: ConcurrentRefreshError otherwise
        pass
    assert time.monotonic() - started < 8


def test_long_calls_are_bounded_by_what_they_are(db, proxy):
    """A call that waits on purpose (a lock's wait) is bounded by the statement bound plus its wait,
    and a thread's long calls by ``long_statement``; other threads keep the statement bound."""
    source = Source(through(proxy, db), timeouts=QUICK)
    holder = psycopg2.connect(db.dsn)
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(4711)")
        with source.bounded("long_statement"):
            assert source.bound() == deadlines.Bound(20.0, "source.timeouts.long_statement")
            seen: list[deadlines.Bound] = []
            thread = threading.Thread(target=lambda: seen.append(source.bound()))
            thread.start()
            thread.join()
            assert seen == [deadlines.Bound(2.0, "source.timeouts.statement")]
            started = time.monotonic()
            with pytest.raises(SourceError, match="lock timeout"):
                with source.transaction() as cur:  # waits 3 s (longer than the statement bound) and is refused
                    cur.execute("SET LOCAL lock_timeout = '3s'")
                    cur.execute("SELECT pg_advisory_lock(4711)")
            assert 3 <= time.monotonic() - started < 5
    finally:
        holder.close()


def test_a_statement_the_server_is_still_computing_gets_more_time_until_long_statement(db, proxy):
    """Past its bound, a call whose backend is running it (``pg_stat_activity``, asked on another
    connection) is a busy server, not a silent one: it is given its bound again, until
    ``long_statement`` in all (the null-key check of TPC-DS q80 at scale 0.2 once ran 49 s with three
    refreshes beside it, against a statement bound of 60 s)."""
    source = Source(through(proxy, db), timeouts=QUICK)
    started = time.monotonic()
    assert source.query("SELECT 7 FROM pg_sleep(5)") == [(7,)]  # 2.5 bounds of 2 s
    assert 5 <= time.monotonic() - started < 8
    assert source.query("SELECT 1") == [(1,)]  # nothing was abandoned
    longest = Source(through(proxy, db), timeouts=Timeouts(connect=2, keepalive=3, statement=2, long_statement=5))
    started = time.monotonic()
    with pytest.raises(SourceError) as unfinished:
        longest.query("SELECT pg_sleep(30)")
    assert 5 <= time.monotonic() - started < 8
    assert "did not finish a statement sent at" in str(unfinished.value)
    assert "source.timeouts.long_statement" in str(unfinished.value) and unfinished.value.transient


def test_a_statement_that_never_reached_the_server_is_abandoned_at_its_bound_though_the_server_answers(db, proxy):
    """The connection alone stops forwarding (new ones go through): the look at the server finds
    the backend idle, not computing, and the call is abandoned at its bound."""
    source = Source(through(proxy, db), timeouts=QUICK)
    pid = source.query("SELECT pg_backend_pid()")[0][0]
    proxy.stall()
    proxy.heal()  # open connections stay silent; new ones are forwarded
    started = time.monotonic()
    with pytest.raises(SourceError, match="stopped answering: a statement sent at .* within 2 s"):
        source.query("SELECT 1")
    assert 2 <= time.monotonic() - started < 4
    assert db.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)) == [("idle",)]

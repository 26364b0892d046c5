"""Decode once, never a silent wait (#48, items 2 and 3), PostgreSQL only.

The running capture (``mvlog capture``, the scheduler's thread) streams the slot over a logical
replication connection: the server decodes each change once. An idle database on a busy cluster
retains no WAL. A refresh waits for the running capture instead of decoding, says what it waits
for while it does, and gives up after ``capture_wait`` with one sentence. A pass without a
running capture records its position chunk by chunk.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import psycopg2
import pytest

from mvlog.errors import SourceError
from mvlog.postgres.capture import decoding as decoding_module
from mvlog.postgres.capture.decoding import CAPTURE_LOCK, Decoding
from mvlog.postgres.capture.pgoutput import lsn_value

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def running_capture(project) -> Iterator[list]:
    """``mvlog capture`` in a thread: the passes it yields, until the block ends."""
    stop, passes = threading.Event(), []
    thread = threading.Thread(target=lambda: passes.extend(project.capture(stop=stop.is_set)))
    thread.start()
    try:
        yield passes
    finally:
        stop.set()
        thread.join(30)


def slot_row(db) -> tuple:
    """The slot: whether a walsender streams it, and the WAL it retains (bytes)."""
    return db.execute("SELECT s.active, r.pid IS NOT NULL, "
                      "pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint "
                      "FROM pg_replication_slots AS s LEFT JOIN pg_stat_replication AS r ON r.pid = s.active_pid "
                      "WHERE s.database = current_database()")[0]


def logged_keys(db) -> set[int]:
    ((log,),) = db.execute("SELECT log_name FROM mvlog.logs")
    return {row[0] for row in db.execute(f'SELECT id FROM mvlog."{log}"')}


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_running_capture_streams_the_slot_and_a_refresh_waits_for_it(logical, db):
    with running_capture(logical) as passes:
        # A replication connection takes the slot (after the catch-up pass of the SQL functions
        # that makes its state row, during which the slot is active without a walsender).
        wait_for(lambda: all(slot_row(db)[:2]))
        db.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 500) g")
        db.execute("UPDATE t SET id = id + 1000 WHERE id <= 10")
        (log,) = logical.logs.registered().values()
        decoded = []
        original = Decoding._decode
        Decoding._decode = lambda self, *args: decoded.append(args) or original(self, *args)  # type: ignore
        try:
            with logical.logs.stamp([log]) as stamped:  # waits for the stream; decodes nothing itself
                ((keys,),) = stamped.query(f'SELECT count(DISTINCT id) FROM mvlog."{log.log_name}"')
        finally:
            Decoding._decode = original  # type: ignore
        assert keys == 510 and not decoded
        wait_for(lambda: sum(p.rows for p in passes) >= 510)
    assert logged_keys(db) == set(range(11, 501)) | set(range(1, 11)) | set(range(1001, 1011))
    assert not slot_row(db)[0]  # the slot is free again when the capture stops


def test_an_idle_database_on_a_busy_cluster_retains_no_wal(logical, db, pg):
    other = psycopg2.connect(pg.dsn())
    other.autocommit = True
    try:
        with other.cursor() as cur, running_capture(logical):
            cur.execute("CREATE TABLE IF NOT EXISTS busy (id int, pad text)")
            for _ in range(5):
                cur.execute("INSERT INTO busy SELECT g, repeat('x', 500) FROM generate_series(1, 20000) g")
            cur.execute("CHECKPOINT")  # restart positions move with the running-transactions records
            cur.execute("SELECT pg_current_wal_lsn()::text")
            busy_end = lsn_value(cur.fetchone()[0])
            wait_for(lambda: lsn_value(db.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                                  "WHERE database = current_database()")[0][0]) >= busy_end)
            cur.execute("DROP TABLE busy")
        retained = slot_row(db)[2]
        assert retained < 8 << 20, retained  # the other database wrote ~60 MB
    finally:
        other.close()


def test_a_wait_for_a_stuck_capture_says_what_it_waits_for_then_gives_up(logical, db, pg):
    holder = psycopg2.connect(db.dsn, application_name="stuck-capture")
    holder.autocommit = True
    messages: list[str] = []
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT pg_backend_pid(), pg_advisory_lock(%s, 0)", (CAPTURE_LOCK,))
            pid = cur.fetchone()[0]
        db.execute("INSERT INTO t VALUES (1, 1)")
        (log,) = logical.logs.registered().values()
        started = time.monotonic()
        with pytest.raises(SourceError) as failed, logical.logs.stamp([log], capture_wait=5, report=messages.append):
            pass
        waited = time.monotonic() - started
    finally:
        holder.close()
    assert 5 <= waited < 15, waited
    assert messages and all(f"process {pid} (stuck-capture" in m for m in messages), messages
    assert "did not reach WAL position" in str(failed.value) and "nothing was stamped" in str(failed.value)
    assert db.execute("SELECT count(*) FROM mvlog.logs WHERE last_stamp IS NOT NULL") == [(0,)]


def test_a_pass_records_its_position_chunk_by_chunk(logical, db, monkeypatch):
    for first in (1, 10001, 20001):  # three transactions: rows in several chunks
        db.execute("INSERT INTO t SELECT g, g FROM generate_series(%s, %s) g", (first, first + 9999))
    recorded: list[int] = []
    original = Decoding.record
    monkeypatch.setattr(Decoding, "record", lambda self, writer, slot, position, rows, advance=True: (
        recorded.append(position), original(self, writer, slot, position, rows, advance))[1])
    before = db.execute("SELECT keys_written FROM mvlog.capture_state")[0][0]
    done = Decoding(logical.source, chunk_bytes=256 << 10).catch_up()
    assert done is not None and done.rows >= 30000
    assert len(recorded) > 3 and recorded == sorted(recorded), recorded
    assert logged_keys(db) == set(range(1, 30001))
    assert db.execute("SELECT keys_written FROM mvlog.capture_state")[0][0] - before == done.rows  # each chunk once
    assert decoding_module.CHUNK_BYTES >= 1 << 20  # the default chunk is not the test's


@pytest.mark.parametrize("when", ["streaming", "starting"])
def test_dropping_the_last_logical_log_stops_a_running_capture_instead_of_waiting_for_it(logical, db, monkeypatch,
                                                                                         when):
    """The stream holds the capture lock as long as it runs: dropping the capture (the last
    logical log dropped) asks it to let go, rather than waiting for it forever. ``starting``: the
    drop asks while the capture's first pass runs, before its stream listens for the ask."""
    db.execute("INSERT INTO t VALUES (1, 1)")
    dropped = threading.Thread(target=logical.drop_log, args=("t",))
    if when == "starting":
        original, passes = Decoding._pass, []

        def first_pass_waits_for_the_drop(self, upto):
            if not passes:  # the capture's pass before its stream: the drop asks and waits meanwhile
                passes.append(upto)
                dropped.start()
                wait_for(lambda: db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                            "AND classid = %s AND objsubid = 2 AND NOT granted",
                                            (CAPTURE_LOCK,)) == [(1,)])
            return original(self, upto)
        monkeypatch.setattr(Decoding, "_pass", first_pass_waits_for_the_drop)
    with running_capture(logical):
        if when == "streaming":
            wait_for(lambda: all(slot_row(db)[:2]))
            dropped.start()
        wait_for(lambda: dropped.ident is not None)
        dropped.join(60)
        assert not dropped.is_alive(), "drop_log waited for the running capture"
    assert db.execute("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == [(0,)]
    assert db.execute("SELECT count(*) FROM mvlog.logs") == [(0,)]


def test_where_a_replication_connection_is_refused_the_capture_runs_passes(logical, db, monkeypatch):
    """pg_hba.conf without a replication line for the role: the capture falls back to passes."""
    from mvlog.postgres.source import Source

    connect, refused = Source.connect, []

    def refusing(self, **kwargs):
        if "connection_factory" in kwargs:
            refused.append(True)
            raise SourceError('cannot connect to PostgreSQL: no pg_hba.conf entry for replication connection '
                              'from host "127.0.0.1", user "mvlog"')
        return connect(self, **kwargs)
    monkeypatch.setattr(Source, "connect", refusing)
    with running_capture(logical) as passes:
        wait_for(lambda: refused)  # the stream was tried and refused: what follows is the fallback's
        db.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 50) g")
        wait_for(lambda: sum(p.rows for p in passes) >= 50)
        assert not slot_row(db)[1]  # no walsender: passes of the SQL functions
    assert logged_keys(db) == set(range(1, 51))


def test_a_stream_that_goes_silent_is_given_up_and_resumes_without_a_gap_or_a_repeat(logical, db, pg):
    """Through a proxy that stops forwarding (sockets left open), the running capture gives its
    stream up within ``source.timeouts.stream``; once new connections pass again, the next run ends
    the walsender the server kept for the silent one (it holds the slot) and streams on from the
    recorded position: the changes made during the stall are logged, each once."""
    from stallproxy import StallProxy

    from mvlog.project import Project
    from mvlog.timeouts import Timeouts

    with StallProxy("127.0.0.1", pg.port) as proxy:
        source = logical.config.source.model_copy(update={
            "dsn": proxy.dsn({"user": "postgres", "password": pg.password, "dbname": db.name}),
            "timeouts": Timeouts(connect=2, keepalive=3, statement=3, long_statement=20, stream=3)})
        project = Project(logical.config.model_copy(update={"source": source}))
        failures: list[Exception] = []

        def capture() -> None:
            try:
                for _ in project.capture(stop=lambda: False):
                    pass
            except Exception as exc:  # noqa: BLE001 — what the test looks at
                failures.append(exc)

        thread = threading.Thread(target=capture, daemon=True)
        thread.start()
        wait_for(lambda: all(slot_row(db)[:2]))
        db.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 100) g")
        wait_for(lambda: len(logged_keys(db)) == 100)
        proxy.stall()
        stalled = time.monotonic()
        db.execute("UPDATE t SET v = -v WHERE id <= 50")  # committed while the capture cannot hear of it
        thread.join(15)
        assert not thread.is_alive() and failures, "the silent stream was never given up"
        assert time.monotonic() - stalled < 3 + 3, time.monotonic() - stalled
        assert "source.timeouts.stream" in str(failures[0]), failures
        assert getattr(failures[0], "transient", False)
        assert slot_row(db)[0]  # the server still holds the slot for the silent walsender
        proxy.heal()
        with running_capture(project):
            wait_for(lambda: all(slot_row(db)[:2]))
            db.execute("DELETE FROM t WHERE id = 1")  # after the healing: the stream is live again
            wait_for(lambda: changes(db).get("D", set()) == {1})
        project.close()
    logged = changes(db)
    assert logged["I"] == set(range(1, 101)) and logged["U"] == set(range(1, 51)), logged  # nothing lost
    assert db.execute(f'SELECT count(*) FROM mvlog."{log_name(db)}"')[0][0] == 100 + 50 + 1  # none twice


def changes(db) -> dict[str, set[int]]:
    """The logged keys by kind of change."""
    found: dict[str, set[int]] = {}
    for key, kind in db.execute(f'SELECT id, "dmltype$$" FROM mvlog."{log_name(db)}"'):
        found.setdefault(kind, set()).add(key)
    return found


def log_name(db) -> str:
    ((log,),) = db.execute("SELECT log_name FROM mvlog.logs")
    return log

"""The capture step of ``capture: logical``: decode the database's replication slot into the logs.

One slot (``mvlog_<database oid>``, plugin ``pgoutput``) and one publication (``mvlog``) per
database. A *pass* peeks the slot's changes up to a WAL position, writes their keys into the logs
(``COPY``, committed in batches) and then records how far it wrote (the capture's state row,
:mod:`mvlog.postgres.catalog.capture_state`) in the transaction of its last rows; only after that
commit does it advance the slot. A pass killed anywhere leaves the slot where it was, and the next
pass writes those keys again: at least once, never less (a key logged twice is harmless to a
refresh, a key never logged is not).

Passes are serialized by an advisory lock (and PostgreSQL lets one backend use a slot at a time):
``mvlog capture``, a scheduler and a refresh that finds the capture behind may all ask for one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import psycopg2
import psycopg2.errors
import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import SourceError, UsageError
from mvlog.faults import checkpoint
from mvlog.postgres.capture.batch import LogKeys, Pass, Routing
from mvlog.postgres.capture.handover import as_trigger_rows, settle
from mvlog.postgres.capture.lifecycle import LOST_REASON, SlotLifecycle
from mvlog.postgres.capture.logical import PUBLICATION
from mvlog.postgres.capture.pgoutput import lsn_text, lsn_value
from mvlog.postgres.capture.slot import slot_name
from mvlog.postgres.capture.stream import RELEASE, WAKE_CHANNEL, ReplicationRefused, Stream
from mvlog.postgres.catalog import capture_state, log_registry
from mvlog.postgres.locks import close_releasing_locks
from mvlog.postgres.source import Source, fetch_row

CAPTURE_LOCK = 0x6D766C63  # "mvlc": the advisory lock one capture pass, or the stream, holds
RELEASE_ASK_EVERY = 2  # seconds between asks to a running stream to let go, while the capture is dropped
REPORT_EVERY = 2.0  # seconds between reports of what a wait for the capture waits for
FETCH_ROWS = 20_000  # messages fetched from the slot at a time
BATCH_ROWS = 100_000  # log rows written per committed batch
CHUNK_BYTES = 64 << 20  # WAL a pass decodes before it records its position and advances the slot

class Decoding(SlotLifecycle):
    """The logical capture of one database."""

    def __init__(self, source: Source, batch_rows: int = BATCH_ROWS, chunk_bytes: int = CHUNK_BYTES):
        self.source = source
        self.batch_rows = batch_rows
        self.chunk_bytes = chunk_bytes

    # -- the slot ---------------------------------------------------------------------------

    def drop(self) -> None:
        """Drop the slot, the publication and the capture's state (no log is captured logically any
        more): a last pass, then the rows it wrote that no refresh stamped yet become trigger rows.
        The caller holds every log's stamping lock. A running stream is asked to let go first."""
        with self._exclusive(wait=True):
            try:
                self._pass(None)
            except psycopg2.Error as exc:
                raise self.source.error(exc, "logical capture") from None
            as_trigger_rows(self.source)
            conn = self.source.connect()
            try:
                conn.autocommit = True
                with conn.cursor() as cur:
                    slot = slot_name(cur)
                    cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                                "WHERE slot_name = %s", (slot,))
                    cur.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(PUBLICATION)))
                    capture_state.forget_slot(cur, slot)
            except psycopg2.Error as exc:
                raise self.source.error(exc) from None
            finally:
                conn.close()

    # -- passes -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _exclusive(self, wait: bool = False) -> Iterator[bool]:
        """Hold the capture lock (or, without ``wait``, yield False if another process holds it).
        With ``wait``, a running stream is asked to let go of it (RELEASE), and asked again every
        RELEASE_ASK_EVERY seconds while this waits: a stream hears only what is notified after it
        listens, and one starting as the capture is dropped may not listen yet."""
        conn = self.source.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                if wait:
                    cur.execute("SELECT set_config('lock_timeout', %s, false)", (f"{RELEASE_ASK_EVERY}s",))
                    while True:
                        cur.execute("SELECT pg_notify(%s, %s)", (WAKE_CHANNEL, RELEASE))
                        try:
                            cur.execute("SELECT pg_advisory_lock(%s, 0)", (CAPTURE_LOCK,))
                            break
                        except psycopg2.errors.LockNotAvailable:
                            continue
                    cur.execute("RESET lock_timeout")
                    got = True
                else:
                    cur.execute("SELECT pg_try_advisory_lock(%s, 0)", (CAPTURE_LOCK,))
                    got = bool(fetch_row(cur)[0])
            yield got
        except psycopg2.Error as exc:
            raise self.source.error(exc) from None
        finally:
            close_releasing_locks(conn)

    def written(self) -> int:
        """How far the capture has written: every transaction that committed before is in the logs."""
        position = capture_state.written(self.source)
        if position is None:
            raise SourceError("this database has no logical capture; run 'mvlog apply'")
        return lsn_value(position)

    def catch_up(self, upto: int | None = None) -> Pass | None:
        """One pass: write what committed before ``upto`` (default: everything flushed now); None
        if another process is capturing."""
        with self._exclusive() as got:
            if not got:
                return None
            try:
                return self._pass(upto)
            except psycopg2.Error as exc:
                raise self.source.error(exc, "logical capture") from None

    def run(self, once: bool = False, interval: float = 1.0,
            stop: Callable[[], bool] = lambda: False) -> Iterator[Pass]:
        """Capture: one pass (``once``; another process capturing is a UsageError), or until
        ``stop()`` a stream of the slot (:mod:`.stream`: each change decoded once) while this
        process holds the capture, waiting ``interval`` seconds between tries while another
        does. Yields each write of log rows, and each pass that found the slot lost (made again).
        Where PostgreSQL refuses this role a replication connection (``pg_hba.conf``), it captures
        by passes instead, pausing ``interval`` seconds after one that found nothing."""
        if once:
            done = self.catch_up()
            if done is None:
                raise UsageError("another process is running the logical capture of this database")
            yield done
            return
        streaming = True
        while not stop():
            with self._exclusive() as got:
                if got and not self.exists():
                    return  # the capture was dropped (no log is captured logically any more)
                if got and streaming:
                    first = self._pass(None)  # replaces a lost slot; the stream starts where it ends
                    if first.rows or first.lost:
                        yield first
                    try:
                        yield from Stream(self, stop, interval).run()
                    except ReplicationRefused:
                        streaming = False
                    except psycopg2.Error as exc:
                        raise self.source.error(exc, "logical capture") from None
                    continue
                done = self._pass(None) if got else None
                if done is not None and (done.rows or done.lost):
                    yield done
            if done is None or not done.rows:
                time.sleep(interval)

    def reach_now(self, timeout: float, report: Callable[[str], None] = lambda _: None) -> None:
        """:meth:`reach` the WAL insert position of now: every transaction committed before this
        call has its keys in the logs when it returns."""
        self.reach(lsn_value(self.source.query("SELECT pg_current_wal_insert_lsn()::text")[0][0]), timeout, report)

    def reach(self, lsn: int, timeout: float, report: Callable[[str], None] = lambda _: None) -> None:
        """Wait until everything that committed before ``lsn`` is in the logs: capturing, or, while
        another process captures, asking it for ``lsn`` and saying every REPORT_EVERY seconds
        what it waits for (``report``); SourceError after ``timeout`` seconds."""
        started = time.monotonic()
        asked: float | None = None
        reported = started
        while True:
            written = self.written()
            if written >= lsn:
                return
            now = time.monotonic()
            if now - started > timeout:
                raise SourceError(f"the logical capture did not reach WAL position {lsn_text(lsn)} within "
                                  f"{timeout:g} s (it is at {lsn_text(written)}); nothing was stamped — see "
                                  f"'mvlog status' for the slot's lag")
            done = self.catch_up(lsn)
            if done is not None and done.lost:  # after the snapshot: this refresh cannot know what it missed
                raise SourceError(f"{LOST_REASON}; the views of logical logs refresh completely from the next "
                                  f"refresh on", transient=True)
            if done is None:  # another process captures: wake it, and again every half second
                if asked is None or now - asked >= 0.5:
                    self._wake(lsn)
                    asked = now
                if now - reported >= REPORT_EVERY:
                    report(self._waiting_for(lsn, written, now - started))
                    reported = now
                time.sleep(0.01)

    def _wake(self, lsn: int) -> None:
        """Flush the WAL up to ``lsn`` (decoding reads only flushed WAL: a committed transaction
        with an xid flushes everything before its commit record) and ask a running stream to
        record how far it has written once it is past ``lsn``."""
        with self.source.transaction() as cur:
            cur.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (lsn_text(lsn),))
            if not fetch_row(cur)[0]:
                cur.execute("SET LOCAL synchronous_commit = on")
                cur.execute("SELECT pg_current_xact_id()")
            cur.execute("SELECT pg_notify(%s, %s)", (WAKE_CHANNEL, lsn_text(lsn)))

    def _waiting_for(self, lsn: int, written: int, seconds: float) -> str:
        """What a wait for the capture waits for, in one sentence."""
        rows = self.source.query(
            "SELECT a.pid, a.application_name, a.state, extract(epoch FROM now() - a.state_change) "
            "FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = 0 AND l.objsubid = 2 AND l.granted",
            (CAPTURE_LOCK,))
        behind = f"{(lsn - written) / 1e6:.1f} MB of WAL behind" if lsn > written else "behind"
        who = (f"the logical capture of process {rows[0][0]} ({rows[0][1] or 'no application name'}, "
               f"{rows[0][2]} for {float(rows[0][3] or 0):.0f} s)" if rows else "the logical capture")
        return (f"waiting {seconds:.0f} s for {who} to write up to WAL position {lsn_text(lsn)}: it is at "
                f"{lsn_text(written)}, {behind}")

    def _pass(self, upto: int | None) -> Pass:
        """Decode what committed before ``upto`` (default: everything flushed now), CHUNK_BYTES of
        WAL at a time: each chunk's rows and position are committed, and the slot advanced,
        before the next, so a long backlog is not decoded again from its start if stopped."""
        started = time.monotonic()
        reader, writer = self.source.connect(), self.source.connect()
        rows = 0
        try:
            with reader.cursor() as cur:
                slot = slot_name(cur)
                position = capture_state.written_position(cur, slot)
                if position is None:
                    raise SourceError("this database has no logical capture; run 'mvlog apply'")
                written = lsn_value(position)
                cur.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                status = cur.fetchone()
                if status is None or status[0] == "lost":
                    reader.rollback()
                    self._replace_lost(slot)
                    return Pass(0, self.written(), time.monotonic() - started, lost=True)
                if upto is not None:
                    self._flush_to(writer, upto)
                cur.execute("SELECT pg_current_wal_flush_lsn()::text")
                flush = lsn_value(fetch_row(cur)[0])
            reader.rollback()
            target = min(upto, flush) if upto is not None else flush
            while written < target:
                chunk = min(target, written + self.chunk_bytes)
                written_now = self._decode(reader, writer, slot, written, chunk)
                reader.rollback()
                self.record(writer, slot, chunk, written_now)
                rows += written_now
                written = chunk
            return Pass(rows, written, time.monotonic() - started)
        finally:
            reader.close()
            writer.close()

    def record(self, writer: psycopg2.extensions.connection, slot: str, position: int, rows: int,
               advance: bool = True) -> None:
        """Commit the rows written in ``writer``'s transaction with the capture's new position;
        then let the slot forget what lies before it (``advance``; a stream tells its server
        instead), and finish the hand-overs it passed."""
        with writer.cursor() as out:
            capture_state.record_written(out, slot, lsn_text(position), rows)
        writer.commit()
        if advance:
            with writer.cursor() as out:  # only now may the slot forget these changes
                out.execute("SELECT pg_replication_slot_advance(%s, %s) "
                            "FROM pg_replication_slots WHERE slot_name = %s AND confirmed_flush_lsn < %s::pg_lsn",
                            (slot, lsn_text(position), slot, lsn_text(position)))
            writer.commit()
        settle(self.source)

    @staticmethod
    def _flush_to(conn: psycopg2.extensions.connection, lsn: int) -> None:
        """Have PostgreSQL flush its WAL up to ``lsn`` (a committed transaction with an xid flushes
        everything before its commit record): decoding reads only flushed WAL."""
        with conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_flush_lsn()::text")
            if lsn_value(fetch_row(cur)[0]) >= lsn:
                conn.rollback()
                return
            cur.execute("SET LOCAL synchronous_commit = on")
            cur.execute("SELECT pg_current_xact_id()")
        conn.commit()

    def _decode(self, reader: psycopg2.extensions.connection, writer: psycopg2.extensions.connection,
                slot: str, written: int, target: int) -> int:
        """Peek the slot up to ``target`` and write the log rows of every transaction that
        committed at or after ``written``, committing every ``batch_rows`` rows and leaving the
        last ones uncommitted in ``writer``. Returns rows written."""
        routing, total = Routing(lambda: self.log_keys(writer), since=written), 0
        with reader.cursor(name="mvlog_capture") as changes:
            changes.itersize = FETCH_ROWS
            changes.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
                            "'proto_version', '1', 'publication_names', %s)", (slot, lsn_text(target), PUBLICATION))
            for (message,) in changes:
                routing.take(message)
                if len(routing.rows) >= self.batch_rows:
                    total += routing.write(writer)
                    writer.commit()
                    checkpoint("capture_batch")
        return total + routing.write(writer)

    @staticmethod
    def log_keys(conn: psycopg2.extensions.connection) -> LogKeys:
        """Registered logs by table oid: (log table, key columns), read in a transaction of its own."""
        with conn.cursor() as cur:
            found = log_registry.log_keys(cur)
        conn.commit()
        return found

    # -- hand-overs, lost slots, status -------------------------------------------------------

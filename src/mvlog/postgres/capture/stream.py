"""Decode once: the running capture reads the slot as a stream (``START_REPLICATION``).

A pass of :class:`~mvlog.postgres.capture.decoding.Decoding` peeks the slot, and PostgreSQL
decodes each peek again from the slot's restart position: while a transaction stays open, every
pass re-reads all the WAL written since it began. ``mvlog capture`` and the scheduler's capture
thread instead hold one logical replication connection (psycopg2's), on which the server decodes
each change once and sends it as it commits.

What is written, and when:

- the keys of the transactions received are copied into the logs in batches, at transaction
  boundaries: when the stream has nothing more to read, or ``batch_rows`` are waiting (a
  transaction larger than that is written in several batches and, if the capture stops in its
  middle, again in full: at least once);
- with its last rows, the position every transaction that committed before has been written
  up to (the capture's state row); only after that commit is the slot told it may forget them
  (the standby status update's flush position);
- between transactions the position may move past WAL that holds nothing of the logs (other
  databases, unlogged tables): the slot is told at once, so an idle database on a busy cluster
  retains no WAL; the recorded position follows every ``IDLE_WRITE`` seconds, or at once when a
  refresh asks for it (``NOTIFY`` on ``WAKE_CHANNEL`` with the WAL position it waits for);
- a stream that hears nothing from the server (neither data nor a keepalive) asks for a reply
  after a third of ``source.timeouts.stream``, and is given up after all of it: its connections are
  abandoned (:mod:`mvlog.postgres.deadlines`) and the capture opens it again from the recorded
  position — what was written is skipped, what was not is sent again;
- rows never wait unwritten for more than ``write_every`` seconds, even in the middle of a
  transaction. psycopg2 moves the flush position it reports to the server up to a keepalive's
  WAL position whenever the client has confirmed the last data message, and in the middle of a
  transaction that message carries no position (the server sends one only with a commit). The
  server sends a keepalive in the middle of a transaction only when half of
  ``wal_sender_timeout`` has passed without a status update from the client; writing (and
  updating) more often than that keeps every transaction whose rows are not committed in the
  logs after the position the server may hear.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol, cast

import psycopg2
import psycopg2.extensions
import psycopg2.extras
from psycopg2 import sql

from mvlog.errors import SourceError
from mvlog.faults import checkpoint
from mvlog.postgres.capture.batch import LogKeys, Pass, Routing
from mvlog.postgres.capture.logical import PUBLICATION
from mvlog.postgres.capture.pgoutput import commit_end, lsn_value
from mvlog.postgres.capture.slot import slot_name
from mvlog.postgres.catalog import capture_state
from mvlog.postgres.deadlines import BoundedReplicationConnection, bound_of
from mvlog.postgres.source import fetch_row

if TYPE_CHECKING:
    from mvlog.postgres.source import Source


class StreamOwner(Protocol):
    """What a stream needs of the capture that runs it (:class:`~mvlog.postgres.capture.decoding.Decoding`):
    its source, the registered logs, its batch size and the record of a written position."""

    source: Source
    batch_rows: int

    def log_keys(self, conn: psycopg2.extensions.connection) -> LogKeys: ...

    def record(self, writer: psycopg2.extensions.connection, slot: str, position: int, rows: int,
               advance: bool = True) -> None: ...

WAKE_CHANNEL = "mvlog_capture"
RELEASE = "release"  # the payload that asks a running stream to let go of the slot and the capture lock
IDLE_WRITE = 1.0  # seconds between writes of a position that moved past nothing of the logs
ASK_EVERY = 0.02  # while a refresh waits: how often to ask the server how far it has sent
WRITE_EVERY = 1.0  # seconds rows may wait unwritten (at most a quarter of wal_sender_timeout)


class ReplicationRefused(Exception):
    """PostgreSQL refuses this role a replication connection (``pg_hba.conf``, no REPLICATION)."""


class Stream:
    """One streaming session of the capture: from the recorded position until ``stop()`` or an error."""

    def __init__(self, decoding: StreamOwner, stop: Callable[[], bool], interval: float):
        self.decoding = decoding
        self.stop = stop
        self.interval = interval
        self.in_transaction = False
        self.received = 0  # WAL position the server has sent up to, at a transaction boundary
        self.confirmed = 0  # what the slot was last told
        self.recorded = 0  # the position in the capture's state row
        self.recorded_at = time.monotonic()
        self.wanted = 0  # the furthest position a waiting refresh asked for
        self.asked_at = 0.0
        self.fed_at = time.monotonic()
        self.batch_started = time.monotonic()
        self.slot = ""
        self.releasing = False  # asked to let go (the capture is being dropped)
        self.heard_at = time.monotonic()  # when the server last sent something (data or a keepalive)
        self.asked_reply_at = 0.0
        self.silence = bound_of(decoding.source.timeouts, "stream")

    def run(self) -> Iterator[Pass]:
        """Stream and write; yields each write of log rows as a :class:`Pass`. Its calls (the
        writes, the listener's) are bounded by ``source.timeouts.stream``, as its silence is."""
        with self.decoding.source.bounded("stream"):
            yield from self._run()

    def _run(self) -> Iterator[Pass]:
        source = self.decoding.source
        writer = source.connect()
        listener = source.connect()
        try:
            replication = source.connect(connection_factory=BoundedReplicationConnection)
        except SourceError as exc:
            writer.close()
            listener.close()
            if "replication" in str(exc) or "WAL sender" in str(exc):
                raise ReplicationRefused(str(exc)) from None
            raise
        try:
            listener.autocommit = True
            self.listener = listener
            with listener.cursor() as cur:
                cur.execute(sql.SQL("LISTEN {}").format(sql.Identifier(WAKE_CHANNEL)))
                slot = slot_name(cur)
                position = capture_state.written_position(cur, slot)
                assert position is not None, "the slot has no state row (the pass before a stream makes one)"
                self.recorded = self.received = self.confirmed = lsn_value(position)
                cur.execute("SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'")
                timeout = fetch_row(cur)[0] / 1000
            self.slot = slot
            self.write_every = min(WRITE_EVERY, timeout / 4) if timeout > 0 else WRITE_EVERY
            self.routing = Routing(lambda: self.decoding.log_keys(writer), since=self.recorded)
            cursor = cast(psycopg2.extras.ReplicationCursor, replication.cursor())
            assert isinstance(replication, BoundedReplicationConnection)
            with replication.watching("the start of replication"):
                cursor.start_replication(slot_name=slot, decode=False, start_lsn=self.recorded,
                                         options={"proto_version": "1", "publication_names": PUBLICATION})
            self.heard_at = time.monotonic()
            self._confirm(cursor, self.recorded)
            while not self.stop() and not self.releasing:
                message = self._read(cursor, replication)
                if message is not None:
                    done = self._receive(message.payload, writer, cursor)
                    if done is not None:
                        yield done
                    continue
                done = self._idle(writer, cursor)
                if done is not None:
                    yield done
                self._wait(cursor, listener)
            if not self.in_transaction:
                done = self._write(writer, cursor, self.received)
                if done is not None:
                    yield done
        finally:
            replication.close()
            _released(listener, self.slot)
            listener.close()
            writer.close()

    def _read(self, cursor: psycopg2.extras.ReplicationCursor,
              replication: BoundedReplicationConnection) -> psycopg2.extras.ReplicationMessage | None:
        """The next message, if one has come; psycopg2's error of a stream abandoned for its
        silence (:meth:`_wait`) as the reason it was abandoned."""
        try:
            message = cursor.read_message()
        except psycopg2.Error:
            if replication.abandoned:
                raise SourceError(replication.abandoned, transient=True) from None
            raise
        if message is not None:
            self.heard_at = time.monotonic()
        return message

    def _receive(self, payload: bytes, writer: psycopg2.extensions.connection,
                 cursor: psycopg2.extras.ReplicationCursor) -> Pass | None:
        kind = payload[:1]
        if kind == b"B":
            self.in_transaction = True
        rows = self.routing.rows
        waiting = len(rows)
        self.routing.take(payload)
        if not waiting and rows:
            self.batch_started = time.monotonic()
        if kind == b"C":
            self.in_transaction = False
            self._notes(self.listener)  # a busy stream still hears a request to let go
            self.received = max(self.received, commit_end(payload))
            if len(rows) >= self.decoding.batch_rows:
                return self._write(writer, cursor, self.received)
        elif len(rows) >= self.decoding.batch_rows:  # a large transaction: its rows so far
            written = self.routing.write(writer)
            writer.commit()
            checkpoint("capture_batch")
            return _pass(written, self.recorded, self.batch_started)
        if rows and time.monotonic() - self.fed_at >= self.write_every:
            return self._write(writer, cursor, self.received)
        return None

    def _idle(self, writer: psycopg2.extensions.connection,
              cursor: psycopg2.extras.ReplicationCursor) -> Pass | None:
        """Nothing more to read now: write what waits, and move the position if it is time to."""
        if self.in_transaction:
            overdue = self.routing.rows and time.monotonic() - self.fed_at >= self.write_every
            return self._write(writer, cursor, self.received) if overdue else None
        self.received = max(self.received, cursor.wal_end)  # a keepalive: the server sent all before it
        if self.routing.rows:
            return self._write(writer, cursor, self.received)
        if self.received > self.confirmed:  # other databases' WAL: the slot need not keep it
            self._confirm(cursor, self.received)
        due = time.monotonic() - self.recorded_at >= IDLE_WRITE or self.wanted > self.recorded
        if due and self.received > self.recorded:
            self._write(writer, cursor, self.received)
        return None

    def _write(self, writer: psycopg2.extensions.connection, cursor: psycopg2.extras.ReplicationCursor,
               position: int) -> Pass | None:
        """Commit the waiting rows with the position, then confirm it to the slot."""
        rows = self.routing.write(writer)
        if position > self.recorded or rows:
            self.decoding.record(writer, self.slot, max(position, self.recorded), rows, advance=False)
            self.recorded = self.routing.since = max(position, self.recorded)
            self.recorded_at = time.monotonic()
            checkpoint("capture_batch")
        else:
            writer.rollback()
        self._confirm(cursor, self.recorded)
        return _pass(rows, self.recorded, self.batch_started) if rows else None

    def _confirm(self, cursor: psycopg2.extras.ReplicationCursor, position: int) -> None:
        cursor.send_feedback(write_lsn=position, flush_lsn=position, force=True)
        self.confirmed = max(self.confirmed, position)
        self.fed_at = time.monotonic()

    def _wait(self, cursor: psycopg2.extras.ReplicationCursor, listener: psycopg2.extensions.connection) -> None:
        """Sleep until the server sends something or a refresh asks; keep the server answering
        while one waits, and give the stream up if it stays silent (see the module)."""
        now = time.monotonic()
        silent = now - self.heard_at
        if silent > self.silence.seconds:
            reason = (f"PostgreSQL stopped answering: the replication stream was silent for {silent:.0f} s "
                      f"({self.silence.setting}: {self.silence.seconds:g} s); it is opened again from the recorded "
                      f"position")
            self.decoding.source.abandon(reason)
            raise SourceError(reason, transient=True)
        quiet = silent >= self.silence.seconds / 3 and now - self.asked_reply_at >= self.silence.seconds / 6
        if self.wanted > self.recorded:
            if now - self.asked_at >= ASK_EVERY:
                cursor.send_feedback(reply=True)  # the server answers with how far it has sent
                self.asked_at = self.fed_at = now
            timeout = ASK_EVERY
        else:
            if now - self.fed_at >= self.write_every or quiet:
                # Keeps the server from asking, mid-transaction; when it has been quiet, asks it
                # to answer (a keepalive), so that its silence means a path that went dead.
                cursor.send_feedback(force=True, reply=quiet)
                self.fed_at = now
                if quiet:
                    self.asked_reply_at = now
            timeout = min(self.interval, self.write_every)
        ready, _, _ = select.select([cursor.connection, listener], [], [], timeout)
        if cursor.connection in ready:
            self.heard_at = time.monotonic()  # data or a keepalive: the server is there
        if listener in ready:
            self._notes(listener)

    def _notes(self, listener: psycopg2.extensions.connection) -> None:
        """Take the requests waiting on ``listener``: a WAL position a refresh waits for, or RELEASE."""
        listener.poll()
        for note in listener.notifies:
            if note.payload == RELEASE:
                self.releasing = True
                continue
            try:
                self.wanted = max(self.wanted, lsn_value(note.payload))
            except ValueError:
                continue
        listener.notifies.clear()


def _released(conn: psycopg2.extensions.connection, slot: str, timeout: float = 5.0) -> None:
    """Wait (a little) for the server to let go of the slot after the stream closed, so that the
    next capture, or a DROP DATABASE, finds it free."""
    deadline = time.monotonic() + timeout
    try:
        with conn.cursor() as cur:
            while time.monotonic() < deadline:
                cur.execute("SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = %s AND active)",
                            (slot,))
                if not fetch_row(cur)[0]:
                    return
                time.sleep(0.02)
    except psycopg2.Error:
        return  # the capture is stopping anyway; the next one waits for the slot in its turn


def _pass(rows: int, position: int, started: float) -> Pass:
    return Pass(rows, position, time.monotonic() - started)

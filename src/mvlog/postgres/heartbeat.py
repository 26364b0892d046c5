"""A session kept answering: a thread asks a connection for a reply at an interval while a block
runs, and a reply that does not come within its bound abandons the connection and its owner's
others (:mod:`mvlog.postgres.deadlines`). A refresh's view-lock session runs one, so a refresh whose
locks stop answering is given up instead of holding them for ever."""

from __future__ import annotations

import threading

import psycopg2
import psycopg2.extensions

from mvlog.postgres.deadlines import Bound, BoundedConnection


class Heartbeat:
    """Asks ``conn`` for a reply every ``every`` seconds on a thread of its own while the block
    runs: a reply not within ``bound`` abandons it, and its owner's other connections (a refresh
    whose lock session stops answering cannot finish: its reads and writes are given up at once,
    and its locks are ended from a new connection)."""

    def __init__(self, conn: BoundedConnection, every: float, bound: Bound):
        self.conn = conn
        self.every = every
        self.bound = bound
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="mvlog-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(self.every):
            try:
                # A plain cursor: the heartbeat's own bound, not the connection's statement bound.
                with self.conn.watching("a heartbeat", self.bound), \
                        self.conn.cursor(cursor_factory=psycopg2.extensions.cursor) as cur:
                    cur.execute("SELECT 1")
            except psycopg2.Error:
                return  # abandoned (the watchdog did the rest), or the connection broke: its next use says so

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


"""The replication slot's lifecycle for the logical capture: made with the publication and the
capture's state (never in silence when open transactions hold it up), made again when PostgreSQL
lost it (the views of logically captured logs then need a complete refresh), and what it retains.
A part of :class:`~mvlog.postgres.capture.decoding.Decoding`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import psycopg2
from psycopg2 import sql

from mvlog.errors import SourceError
from mvlog.postgres.capture import DECODED_LOGS
from mvlog.postgres.capture.logical import PUBLICATION, ensure_publication
from mvlog.postgres.capture.slot import SLOT_WAIT, SlotStatus, create_slot, slot_name, slot_status
from mvlog.postgres.catalog import capture_state
from mvlog.postgres.catalog.views import mark_readers_needs_complete
from mvlog.postgres.source import Cursor, Source, fetch_row

LOST_REASON = ("the replication slot of mvlog's logical capture was missing, or lost WAL it had not decoded "
               "(a failover to a standby that has no copy of it: PostgreSQL below 17, or failover slots not set "
               "up; or max_slot_wal_keep_size): changes were not captured")


class SlotLifecycle:
    """Make, remake and look at the capture's slot (see the module)."""

    source: Source

    def exists(self) -> bool:
        """Whether the database has mvlog's capture (its state row; the slot may be lost)."""
        return capture_state.exists(self.source)

    def ensure(self, timeout: float = SLOT_WAIT, report: Callable[[str], None] = lambda _: None) -> None:
        """Create the publication, the slot and the capture's state if missing (outside any
        transaction: PostgreSQL creates a logical slot only in one that has written nothing).
        A slot creation held up by open transactions says what holds it (``report``) and gives
        up after ``timeout`` seconds, taking back a publication it made (:mod:`.slot`)."""
        conn = self.source.connect()
        made_publication = False
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT NOT EXISTS (SELECT FROM pg_publication WHERE pubname = %s)", (PUBLICATION,))
                made_publication = bool(fetch_row(cur)[0])
                ensure_publication(cur)
                slot = slot_name(cur)
                cur.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                row = cur.fetchone()
                if row is not None and row[0] != "lost":
                    capture_state.adopt_slot(cur, slot, PUBLICATION)
                    return
                recorded = capture_state.has_state(cur, slot)
                lost = row is not None or recorded
                try:
                    self._create_slot(cur, slot, lost, timeout, report)
                except SourceError:
                    if made_publication:  # nothing half made
                        cur.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(PUBLICATION)))
                    raise
        except psycopg2.Error as exc:
            raise self.source.error(exc) from None
        finally:
            conn.close()

    def _create_slot(self, cur: Cursor, slot: str, lost: bool, timeout: float, report: Callable[[str], None]) -> None:
        """A new slot, and the state to go with it. Replacing a slot PostgreSQL invalidated (or
        one dropped under mvlog), the views of logically captured logs need a complete refresh:
        changes were not decoded."""
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (slot,))
        start = create_slot(self.source, slot, timeout, report)
        capture_state.start_slot(cur, slot, PUBLICATION, start)
        if lost:
            capture_state.mark_replaced(cur, slot)
            mark_readers_needs_complete(cur, LOST_REASON, DECODED_LOGS)

    def _replace_lost(self, slot: str) -> None:
        """A slot PostgreSQL invalidated (or that was dropped under mvlog) is made again; the views
        of logically captured logs are marked for a complete refresh."""
        conn = self.source.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                self._create_slot(cur, slot, True, SLOT_WAIT, lambda _: None)
        finally:
            conn.close()

    def replaced_at(self) -> datetime | None:
        """When the slot was last found lost or missing and made again (by whichever process); None if never."""
        return capture_state.replaced_at(self.source)

    def status(self) -> list[SlotStatus]:
        """The slot: retained WAL, the capture's lag, PostgreSQL's verdict on it."""
        return slot_status(self.source)

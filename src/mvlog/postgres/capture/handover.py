"""Hand-overs of a log between capture kinds, and the end of the logical capture.

A log switched back to triggers stays ``handover`` while the capture still writes rows of
transactions from before the switch (:func:`mvlog.postgres.capture.state_after`); once the
capture has written past the switch and a refresh has stamped those rows, :func:`settle` makes
it the triggers' alone. When no log is captured logically any more, :func:`as_trigger_rows` makes
the decoded rows no refresh stamped yet trigger rows, before the slot is dropped.
"""

from __future__ import annotations

import time

import psycopg2.errors
from psycopg2 import sql

from mvlog.errors import SourceError
from mvlog.model import MVLOG_SCHEMA, SENTINEL
from mvlog.postgres.capture.logical import unpublish
from mvlog.postgres.catalog import capture_state, log_registry
from mvlog.postgres.inspection import savepoint
from mvlog.postgres.source import Cursor, Source, fetch_row


def settle(source: Source) -> None:
    """Finish the hand-overs the capture has passed: a log switched back to triggers
    (``handover``) whose switch the capture has written past, and whose decoded rows have all
    been stamped, is the triggers' alone and leaves the publication."""
    with source.transaction() as cur:
        written = capture_state.written_now(cur)
        for schema, name, log_name in log_registry.handovers_through(cur, written) if written is not None else []:
            if _unstamped_decoded(cur, log_name):
                continue  # the next refresh stamps them
            try:
                with savepoint(cur, "settle", keep=True):
                    log_registry.end_handover(cur, log_name)
                    unpublish(cur, schema, name)
            except psycopg2.errors.InsufficientPrivilege:  # a refresh role: the next apply finishes it
                pass


def as_trigger_rows(source: Source, timeout: float = 10.0) -> None:
    """Make every unstamped decoded row a trigger row (xid$$ NULL: stamped by the first snapshot
    that sees the row), once its transaction is visible to every snapshot from now on. For
    dropping the capture, with every log's stamping lock held."""
    deadline = time.monotonic() + timeout
    while True:
        left = False
        with source.transaction() as cur:
            for log_name, _ in log_registry.log_keys(cur).values():
                cur.execute(sql.SQL('UPDATE {} SET "xid$$" = NULL WHERE "snaptime$$" = %s AND "xid$$" IS NOT NULL '
                                    'AND pg_visible_in_snapshot("xid$$", pg_current_snapshot())')
                            .format(sql.Identifier(MVLOG_SCHEMA, log_name)), (SENTINEL,))
                left = left or _unstamped_decoded(cur, log_name)
        if not left:
            return
        if time.monotonic() > deadline:
            raise SourceError("rows of the logical capture belong to transactions that are not visible yet; "
                              "run the command again")
        time.sleep(0.05)


def _unstamped_decoded(cur: Cursor, log_name: str) -> bool:
    """Whether the log holds decoded rows that no refresh has stamped yet."""
    cur.execute(sql.SQL('SELECT EXISTS (SELECT FROM {} WHERE "snaptime$$" = %s AND "xid$$" IS NOT NULL)')
                .format(sql.Identifier(MVLOG_SCHEMA, log_name)), (SENTINEL,))
    return bool(fetch_row(cur)[0])

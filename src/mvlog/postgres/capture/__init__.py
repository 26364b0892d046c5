"""How writes reach a materialized view log: one interface, two implementations.

A log (``mvlog.mlog$…``, :mod:`mvlog.postgres.logs`) is read the same way whoever fills it:
stamped, windowed and purged by :class:`~mvlog.postgres.logs.Logs`. A :class:`Capture` only fills
it — :class:`~mvlog.postgres.capture.triggers.TriggerCapture` with statement triggers in the
writer's transaction, :class:`~mvlog.postgres.capture.logical.LogicalCapture` by decoding the
database's replication slot (:class:`~mvlog.postgres.capture.decoding.Decoding`). The contract
between capture and refresh is the stamped snapshot (docs/design-notes.md, "Capture by logical
decoding").
"""

from __future__ import annotations

__all__ = ["CAPTURE_KINDS", "DECODED_LOGS", "HANDOVER", "Capture", "is_decoded", "needs_slot", "stamped_as",
           "state_after", "needs_switch_position"]

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from psycopg2 import sql

from mvlog.config import CAPTURE_KINDS
from mvlog.model import SENTINEL_TIME, LogInfo, TableInfo
from mvlog.postgres.late import LateRows
from mvlog.postgres.source import Cursor

HANDOVER = "handover"  # back to triggers, while the capture still writes rows from before the switch
# The logs (``mvlog.logs`` rows, as ``l``) the capture step may still write rows into after their
# transactions commit: logical, and hand-overs until they end (a condition the catalog's
# statements are handed: :func:`mvlog.postgres.catalog.views.mark_readers_needs_complete`).
DECODED_LOGS = sql.SQL("l.capture <> 'trigger'")


def is_decoded(log: LogInfo) -> bool:
    """Whether the capture step may write rows of ``log`` after their transactions commit (as
    registered when ``log`` was read): a stamp then waits for it and stamps by transaction
    visibility, and a lost slot counts as the log replaced."""
    return log.capture != "trigger"


def stamped_as(log: LogInfo) -> str:
    """The kind of capture whose rows a stamp of ``log`` deals with: ``logical`` while the
    capture step may still write rows of it (:func:`is_decoded`), else ``trigger``."""
    return "logical" if is_decoded(log) else "trigger"


def needs_slot(kinds: Iterable[str]) -> bool:
    """Whether logs captured by these kinds need the database's replication slot."""
    return "logical" in kinds


def state_after(asked: str, was: str | None) -> str:
    """A log's capture state once ``apply`` installs the ``asked`` kind over state ``was``: back to
    triggers from logical decoding it is HANDOVER, until the capture has written every
    transaction from before the switch (:func:`~mvlog.postgres.capture.handover.settle`)."""
    return HANDOVER if asked == "trigger" and was in ("logical", HANDOVER) else asked


def needs_switch_position(state: str, was: str | None) -> bool:
    """Whether a switch into ``state`` from ``was`` must record the WAL position the capture has
    to pass before the hand-over ends."""
    return state == HANDOVER and was == "logical"


class Capture(ABC):
    """What fills the logs of one capture kind."""

    kind: str

    @abstractmethod
    def install(self, cur: Cursor, table: TableInfo, log: LogInfo) -> None:
        """Make every write to ``table`` reach ``log`` from the caller's transaction's commit on
        (the log table exists), and stop the other kind's capture of it."""

    @abstractmethod
    def current(self, cur: Cursor, table: TableInfo, log: LogInfo) -> bool:
        """Whether ``table``'s capture is installed exactly as this version of mvlog renders it."""

    def refusal(self, cur: Cursor, table: TableInfo) -> str | None:
        """Why this kind cannot capture ``table`` (one sentence), or None."""
        return None

    @abstractmethod
    def remove(self, cur: Cursor, log: LogInfo) -> None:
        """Stop capturing the writes of ``log``'s table (the log is being dropped)."""

    # -- what a refresh asks of it (``Logs.stamp``) --------------------------------------------

    # Whether :meth:`unseen` stamps in a transaction of its own, and records the logs' last stamp
    # there; otherwise the stamp's transaction records it.
    stamps_apart = False

    @abstractmethod
    def before_stamp(self) -> None:
        """Called with the stamping locks held, before a stamp's snapshot: write what this
        capture can into the logs now, so that few rows arrive after the snapshot."""

    def unseen(self, at_snapshot: Cursor, logs: Sequence[LogInfo], wait: float, stamp: datetime | None,
               report: Callable[[str], None]) -> LateRows:
        """The rows of ``logs`` that this capture writes after their transactions commit, of the
        transactions the snapshot of ``at_snapshot`` sees, and that it cannot see (written after
        it): a refresh reads its windows as the logs plus these. With ``stamp``, every such row
        (seen or not) is stamped with it. Nothing for a capture that writes in the writer's
        transaction: the snapshot sees its rows exactly when it sees their transactions."""
        return LateRows(stamp or SENTINEL_TIME)

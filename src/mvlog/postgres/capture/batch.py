"""The capture's one decode loop: pgoutput messages -> changes of logged tables -> log rows,
written with ``COPY ... FROM STDIN`` (text format). Passes (:mod:`.decoding`) and the stream
(:mod:`.stream`) both feed messages to a :class:`Routing`."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import psycopg2.extensions
from psycopg2 import sql

from mvlog.errors import SourceError
from mvlog.model import MVLOG_SCHEMA
from mvlog.postgres.capture.pgoutput import Change, Decoder, full_xid, lsn_text
from mvlog.postgres.source import fetch_row


@dataclass(frozen=True)
class Pass:
    """What one capture pass did: log rows written, how far (``written``), and its seconds."""

    rows: int
    written: int
    seconds: float
    lost: bool = False  # the slot was lost (changes not decoded) and made again

    @property
    def position(self) -> str:
        """``written`` as PostgreSQL writes a WAL position."""
        return lsn_text(self.written)


def copy_text(value: str | None) -> str:
    """A value as a field of COPY's text format."""
    if value is None:
        return "\\N"
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


class LogRows:
    """Log rows waiting to be copied, per log: COPY text lines without their transaction columns,
    which are filled in when written (:meth:`write` reads the 64-bit epoch of the xids then)."""

    def __init__(self) -> None:
        self.lines: dict[str, tuple[tuple[str, ...], list[tuple[str, Change]]]] = {}
        self._orders: dict[tuple[str, tuple[str, ...]], list[int]] = {}  # key columns' places in a tuple
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, log: tuple[str, tuple[str, ...]], change: Change) -> None:
        name, keys = log
        entry = self.lines.get(name)
        if entry is None:
            entry = self.lines[name] = (keys, [])
        if change.key is None:
            key = "\t".join(["\\N"] * len(keys))
        else:
            order = self._orders.get((name, change.columns))
            if order is None:
                missing = [k for k in keys if k not in change.columns]
                if missing:
                    raise SourceError(f"logical decoding sent no column {missing[0]} for the log {name}; "
                                      f"run 'mvlog apply' (its publication lists other columns)")
                order = self._orders[(name, change.columns)] = [change.columns.index(k) for k in keys]
            values = change.key
            key = "\t".join([copy_text(values[i]) for i in order])
        entry[1].append((f"{key}\t{change.dmltype}\t{change.old_new}", change))
        self.count += 1

    def write(self, conn: psycopg2.extensions.connection) -> int:
        """COPY the rows in ``conn``'s transaction (not committed); how many."""
        rows = 0
        with conn.cursor() as cur:
            # a 64-bit xid near every transaction of these rows (they committed recently: within
            # 2^31 of it, before or after; see full_xid)
            cur.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
            reference = int(fetch_row(cur)[0])
            tails: dict[tuple[int, int], str] = {}  # a transaction's xact_time$$, xid$$ and lsn$$ columns
            for name, (keys, entries) in self.lines.items():
                lines = []
                for head, change in entries:
                    tail = tails.get((change.xid, change.commit_lsn))
                    if tail is None:
                        tail = tails[(change.xid, change.commit_lsn)] = (
                            f"\t{change.commit_time.isoformat()}\t{full_xid(change.xid, reference)}\t"
                            f"{lsn_text(change.commit_lsn)}\n")
                    lines.append(head + tail)
                columns = sql.SQL(", ").join(sql.Identifier(c) for c in
                                             (*keys, "dmltype$$", "old_new$$", "xact_time$$", "xid$$", "lsn$$"))
                cur.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN").format(
                    sql.Identifier(MVLOG_SCHEMA, name), columns).as_string(cur), io.StringIO("".join(lines)))
                rows += len(lines)
        return rows


LogKeys = dict[int, tuple[str, tuple[str, ...]]]  # registered logs by table oid: (log table, key columns)


class Routing:
    """Messages of the slot into log rows waiting to be written: each change of a logged table
    whose transaction committed at or after ``since`` (those before were written by an earlier
    pass or stream that stopped before the slot was told) goes to its table's log. A table not
    among the known logs makes it read them again (``log_keys``: a log created since); a table
    still not among them is one whose log is being dropped."""

    def __init__(self, log_keys: Callable[[], LogKeys], since: int):
        self.decoder = Decoder()
        self.log_keys = log_keys
        self.logs = log_keys()
        self.since = since
        self.rows = LogRows()

    def take(self, message: bytes) -> None:
        """Decode one message and add its changes' keys to :attr:`rows`."""
        for change in self.decoder.decode(message):
            if change.commit_lsn < self.since:
                continue
            log = self.logs.get(change.relation)
            if log is None:
                self.logs = self.log_keys()
                log = self.logs.get(change.relation)
                if log is None:
                    continue
            self.rows.add(log, change)

    def write(self, conn: psycopg2.extensions.connection) -> int:
        """COPY the waiting rows in ``conn``'s transaction (not committed) and start a new batch; how many."""
        written = self.rows.write(conn) if self.rows else 0
        self.rows = LogRows()
        return written

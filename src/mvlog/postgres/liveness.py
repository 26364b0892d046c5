"""What a server that went away looks like to a client: which PostgreSQL errors are worth waiting
out, and whether an idle connection's server has closed it. :class:`~mvlog.postgres.source.Source`
words its errors and reopens its connection by these (a restart, a crash, a failover).
"""

from __future__ import annotations

import select
import socket

import psycopg2
import psycopg2.extensions

# SQLSTATEs of a server that is away for a while, beside libpq's own connection failures: the
# connection exceptions (08…), an operator's or a crash's shutdown, a server starting up or in
# recovery (57P01–57P03), a standby not yet promoted (25006: the DSN reached it during a failover),
# and the conflicts a retry resolves (40001, 40P01).
TRANSIENT_STATES = ("08", "57P01", "57P02", "57P03", "25006", "40001", "40P01")


def is_transient(exc: psycopg2.Error) -> bool:
    """Whether the same call may succeed later: a lost or refused connection, a server restarting."""
    if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        return True
    return (exc.pgcode or "").startswith(TRANSIENT_STATES) or snapshot_gone(exc)


def snapshot_gone(exc: psycopg2.Error) -> bool:
    """Whether ``exc`` is the import of an exported snapshot whose session has ended: mvlog holds a
    refresh's snapshot for the whole refresh, so that session's connection was lost."""
    return exc.pgcode == "22023" and "snapshot" in (exc.pgerror or "")


def server_gone(conn: psycopg2.extensions.connection) -> bool:
    """Whether an idle connection's server has closed it (a restart, a crash, pg_terminate_backend),
    found without a round trip: an idle session is sent nothing unprompted but a notification, a
    notice or a parameter's new value, while a server that ends it sends an error and closes the
    socket. psycopg2 itself notices only at the next statement, which then fails."""
    if conn.closed:
        return True
    if conn.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        return False  # in a transaction: its next statement finds out, and the transaction is lost anyway
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        if conn.info.ssl_in_use:  # the bytes are TLS records: an idle session readable is all there is to go by
            return True
        with socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM) as sock:
            first = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True
    return first in (b"", b"E")  # end of file, or the error that ends the session

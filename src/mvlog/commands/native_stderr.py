"""What C libraries print on the process's stderr, routed through a long-running command's log.

libpq prints a server's message to stderr itself when it arrives while a connection is being
opened: psycopg2 installs its own notice handler only once ``PQconnectdb`` has returned
(psycopg/psycopg2#1811). When PostgreSQL shuts down (``pg_ctl restart``, a failover) just as a
connection finishes its handshake, the backend's ``FATAL:  terminating connection due to
administrator command`` comes in the same packet as the end of the handshake, and libpq prints it
(reproduced with a server that sends ReadyForQuery and that error together:
``tests/cli/test_native_stderr.py``). The connection fails at its first use and is opened
again, as the scheduler does; the line itself would be the only thing in the scheduler's output
not in its own words.

:func:`routed_native_stderr` points file descriptor 2 at a pipe for the duration of a long-running
command: a line of libpq's (``SEVERITY:  message``) becomes one log line; anything else (a JVM,
a C library's warning) passes to the real stderr unchanged. Python's own ``sys.stderr`` keeps
writing to the real stderr directly.

psycopg2's C code prints too, through ``sys.excepthook``: when the server ends a connection
during a ``COPY … FROM STDIN`` (the logical capture's writes to the logs, as PostgreSQL restarts),
it decodes the server's message while that error is already set, and prints the ``SystemError``
this raises (``<function decode> returned a result with an exception set``, caused by the
server's error) with its traceback; the COPY's caller gets psycopg2's ``OperationalError`` all the
same, which mvlog reports in its own words. :func:`without_psycopg2_prints` leaves that print out.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from types import TracebackType

# How libpq's default notice processor prints: the severity, a colon and two spaces.
LIBPQ_LINE = re.compile(r"^(FATAL|PANIC|ERROR|WARNING|NOTICE|INFO|LOG|DEBUG):  (.+)$")


def libpq_line(line: str) -> str | None:
    """The log line for a line libpq printed (None: not one of libpq's)."""
    found = LIBPQ_LINE.match(line.rstrip("\n"))
    if found is None:
        return None
    severity, message = found.groups()
    if severity in ("FATAL", "PANIC"):
        return f"PostgreSQL ended a connection as it was opened: {message} (it is opened again at its next use)"
    return f"PostgreSQL said, as a connection was opened: {severity.lower()}: {message}"


@contextlib.contextmanager
def routed_native_stderr(log: Callable[[str], None]) -> Iterator[None]:
    """Route what C code writes to file descriptor 2 through ``log`` (libpq's lines) or on to the
    real stderr (the rest) while the block runs (see the module)."""
    sys.stderr.flush()
    real = os.dup(2)
    reader, writer = os.pipe()
    os.dup2(writer, 2)
    os.close(writer)
    python_stderr = sys.stderr
    sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(real), "wb", buffering=0), write_through=True)

    def pump() -> None:
        with os.fdopen(reader, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace")
                routed = libpq_line(line)
                if routed is not None:
                    log(routed)
                else:
                    os.write(real, raw)

    thread = threading.Thread(target=pump, name="mvlog-native-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        os.dup2(real, 2)  # the pump reads to the pipe's end (a JVM started meanwhile may hold it open)
        thread.join(timeout=1)
        sys.stderr.flush()
        sys.stderr = python_stderr
        os.close(real)


ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


def printed_by_psycopg2(exc: BaseException) -> bool:
    """Whether an exception handed to ``sys.excepthook`` is the one psycopg2 prints itself when the
    server ends a connection mid-COPY (see the module): a SystemError caused by psycopg2's error."""
    cause = exc.__cause__
    return isinstance(exc, SystemError) and cause is not None and type(cause).__module__.startswith("psycopg2")


def without_psycopg2_prints(hook: ExceptHook) -> ExceptHook:
    """``hook`` (the process's ``sys.excepthook``) for everything but psycopg2's own print (see the module)."""
    def filtered(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> object:
        return None if printed_by_psycopg2(exc) else hook(kind, exc, tb)

    return filtered

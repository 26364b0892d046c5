"""libpq prints a server's message itself when it comes with the end of a connection's handshake
(psycopg2's notice handler is installed only afterwards): what the scheduler's output showed once
while PostgreSQL restarted under load. A server that sends ReadyForQuery and a FATAL error in one
packet reproduces it; a long-running command routes that line through its own log, and stderr
stays empty. psycopg2 prints too, through ``sys.excepthook``, when the server ends a connection
during a COPY: the ``mvlog`` process leaves that print out and reports the error itself."""

from __future__ import annotations

import io
import socket
import struct
import subprocess
import sys
import threading
import time

import psycopg2
import pytest

from mvlog.commands.native_stderr import libpq_line, printed_by_psycopg2, without_psycopg2_prints

# Connects to a server that ends the session as the handshake ends, with and without the router.
SCRIPT = """
import sys, psycopg2
from mvlog.commands.native_stderr import routed_native_stderr
port, routed = int(sys.argv[1]), sys.argv[2] == "routed"
def connect():
    psycopg2.connect(host="127.0.0.1", port=port, user="u", dbname="d", sslmode="disable", connect_timeout=5).close()
if routed:
    with routed_native_stderr(lambda line: print("LOG", line, flush=True)):
        connect()
        print("python's own stderr", file=sys.stderr, flush=True)
else:
    connect()
"""


def message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def shutting_down_server(connections: int) -> int:
    """A server that, for each connection, completes the handshake and at once ends the session as
    PostgreSQL does when it shuts down: ReadyForQuery and the FATAL error in one packet."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for _ in range(connections):
            client, _ = server.accept()
            length = struct.unpack("!I", client.recv(4))[0]
            client.recv(length - 4)  # the startup message
            reply = message(b"R", struct.pack("!I", 0))
            for key, value in (("server_version", "15.0"), ("client_encoding", "UTF8"), ("DateStyle", "ISO, MDY"),
                               ("standard_conforming_strings", "on"), ("integer_datetimes", "on")):
                reply += message(b"S", key.encode() + b"\0" + value.encode() + b"\0")
            reply += message(b"K", struct.pack("!II", 4242, 1)) + message(b"Z", b"I")
            reply += message(b"E", b"SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0")
            client.sendall(reply)
            client.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def test_libpq_prints_a_fatal_error_that_ends_the_handshake_and_the_router_logs_it():
    port = shutting_down_server(2)
    bare = subprocess.run([sys.executable, "-c", SCRIPT, str(port), "bare"], capture_output=True, text=True,
                          timeout=60)
    assert bare.stderr.strip() == "FATAL:  terminating connection due to administrator command", bare
    routed = subprocess.run([sys.executable, "-c", SCRIPT, str(port), "routed"], capture_output=True, text=True,
                            timeout=60)
    assert routed.stderr.strip() == "python's own stderr", routed  # Python's writes still reach stderr
    assert routed.stdout.strip() == ("LOG PostgreSQL ended a connection as it was opened: terminating connection "
                                     "due to administrator command (it is opened again at its next use)"), routed


def test_only_libpq_s_lines_are_taken():
    assert libpq_line("WARNING:  password expires soon\n") == (
        "PostgreSQL said, as a connection was opened: warning: password expires soon")
    assert libpq_line("Exception in thread main\n") is None
    assert libpq_line("FATAL: one space is not libpq's\n") is None


def cut_copy(db) -> BaseException:
    """A large COPY into a table whose connection the server ends while it runs; what the COPY raised."""
    writer = db.connect()
    with writer.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    lines = io.StringIO("".join(f"{i}\tline {i}\n" for i in range(3_000_000)))

    def cut() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not db.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND query LIKE 'COPY%%' AND state = 'active'", (pid,)):
            time.sleep(0.01)
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))

    cutter = threading.Thread(target=cut)
    cutter.start()
    try:
        with writer.cursor() as cur:
            cur.copy_expert("COPY lines (n, line) FROM STDIN", lines)
    except psycopg2.Error as exc:
        return exc
    finally:
        cutter.join()
        writer.close()
    raise AssertionError("the COPY was not cut")


@pytest.mark.integration
def test_psycopg2_s_print_of_a_copy_the_server_cut_is_left_out_and_its_error_raised(db, monkeypatch):
    db.execute("CREATE TABLE lines (n int, line text)")
    reached, printed = [], []
    hook = without_psycopg2_prints(lambda kind, exc, tb: reached.append(exc))
    monkeypatch.setattr(sys, "excepthook", lambda kind, exc, tb: printed.append(exc) or hook(kind, exc, tb))
    raised = cut_copy(db)
    assert isinstance(raised, psycopg2.OperationalError), raised  # the caller's error: mvlog words it
    assert [type(e) for e in printed] == [SystemError], printed  # what psycopg2 handed to the hook itself
    assert isinstance(printed[0].__cause__, psycopg2.errors.AdminShutdown)
    assert reached == []  # ... and not on to the process's stderr
    other = SystemError("something else")
    hook(SystemError, other, None)
    assert reached == [other]
    assert not printed_by_psycopg2(RuntimeError("x"))

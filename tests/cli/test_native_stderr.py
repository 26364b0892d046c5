"""libpq prints a server's message itself when it comes with the end of a connection's handshake
(psycopg2's notice handler is installed only afterwards): what the scheduler's output showed once
while PostgreSQL restarted under load. A server that sends ReadyForQuery and a FATAL error in one
packet reproduces it; a long-running command routes that line through its own log, and stderr
stays empty."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading

from mvlog.commands.native_stderr import libpq_line

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

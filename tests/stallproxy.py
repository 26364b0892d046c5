"""A TCP proxy between mvlog and a test cluster that can stop forwarding without closing anything,
as a network partition, a NAT or load balancer that forgot a connection, or a proxy that hangs do.

- forwarding: bytes pass both ways;
- :meth:`StallProxy.stall`: every connection, open or new, forwards nothing either way, and no
  socket is closed (the kernel still accepts and acknowledges what fits in its buffers, so
  neither side sees an error);
- :meth:`StallProxy.heal`: new connections forward again, while those open during the stall stay
  silent for ever (as after a NAT lost its state).

Standard library only: a listening socket and one pumping thread per connection.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time


class _Pair:
    """One client connection and its connection to the server."""

    def __init__(self, client: socket.socket, server: socket.socket, silent: bool):
        self.client = client
        self.server = server
        self.silent = silent  # forwards nothing, for ever
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()


class StallProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``host``:``port``."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stalled = False
        self.pairs: list[_Pair] = []
        self.lock = threading.Lock()
        self.stopping = False
        self.accepted = 0
        threading.Thread(target=self._accept, name="stallproxy-accept", daemon=True).start()

    def dsn(self, dsn_params: dict[str, str]) -> str:
        """A libpq key=value DSN for ``dsn_params`` that goes through this proxy."""
        params = {**dsn_params, "host": "127.0.0.1", "port": str(self.port)}
        return " ".join(f"{k}={v}" for k, v in params.items())

    def stall(self) -> None:
        """Stop forwarding on every connection, open or new, without closing one."""
        with self.lock:
            self.stalled = True
            for pair in self.pairs:
                pair.silent = True

    def heal(self) -> None:
        """Forward new connections again; those open until now stay silent."""
        with self.lock:
            self.stalled = False

    def close(self) -> None:
        self.stopping = True
        with contextlib.suppress(OSError):
            self.listener.close()
        with self.lock:
            for pair in self.pairs:
                pair.close()

    def __enter__(self) -> StallProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                silent = self.stalled
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, server, silent)
            with self.lock:
                self.pairs.append(pair)
                self.accepted += 1
            threading.Thread(target=self._pump, args=(pair,), name="stallproxy-pump", daemon=True).start()

    def _pump(self, pair: _Pair) -> None:
        """Copy bytes both ways until either side closes; while silent, read nothing (what the
        peers send waits in the kernel's buffers, acknowledged, and goes nowhere)."""
        ends = {pair.client: pair.server, pair.server: pair.client}
        while not pair.closed and not self.stopping:
            if pair.silent:
                time.sleep(0.05)
                continue
            try:
                readable, _, _ = select.select(list(ends), [], [], 0.05)
            except (OSError, ValueError):
                break
            if pair.silent:
                continue
            done = False
            for sock in readable:
                try:
                    data = sock.recv(65536)
                    if not data:
                        done = True
                        break
                    ends[sock].sendall(data)
                except OSError:
                    done = True
                    break
            if done:
                break
        if not pair.silent:  # a silent pair keeps its sockets open until the proxy closes
            pair.close()

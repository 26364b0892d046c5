"""What the deadlines of :mod:`mvlog.postgres.deadlines` share with the watchdog and the
abandoning of connections below them: a call's bound, the owner of connections, and the state a
watched connection carries."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple, Protocol


class Bound(NamedTuple):
    """How long a call may wait, and the setting that says so (named in the error)."""

    seconds: float
    setting: str


class Owner(Protocol):
    """What a watched connection asks of the :class:`~mvlog.postgres.source.Source` that opened it."""

    def bound(self) -> Bound: ...

    def longest(self) -> Bound:
        """How long a call the server is still computing may run in all."""
        ...

    def computing(self, conn: Watchable) -> bool:
        """Whether ``conn``'s backend is computing its call (asked on another connection, within
        the connect bound; an error is raised when the server cannot be asked)."""
        ...

    def abandon(self, reason: str) -> None: ...


class Watchable:
    """What every connection mvlog opens carries: its owner, whether (and why) it was abandoned,
    when it was opened, its backend (:class:`~mvlog.postgres.deadlines.Watched` adds the deadline
    around a call)."""

    owner: Owner | None = None
    abandoned: str | None = None
    extendable = False  # a call past its bound gets another while the server computes it
    opened_at: float = 0.0
    backend: tuple[tuple[str, str, str], int, str] | None = None  # server, pid, application name
    fd_lock: threading.Lock

    def watch_init(self) -> None:
        self.opened_at = time.monotonic()
        self.fd_lock = threading.Lock()

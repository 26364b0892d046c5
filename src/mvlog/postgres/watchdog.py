"""The watchdog of :mod:`mvlog.postgres.deadlines`: one thread that finds the calls past their
deadlines, and the settling of each (extended while the server computes it, else its connection
abandoned: :func:`mvlog.postgres.abandoning.abandon`)."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from mvlog.postgres.abandoning import abandon

if TYPE_CHECKING:
    from mvlog.postgres.watched import Bound, Watchable


class Deadline(NamedTuple):
    """One call's bounds: ``limit`` without an answer, ``longest`` in all while the server computes it."""

    what: str
    sent: datetime
    limit: Bound
    longest: Bound

    def reason(self, computed: float | None) -> str:
        """Why the call's connection was abandoned (``computed``: seconds the server was seen computing it)."""
        sent = f"{self.what} sent at {self.sent:%H:%M:%S} UTC"
        if computed is None:
            return (f"PostgreSQL stopped answering: {sent} had no reply within {self.limit.seconds:g} s "
                    f"({self.limit.setting}); its connection was abandoned")
        if computed >= self.longest.seconds:
            return (f"PostgreSQL did not finish {sent} within {self.longest.seconds:g} s ({self.longest.setting}), "
                    f"though it was still computing it; its connection was abandoned")
        return (f"PostgreSQL stopped answering: {sent} was computed for over {computed:.0f} s, past "
                f"{self.limit.seconds:g} s ({self.limit.setting}), then its backend neither computed nor "
                f"answered; its connection was abandoned")


@dataclass(order=True)
class _Arm:
    deadline: float
    seq: int
    conn: Watchable = field(compare=False)
    call: Deadline = field(compare=False)
    started: float = field(default=0.0, compare=False)
    computed: float | None = field(default=None, compare=False)  # seconds seen computing, once extended
    done: bool = field(default=False, compare=False)  # disarmed: the call returned


class Watchdog:
    """One thread that finds the calls past their deadlines; each is settled on a thread of its
    own (a look at the server may wait for the connect bound): extended while the server computes
    it, else its connection abandoned."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[_Arm] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, conn: Watchable, call: Deadline) -> _Arm:
        now = time.monotonic()
        arm = _Arm(now + call.limit.seconds, next(self._seq), conn, call, now)
        with self._cond:
            self._push(arm)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mvlog-deadlines", daemon=True)
                self._thread.start()
        return arm

    def _push(self, arm: _Arm) -> None:
        heapq.heappush(self._heap, arm)
        if self._heap[0] is arm:
            self._cond.notify()

    def disarm(self, arm: _Arm) -> None:
        with self._cond:
            arm.done = True

    def _run(self) -> None:
        while True:
            expired: list[_Arm] = []
            with self._cond:
                while self._heap and self._heap[0].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait(60)
                    continue
                wait = self._heap[0].deadline - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                while self._heap and (self._heap[0].done or self._heap[0].deadline <= time.monotonic()):
                    arm = heapq.heappop(self._heap)
                    if not arm.done:
                        expired.append(arm)
            for arm in expired:
                threading.Thread(target=self._settle, args=(arm,), name="mvlog-deadline", daemon=True).start()

    def _settle(self, arm: _Arm) -> None:
        """Extend a call past its deadline by its bound while its backend computes it (up to its
        longest), else abandon its connection."""
        computed = time.monotonic() - arm.started
        computing = False
        owner = arm.conn.owner
        # (a call never extended has its limit as its longest: past it, no look)
        if owner is not None and computed < arm.call.longest.seconds:
            with contextlib.suppress(Exception):  # the server cannot be asked: as silent as the call
                computing = owner.computing(arm.conn)
        with self._cond:
            if arm.done:
                return
            if computing:
                arm.computed = computed
                arm.deadline = min(time.monotonic() + arm.call.limit.seconds, arm.started + arm.call.longest.seconds)
                arm.seq = next(self._seq)
                self._push(arm)
                return
            arm.done = True
        # Extended once: computing until its longest (the elapsed time), or until last seen so.
        seen = computed if arm.computed is not None and computed >= arm.call.longest.seconds else arm.computed
        abandon(arm.conn, arm.call.reason(seen))


WATCHDOG = Watchdog()

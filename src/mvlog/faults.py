"""Fault points for crash testing: ``MVLOG_FAULT=<point>`` SIGKILLs the process when it gets there.

Points, in refresh order: ``before_stamp`` (view locked, nothing stamped), ``after_stamp``
(log rows stamped, nothing read), ``after_read`` (rows read from PostgreSQL, Delta untouched),
``during_merge`` (half a second into the Delta MERGE), ``after_delta_commit`` (Delta
committed, last_V and key map not yet recorded), ``after_record`` (last_V recorded, logs
not purged).
"""

from __future__ import annotations

import os
import signal
import threading

POINTS = ("before_stamp", "after_stamp", "after_read", "during_merge", "after_delta_commit", "after_record")


def checkpoint(point: str) -> None:
    """Die here, abruptly, if the environment asks for it."""
    assert point in POINTS, point
    if os.environ.get("MVLOG_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, delay: float = 0.5) -> None:
    """Die ``delay`` seconds from now (in the middle of what follows), if asked to at ``point``."""
    assert point in POINTS, point
    if os.environ.get("MVLOG_FAULT") == point:
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()

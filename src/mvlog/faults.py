"""Fault points for crash and overlap testing: ``MVLOG_FAULT=<point>`` SIGKILLs the process when
it gets there; ``MVLOG_PAUSE=<point>:<seconds>`` sleeps there (holding whatever it holds).

Points, in refresh order: ``before_stamp`` (view locked, nothing stamped), ``before_snapshot``
(the stamp's locks held and its capture pass done, its snapshot not taken: a transaction
committing here is in it, its decoded rows late), ``after_snapshot``
(the stamp's snapshot taken, nothing stamped: a transaction committing here is not in it), ``after_stamp``
(log rows stamped, nothing read), ``after_read`` (rows read from PostgreSQL, Delta untouched),
``during_merge`` (half a second into the Delta MERGE), ``after_delta_commit`` (Delta
committed, last_V and key map not yet recorded), ``after_record`` (last_V recorded, logs
not purged). And in the logical capture: ``capture_batch`` (a batch of log rows committed, the
slot not advanced; in a pass, its position not yet recorded either).
"""

from __future__ import annotations

import os
import signal
import threading
import time

POINTS = ("before_stamp", "before_snapshot", "after_snapshot", "after_stamp", "after_read", "during_merge",
          "after_delta_commit", "after_record", "capture_batch")


def checkpoint(point: str) -> None:
    """Die here, abruptly, or pause here, if the environment asks for it."""
    assert point in POINTS, point
    if os.environ.get("MVLOG_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)
    paused_at, _, seconds = os.environ.get("MVLOG_PAUSE", "").partition(":")
    if paused_at == point:
        time.sleep(float(seconds or 1))


def arm(point: str, delay: float = 0.5) -> None:
    """Die ``delay`` seconds from now (in the middle of what follows), if asked to at ``point``."""
    assert point in POINTS, point
    if os.environ.get("MVLOG_FAULT") == point:
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()

"""Fault points for crash testing: ``MVLOG_FAULT=<point>`` SIGKILLs the process when it gets there.

Points, in refresh order: ``after_stamp`` (log rows stamped, nothing read), ``after_read``
(rows read from PostgreSQL, Delta untouched), ``after_delta_commit`` (Delta committed,
last_V and key map not yet recorded), ``after_record`` (last_V recorded, logs not purged).
"""

from __future__ import annotations

import os
import signal

POINTS = ("after_stamp", "after_read", "after_delta_commit", "after_record")


def checkpoint(point: str) -> None:
    """Die here, abruptly, if the environment asks for it."""
    assert point in POINTS, point
    if os.environ.get("MVLOG_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)

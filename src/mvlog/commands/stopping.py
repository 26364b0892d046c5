"""How a long-running command (``mvlog schedule``, ``mvlog capture``) stops on SIGTERM or SIGINT:
its work runs beside the main thread, which stays free for signal handlers
(:func:`beside_signals`), and a stop is bounded whatever hangs (:func:`stop_within`)."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

STOP_GRACE = 15.0  # seconds the work in flight may take to end after SIGTERM before it is given up
STOP_FORCE = 27.0  # seconds after SIGTERM at which the process exits whatever still runs


def stop_within(stopped: threading.Event, give_up: Callable[[str], None], log: Callable[[str], None],
                grace: float = STOP_GRACE, force: float = STOP_FORCE) -> None:
    """After a stop was asked for: wait ``grace`` seconds for the work in flight to end (``stopped``),
    then give it up (``give_up``: its PostgreSQL calls abandoned, its Spark work interrupted), and
    at ``force`` seconds exit the process whatever still runs. A connection that stopped answering
    never keeps a stopped scheduler alive: nor does what the process does once its work ended (its
    connections closed, its sessions released), which ends it with 0 at ``force`` seconds, saying
    where it was (a stopped scheduler once outlived its stop by more than 35 s, session 65)."""
    started = time.monotonic()
    if not stopped.wait(grace):
        if grace:
            log(f"the work in flight did not end within {grace:g} s of the stop: giving it up")
        give_up("the process is stopping")
        if not stopped.wait(force - grace):
            log(f"stopped: the work in flight did not end within {force:g} s of the stop")
            os._exit(1)
    time.sleep(max(0.0, force - (time.monotonic() - started)))  # a process that exits ends this thread
    log(f"stopped, but closing did not end within {force:g} s of the stop (at {_main_thread_at()}): exiting")
    os._exit(0)


def _main_thread_at() -> str:
    """Where the main thread is: its innermost frames, as file:line function."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    if frame is None:
        return "the main thread has ended"
    return " < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                      for f in reversed(traceback.extract_stack(frame)[-4:]))


def beside_signals(work: Callable[[], None], done: threading.Event) -> None:
    """Run ``work`` on a thread of its own, setting ``done`` when it ends, while the main thread waits
    and stays free to run signal handlers: Python runs them on the main thread only, and only once
    the C call it is in returns — a libpq call waiting on a silent connection would hold a SIGTERM
    back for its whole bound. ``work``'s exception is raised here."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 — raised again on the main thread
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, name="mvlog-loop")
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
    if failure:
        raise failure[0]

"""A stop asked for by SIGTERM ends the process within its bound, whatever hangs (no database)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

PROGRAM = """
import threading, time
from mvlog.commands.stopping import stop_within
stopped = threading.Event()
def give_up(reason):
    print("given up:", reason, flush=True)
threading.Thread(target=stop_within, args=(stopped, give_up, lambda line: print(line, flush=True), 0.2, 2.0),
                 daemon=True).start()
if {work_ends}:
    stopped.set()
def closing_hangs():
    time.sleep(60)  # as a close on a connection that stopped answering
closing_hangs()
"""


@pytest.mark.parametrize(("work_ends", "code", "said"), [
    (True, 0, "stopped, but closing did not end within 2 s of the stop (at <string>:12 closing_hangs"),
    (False, 1, "stopped: the work in flight did not end within 2 s of the stop"),
])
def test_a_stopped_process_exits_at_the_bound_whatever_hangs(work_ends, code, said):
    """Work that never ends exits 1; work that ended but whose closing hangs exits 0, saying where."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(work_ends=work_ends)], capture_output=True,
                          text=True, timeout=30)
    assert time.monotonic() - started < 20, "the process outlived its bound"
    assert done.returncode == code, done.stdout + done.stderr
    assert said in done.stdout, done.stdout
    assert ("given up: the process is stopping" in done.stdout) is (not work_ends)

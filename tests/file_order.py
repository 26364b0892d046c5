"""The order the suite hands its test files to the two workers: the longest first.

``--dist loadfile`` gives a worker a whole file at a time, in the order the files were collected,
and pytest-xdist by default reorders the files by their number of tests, most first. The many
small unit-test files went first and the files of one or two long tests last — among them the
schedulers' tests, which mostly wait — so a run ended with one worker waiting out a scheduler
test while the other had nothing left (a third to half of the two cores idle for its last
two minutes, vmstat, docs/testing.md session 54). Longest first, the last files handed out are
short ones and both workers end together (the longest-processing-time rule).

A file's seconds are its wall seconds in a whole run (``file_seconds.json`` beside this module:
the file a run with the ``suite_cpu`` plugin writes, docs/testing.md); a file not in it counts as
``UNKNOWN_SECONDS``. Only the order changes: the same tests run either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

SECONDS_FILE = Path(__file__).with_name("file_seconds.json")
UNKNOWN_SECONDS = 10.0  # a new file: about an integration file's median
T = TypeVar("T")


def file_of(nodeid: str) -> str:
    """The test file of a pytest node id (``tests/x/test_y.py::test_z[p]`` -> ``tests/x/test_y.py``)."""
    return nodeid.split("::", 1)[0]


def longest_files_first(items: Sequence[T], nodeid: Callable[[T], str], seconds: dict[str, float]) -> list[T]:
    """``items`` with their files ordered by ``seconds``, longest first (ties and unknown files in
    their collection order), each file's items together and in their own order."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(file_of(nodeid(item)), len(first_seen))

    def key(item: T) -> tuple[float, int]:
        path = file_of(nodeid(item))
        return -seconds.get(path, UNKNOWN_SECONDS), first_seen[path]

    return sorted(items, key=key)


def load_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    """The committed seconds of each test file ({} without the file)."""
    return json.loads(path.read_text()) if path.exists() else {}

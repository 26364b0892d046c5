"""The suite hands its files to the workers longest first (tests/file_order.py)."""

from __future__ import annotations

import random

from file_order import file_of, load_seconds, longest_files_first


def test_files_go_longest_first_each_whole_and_in_its_own_order():
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/a.py::t2", "tests/c.py::t[1]", "tests/new.py::t",
           "tests/b.py::t2", "tests/c.py::t[2]"]
    seconds = {"tests/a.py": 3.0, "tests/b.py": 120.0, "tests/c.py": 3.0}
    assert longest_files_first(ids, str, seconds) == [
        "tests/b.py::t1", "tests/b.py::t2", "tests/new.py::t",  # a file not in the seconds: 10 s
        "tests/a.py::t1", "tests/a.py::t2", "tests/c.py::t[1]", "tests/c.py::t[2]"]
    shuffled = random.sample(ids, len(ids))
    again = longest_files_first(shuffled, str, seconds)
    assert sorted(again) == sorted(ids) and [file_of(i) for i in again][:2] == ["tests/b.py"] * 2


def test_the_committed_seconds_name_the_suite_s_files(pytestconfig):
    seconds = load_seconds()
    assert len(seconds) > 100, "tests/file_seconds.json is missing or short"
    gone = [name for name in seconds if not (pytestconfig.rootpath / name).exists()]
    assert len(gone) <= len(seconds) // 10, f"tests/file_seconds.json names files that are gone: {gone}"

"""Fixtures of the capture tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def logical(db, make_project):
    """A project whose one table ``t (id int PRIMARY KEY, v int)``, empty, is captured logically."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    project = make_project([{"table": "t", "capture": "logical"}], [])
    project.apply()
    return project

"""Fixtures of the PostgreSQL layer's tests."""

from __future__ import annotations

import pytest

from mvlog.apply import Registration
from mvlog.errors import UsageError


@pytest.fixture
def registered(db, make_project):
    """A project whose view ``v`` is registered (apply's catalog step only: nothing is built)."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int)")
    project = make_project(["t"], [{"name": "v", "query": "SELECT id, a FROM t"}])
    with pytest.raises(UsageError, match="not installed in this database yet"):
        project.catalog.check()
    report = Registration()
    with project.source.transaction() as cur:
        project.registrar.register(cur, report)
    assert (report.logs_created, report.views_registered) == (["public.t"], ["v"])
    return project

"""The shipped examples work: build, change, fast refresh, and every view equals PostgreSQL."""

from __future__ import annotations

import pytest
from conftest import assert_view_matches

from mvlog.commands.demo import examples_dir
from mvlog.config import load_config
from mvlog.project import Project

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("example", ["shop", "tpch"])
def test_example_fast_refresh_matches_postgres(example, db, tmp_path, monkeypatch):
    folder = examples_dir() / example
    db.execute((folder / "schema.sql").read_text())
    config_text = (folder / "mvlog.yaml").read_text().replace("warehouse: ./warehouse", f"warehouse: {tmp_path / 'wh'}")
    (tmp_path / "mvlog.yaml").write_text(config_text)
    monkeypatch.setenv("MVLOG_DEMO_DSN", db.dsn)
    with Project(load_config(tmp_path / "mvlog.yaml")) as project:
        builds = project.apply().builds
        assert [r.error for r in builds] == [None] * len(project.config.views)
        explained = {v.name: project.explain(v.name) for v in project.config.views}
        assert all(next(c for c in e.capabilities if c.name == "REFRESH_FAST").possible for e in explained.values())
        db.execute((folder / "changes.sql").read_text())
        results = project.refresh()
        assert [(r.view, r.method, r.error) for r in results] == [(v.name, "fast", None) for v in project.config.views]
        assert all(r.keys_read > 0 for r in results)
        for view in project.config.views:
            assert_view_matches(project, view.name)

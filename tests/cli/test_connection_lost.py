"""A one-shot command whose PostgreSQL connections are cut mid-run (as a restart or a failover cuts
them) says so in one sentence and exits 1; nothing is left half-applied: the next run converges."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import assert_views_match
from test_cli import assert_one_line_error, run, write_config

from mvlog.config import load_config
from mvlog.project import Project

pytestmark = pytest.mark.integration

CUT = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
       "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE 'mvlog%'")


def commits(tmp_path) -> list[str]:
    """The commit files of the view's Delta log."""
    return [f for f in os.listdir(tmp_path / "wh" / "names" / "_delta_log") if f.endswith(".json")]


def test_a_refresh_cut_off_after_its_read_fails_in_one_line_and_the_next_converges(db, tmp_path, connect_engine):
    db.execute("CREATE TABLE c (id int PRIMARY KEY, name text);"
               "CREATE TABLE o (id int PRIMARY KEY, c_id int, amount int);"
               "INSERT INTO c SELECT g, 'c' || g FROM generate_series(1, 10) g;"
               "INSERT INTO o SELECT g, 1 + g % 10, g FROM generate_series(1, 50) g")
    view = {"name": "names", "query": "SELECT o.id, c.name, o.amount FROM o JOIN c ON c.id = o.c_id"}
    config = write_config(tmp_path, db.dsn, ["c", "o"], [view], remote=connect_engine.remote)
    assert run(config, "apply").returncode == 0
    db.execute("INSERT INTO o VALUES (100, 3, 7)")
    built = len(commits(tmp_path))
    # Paused after its Delta commit: every PostgreSQL session of the refresh is cut there, its
    # snapshot's with them; it cannot record what it wrote.
    env = {**os.environ, "TZ": "UTC", "MVLOG_PAUSE": "after_delta_commit:3"}
    refresh = subprocess.Popen([sys.executable, "-m", "mvlog", "-q", "-c", str(config), "refresh"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(commits(tmp_path)) <= built:  # this refresh's commit
        assert time.monotonic() < deadline and refresh.poll() is None, refresh.communicate()
        time.sleep(0.1)
    assert db.execute(CUT)[0][0] >= 1
    stdout, stderr = refresh.communicate(timeout=300)
    assert_one_line_error(subprocess.CompletedProcess(refresh.args, refresh.returncode, stdout, stderr), 1,
                          "refresh of view names failed: PostgreSQL: the refresh's snapshot is gone: the "
                          "connection that held it was lost")
    ((status, error),) = db.execute("SELECT status, error FROM mvlog.refresh_history WHERE method = 'fast'")
    assert status == "failed" and "snapshot is gone" in error, error  # ended by the process that ran it
    # The row the lost refresh wrote to Delta is deleted before the next refresh: it must leave the view.
    db.execute("DELETE FROM o WHERE id = 100")
    db.execute("UPDATE c SET name = 'renamed' WHERE id = 4")
    assert run(config, "refresh").returncode == 0
    with Project(load_config(config)) as project:
        assert_views_match(project, ["names"])
        assert [h.method for h in project.history("names", 1)] == ["fast"]
        # The unrecorded commit was taken back (RESTORE), then the fast refresh applied the window.
        operations = [r["operation"] for r in project.warehouse.history(project.config.view_location("names"))
                      .select("operation").collect()]
        assert operations[1] == "RESTORE", operations

"""Late rows are bounded (#48, item 4), PostgreSQL only.

Rows of transactions a stamp's snapshot sees, but that the logical capture wrote after it, are
read as literals in every statement of the refresh. Above ``LATE_ROWS_MAX`` the stamp is taken
again, so no statement carries thousands of them; the window still holds every key.
"""

from __future__ import annotations

import threading
import time

import pytest

from mvlog.postgres import logs as logs_module

pytestmark = pytest.mark.integration

WRITES = 40


def write_during_pause(db, started: threading.Event) -> None:
    """Commit WRITES single-row transactions while the stamp pauses before its snapshot."""
    started.wait(10)
    time.sleep(0.2)
    for i in range(WRITES):
        db.execute("INSERT INTO t VALUES (%s, 0)", (1000 + i,))


@pytest.mark.parametrize("bound", [5, 100_000])
def test_a_stamp_with_many_late_rows_is_taken_again(db, make_project, monkeypatch, bound):
    """Transactions commit after the stamp's capture pass and before its snapshot: the capture
    writes their rows after the snapshot. With the bound below their number the stamp is taken
    again and hands the refresh few late rows; with a bound above it, all of them (which shows
    the scenario makes them). Either way the window holds every committed key."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    project = make_project([{"table": "t", "capture": "logical"}], [])
    project.apply()
    (log,) = project.logs.registered().values()
    monkeypatch.setattr(logs_module, "LATE_ROWS_MAX", bound)
    monkeypatch.setenv("MVLOG_PAUSE", "before_snapshot:1.5")
    started = threading.Event()
    writer = threading.Thread(target=write_during_pause, args=(db, started))
    writer.start()
    started.set()
    try:
        with project.logs.stamp([log]) as stamped:
            monkeypatch.delenv("MVLOG_PAUSE")
            late = len(stamped.late)
            # The window as a first refresh reads it at the snapshot: every log row (rows a pass
            # wrote before the snapshot still show the sentinel there) and the late rows.
            ((keys,),) = stamped.query(f'SELECT count(DISTINCT id) FROM mvlog."{log.log_name}"')
            ((visible,),) = stamped.query("SELECT count(*) FROM t")
    finally:
        writer.join()
    assert visible == keys > 0  # the window holds exactly the keys the snapshot sees
    if bound == 5:
        assert late <= 5
    else:
        assert late >= 10, late  # the first stamp had them late: the bound is what took it again


VIEWS = [
    {"name": "pairs", "refresh": "fast", "query": "SELECT t.id, u.w FROM t JOIN u ON u.id = t.v"},
    {"name": "per_v", "refresh": "fast", "query": "SELECT v, count(*) AS n, sum(id) AS s FROM t GROUP BY v"},
]


@pytest.mark.parametrize("capture", ["trigger", "logical"])
def test_apply_plans_the_statements_a_refresh_runs_with_late_rows(db, make_project, monkeypatch, capture):
    """A refresh reads a logical log with its late rows (the log UNION ALL their arrays): apply has
    PostgreSQL plan those statements too, not only the ones without."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int); CREATE TABLE u (id int PRIMARY KEY, w text)")
    logs = [{"table": "t", "capture": capture}, {"table": "u", "capture": capture}]
    make_project(logs, []).apply()
    project = make_project(logs, VIEWS)
    planned: list[str] = []
    original = project.source.check_statements
    monkeypatch.setattr(project.source, "check_statements",
                        lambda cur, statements, setup=(): (planned.extend(statements),
                                                           original(cur, statements, setup))[1])
    registered = {log.table_oid: log for log in project.logs.registered().values()}
    with project.source.transaction() as cur:
        checks = [project.registrar.compiler.compile_view(cur, i, view, registered, check_refresh_sql=True)
                  for i, view in enumerate(project.config.views)]
    assert all(check.shape.fast_possible for check in checks)
    with_late = [s for s in planned if "unnest(" in s.lower()]
    assert (len(with_late) > 0) == (capture == "logical"), planned
    assert len(with_late) <= len(planned) // 2

"""Every refresh records the Delta version it left its view at, and a view can be read as of a
source time: the version of its newest refresh stamped at or before that time (a refresh group's
views at their newest common stamp)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from conftest import refresh_ok

import mvlog.commands.notebook as mvn
from mvlog.commands.cli import main
from mvlog.errors import UsageError

pytestmark = pytest.mark.integration

SETUP = """
CREATE TABLE acct (id integer PRIMARY KEY, region text, balance numeric(12,2));
INSERT INTO acct SELECT i, 'r' || (i % 3), i * 10.5 FROM generate_series(1, 30) AS i;
"""
VIEWS = [
    {"name": "accts", "refresh": "fast", "group": "books", "query": "SELECT id, region, balance FROM acct"},
    {"name": "by_region", "refresh": "fast", "group": "books",
     "query": "SELECT region, count(*) AS n, sum(balance) AS total FROM acct GROUP BY region"},
    {"name": "rich", "refresh": "fast", "query": "SELECT id, balance FROM acct WHERE balance > 200"},
]
QUERIES = {v["name"]: v["query"] for v in VIEWS}


@pytest.fixture
def project(db, make_project):
    db.execute(SETUP)
    project = make_project(["acct"], VIEWS)
    assert not [r for r in project.apply().builds if r.error]
    return project


def source_rows(db, view: str) -> list[tuple]:
    return sorted(db.execute(QUERIES[view]), key=repr)


def delta_rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def delta_stamps(project, view: str) -> dict[int, str | None]:
    """Delta version -> the snaptime in mvlog's commit metadata."""
    rows = project.warehouse.history(project.config.view_location(view)).collect()
    return {r["version"]: (json.loads(r["userMetadata"])["mvlog"].get("snaptime") if r["userMetadata"] else None)
            for r in rows}


def test_history_records_versions_and_views_read_as_of_a_source_time(project, db, tmp_path, capsys):
    config_path = str(tmp_path / "mvlog.yaml")
    states: list[tuple] = []  # ({view: its stamp}, {view: rows in PostgreSQL at that stamp})
    for i in range(3):
        db.execute("UPDATE acct SET balance = balance + %s WHERE id %% 4 = %s", (7 * (i + 1), i))
        db.execute("DELETE FROM acct WHERE id = %s", (20 + i,))
        db.execute("INSERT INTO acct VALUES (%s, 'r9', 250)", (100 + i,))
        expected = {v: source_rows(db, v) for v in QUERIES}
        states.append(({v: r.snaptime for v, r in refresh_ok(project).items()}, expected))
    # A refresh with nothing to write keeps the version before it, and its stamp (recorded fresh).
    quiet = {v: r.snaptime for v, r in refresh_ok(project).items()}
    assert quiet["accts"] == quiet["by_region"] != quiet["rich"]  # a group shares its stamp
    assert quiet == states[-1][0]

    for view in QUERIES:
        history = project.history(view, 10)
        assert [h.status for h in history] == ["succeeded"] * 5
        written = delta_stamps(project, view)
        for row in history[1:]:  # each refresh that wrote: its version's commit carries its stamp
            assert written[row.delta_version] == row.snaptime.isoformat(), (view, row)
        assert history[0].snaptime == quiet[view] and history[0].delta_version == history[1].delta_version

    # As of a stamp, just after it, and just before the next: the state at that stamp.
    for view in QUERIES:
        for n, (stamps, expected) in enumerate(states):
            stamp = stamps[view]
            following = states[n + 1][0][view] if n + 1 < len(states) else quiet[view] + timedelta(seconds=1)
            # read_view reads the version version_as_of finds: one read per state, at its last moment
            found = {mvn.version_as_of(view, at, config_path=config_path)
                     for at in (stamp, stamp + timedelta(microseconds=1), following - timedelta(microseconds=1))}
            assert len(found) == 1 and next(iter(found))[1] == stamp, (view, n, found)
            at = following - timedelta(microseconds=1)
            assert delta_rows(mvn.read_view(view, config_path, as_of=at)) == expected[view], (view, n, at)
    # ISO text, with a time zone, works as well.
    text = states[1][0]["rich"].isoformat()
    assert delta_rows(mvn.read_view("rich", config_path, as_of=text)) == states[1][1]["rich"]

    # One view of the group refreshed alone: the group's reads stay at the stamp both share.
    db.execute("UPDATE acct SET balance = 0 WHERE id = 1")
    alone = refresh_ok(project, ["accts"])["accts"].snaptime
    db.execute("UPDATE acct SET balance = 1 WHERE id = 2")
    assert refresh_ok(project, ["rich"])["rich"].snaptime > alone
    for view in ("accts", "by_region"):
        assert mvn.version_as_of(view, alone + timedelta(seconds=1), config_path=config_path)[1] == quiet[view]
    refresh_ok(project, ["accts", "by_region"])
    both = mvn.version_as_of("accts", alone + timedelta(days=1), config_path=config_path)
    assert both[1] > alone
    assert delta_rows(mvn.read_view("by_region", config_path, as_of=both[1])) == source_rows(db, "by_region")

    # A history row from before versions were recorded: found through the Delta commits' stamps.
    stamp = states[1][0]["rich"]
    recorded = mvn.version_as_of("rich", stamp, config_path=config_path)
    db.execute("UPDATE mvlog.refresh_history SET delta_version = NULL WHERE view_name = 'rich'")
    assert mvn.version_as_of("rich", stamp, config_path=config_path) == recorded

    # Before the first refresh: a clear error.
    first = project.history("accts", 50)[-1].snaptime
    with pytest.raises(UsageError, match="refresh group 'books' has no refresh at or before"):
        mvn.version_as_of("accts", first - timedelta(seconds=1), config_path=config_path)

    # The CLI's history shows the stamps and versions.
    assert main(["-q", "-c", config_path, "history", "accts", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [r["delta_version"] for r in shown] == [h.delta_version for h in project.history("accts", 20)]

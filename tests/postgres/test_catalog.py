"""mvlog's catalog on a real PostgreSQL (no Spark): registration, view state, locks, history, purge horizon,
verify results."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import psycopg2.errors
import pytest

from mvlog.errors import ConcurrentRefreshError, UsageError
from mvlog.model import NOT_BUILT, RefreshMethod
from mvlog.ops.verify import Mismatch, VerifyResult
from mvlog.pipeline.apply import Registration
from mvlog.postgres.catalog import SCHEMA_VERSION
from mvlog.postgres.locks import VIEW_LOCK_NAMESPACE, close_releasing_locks
from mvlog.spark.warehouse import WriteCounts

pytestmark = pytest.mark.integration


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


def test_a_registered_view_waits_for_its_build_and_pins_its_log(registered):
    catalog = registered.catalog
    catalog.check()
    state = catalog.view_state("v")
    assert state.last_snaptime is None and state.needs_complete == "the view is new"
    assert catalog.unbuilt_views() == {"v"}
    assert [v["staleness"] for v in registered.status()["views"]] == ["needs_complete"]
    log = registered.logs.registered()["public.t"]
    stamp = datetime(2026, 11, 22, 3, 1, 2, 123456, tzinfo=UTC)
    with registered.source.transaction() as cur:
        assert catalog.dependents(cur, log) == ["v"]
        assert catalog.purge_horizon(cur, log) is None  # v never refreshed: nothing may be purged
        catalog.record_refresh(cur, "v", stamp, RefreshMethod.COMPLETE, 0, None)
        assert catalog.purge_horizon(cur, log) == stamp
    state = catalog.view_state("v")
    assert (state.last_snaptime, state.needs_complete, state.row_count) == (stamp, None, 0)
    assert catalog.unbuilt_views() == set()
    with registered.source.transaction() as cur:
        assert catalog.unregister(cur, "v") == registered.config.view_location("v")
        assert catalog.unregister(cur, "v") is None
        assert catalog.purge_horizon(cur, log) is None  # nobody reads it and it was never stamped
    with pytest.raises(UsageError, match="view v is not registered yet"):
        catalog.view_state("v")


def test_a_view_lock_refuses_a_second_holder_until_released(registered):
    catalog = registered.catalog
    with catalog.lock_views(["v"]):
        with pytest.raises(ConcurrentRefreshError) as busy:
            with catalog.lock_views(["v"], wait=0.2):
                pass
        # The holder is named by its process and host, and when it took the lock.
        assert busy.value.holder.startswith(f"pid {os.getpid()} on {socket.gethostname()} since "), busy.value.holder
        assert str(busy.value).startswith("view v is being refreshed by pid ") and busy.value.transient
    with catalog.lock_views(["v"]):
        pass


def test_a_view_lock_is_free_as_soon_as_its_holder_lets_go(registered, closes_late):
    """The server frees a closed session's locks a moment after the client went (under load, after
    the next refresh had tried them: a clean-clone run failed so). Simulated: the lock session's
    close reaches the server only at the end of the test."""
    closes_late(registered.source)
    with registered.catalog.lock_views(["v"]):
        pass
    with registered.catalog.lock_views(["v"]):  # not "view v is being refreshed by pid …"
        pass


def test_a_session_whose_transaction_failed_frees_its_locks_before_closing(registered, closes_late):
    """A session whose transaction failed (a stamp's, mid-transaction: it then refuses every
    statement but a rollback) still frees its advisory locks before it closes."""
    closes_late(registered.source)
    conn = registered.source.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(%s, 7)", (VIEW_LOCK_NAMESPACE,))
        with pytest.raises(psycopg2.errors.DivisionByZero):
            cur.execute("SELECT 1 / 0")
    close_releasing_locks(conn)
    with registered.source.transaction() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s, 7)", (VIEW_LOCK_NAMESPACE,))
        assert cur.fetchone() == (True,)


def test_recording_a_view_unchanged_leaves_out_a_view_another_refresh_holds(registered):
    """The refresh that holds the view records it from its snapshot: recording it unchanged in
    between would update its row after that snapshot and fail the refresh's record."""
    catalog, source = registered.catalog, registered.source
    first = datetime(2026, 11, 22, 3, 1, 2, tzinfo=UTC)
    with source.transaction() as cur:
        catalog.record_refresh(cur, "v", first, RefreshMethod.COMPLETE, 0, None)
    second = datetime(2026, 11, 22, 3, 2, 0, tzinfo=UTC)
    with catalog.lock_views(["v"]), source.exported_snapshot() as (snapshot, _):
        assert catalog.record_unchanged([["v"]]) == {}  # left to the refresh that holds it
        with source.snapshot_transaction(snapshot) as cur:
            catalog.record_refresh(cur, "v", second, RefreshMethod.FAST, 0, None)
    assert catalog.record_unchanged([["v"]]) == {"v": (second, 0)}
    assert registered.history("v")[0].method == "fresh"


def test_history_rows_are_typed_and_interrupted_runs_are_closed(registered):
    catalog = registered.catalog
    stamp = datetime(2026, 11, 22, 3, 1, 2, tzinfo=UTC)
    done = catalog.history_start("v", RefreshMethod.FAST, "changed keys since the last refresh", stamp)
    catalog.history_end(done, WriteCounts(3, 1, 1, 1), method=RefreshMethod.COMPLETE, reason="a table was truncated")
    catalog.history_start("v", RefreshMethod.FAST, "changed keys since the last refresh", stamp)
    catalog.close_interrupted(["v"])
    newest, oldest = registered.history("v")
    assert (newest.status, newest.method) == ("failed", "fast")
    assert newest.error == "interrupted: the refresh process ended before finishing"
    assert (oldest.status, oldest.method, oldest.reason, oldest.keys_read, oldest.rows_deleted) == (
        "succeeded", "complete", "a table was truncated", 3, 1)
    assert isinstance(oldest.seconds, float) and oldest.seconds >= 0
    data = oldest.to_json()
    assert data["snaptime"] == stamp.isoformat() and data["error"] is None and data["id"] == done
    with pytest.raises(UsageError, match="view nope is not registered"):
        registered.history("nope")


def test_measured_marks_the_build_and_each_method_s_first_refresh_after_each_build(registered):
    """force's samples (pipeline/cost.py): the build, and the first fast and complete refreshes after it,
    taken cold."""
    catalog = registered.catalog
    stamp = datetime(2026, 12, 2, 3, 0, 0, tzinfo=UTC)

    def refresh(method: RefreshMethod, reason: str) -> None:
        catalog.history_end(catalog.history_start("v", method, reason, stamp), WriteCounts(1, 1, 0, 0),
                            method=method, reason=reason, window_keys=10 if method is RefreshMethod.FAST else None)

    refresh(RefreshMethod.COMPLETE, NOT_BUILT)
    for _ in range(2):
        refresh(RefreshMethod.FAST, "changed keys since the last refresh")
    failed = catalog.history_start("v", RefreshMethod.FAST, "changed keys since the last refresh", stamp)
    catalog.history_end(failed, WriteCounts(0, 0, 0, 0), error="boom")
    refresh(RefreshMethod.COMPLETE, NOT_BUILT)  # built again (a changed definition)
    refresh(RefreshMethod.COMPLETE, "force: a complete refresh is predicted cheaper")
    refresh(RefreshMethod.FAST, "changed keys since the last refresh")
    flags = [(m.method.value, m.build, m.first_after_build) for m in catalog.measured("v")]  # newest first
    assert flags == [("fast", False, True), ("complete", False, True), ("complete", True, False),
                     ("fast", False, False), ("fast", False, True), ("complete", True, False)]


def refused_then_upgraded(project, version: int) -> None:
    """A catalog of ``version`` is refused until installing it again (what 'mvlog apply' does) upgrades it."""
    with pytest.raises(UsageError, match=f"catalog in this database is version {version}, this mvlog needs "
                                         f"{SCHEMA_VERSION}; "
                                         "run 'mvlog apply'"):
        project.catalog.check()
    with project.source.transaction() as cur:
        project.catalog.install(cur)
    project.catalog.check()


def test_an_older_catalog_is_refused_until_apply_upgrades_it(registered, db):
    """A catalog of version 2 (before refresh_history.delta_version) is refused by name; installing
    again (what 'mvlog apply' does) upgrades it in place, keeping the history."""
    catalog = registered.catalog
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    first = catalog.history_start("v", RefreshMethod.COMPLETE, "the view is new", stamp)
    catalog.history_end(first, WriteCounts(rows_inserted=3, version=0))
    db.execute("ALTER TABLE mvlog.refresh_history DROP COLUMN delta_version")
    db.execute("DELETE FROM mvlog.schema_version WHERE version >= 3")
    refused_then_upgraded(registered, 2)
    # A refresh that wrote nothing keeps the version its predecessor recorded; one that failed has none.
    catalog.history_end(catalog.history_start("v", RefreshMethod.FAST, "r", stamp), WriteCounts(version=7))
    catalog.history_end(catalog.history_start("v", RefreshMethod.FAST, "r", stamp), WriteCounts())
    catalog.history_end(catalog.history_start("v", RefreshMethod.FAST, "r", stamp), WriteCounts(), error="boom")
    assert [(h.status, h.delta_version, h.rows_inserted) for h in catalog.history("v")] == [
        ("failed", None, 0), ("succeeded", 7, 0), ("succeeded", 7, 0), ("succeeded", None, 3)]


def test_verify_results_are_recorded_and_the_newest_of_each_view_read_back(registered):
    """Each result is recorded as its JSON; last_verify gives each view's newest, in one query for
    all names, with when it was verified; a view never verified (or unknown) has none."""
    catalog = registered.catalog
    assert catalog.last_verify(["v"]) == {}
    stamp = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    older = VerifyResult("v", "full", rows_compared=360, delta_version=3, snaptime=stamp, seconds=1.23456)
    newest = VerifyResult("v", "sample", status="repaired", rows_compared=40, pending_keys=2, mismatched=2,
                          mismatches=[Mismatch({"id": "1"}, {"id": "1", "a": "Grüße"}, None),
                                      Mismatch({"id": "2"}, None, {"id": "2", "a": None})],
                          delta_version=4, snaptime=stamp, repaired=2, seconds=0.5)
    other = VerifyResult("w", "full", status="failed", reason="view w has not been refreshed yet")
    before = datetime.now(UTC)
    for result in (older, newest, other):
        catalog.record_verify(result.to_json())
    last = catalog.last_verify(["v", "w", "nope"])
    assert set(last) == {"v", "w"}
    for name, result in (("v", newest), ("w", other)):
        found, expected = last[name], result.to_json()
        assert list(found) == [*expected, "verified_at"]  # the keys of to_json(), in its order
        assert before <= datetime.fromisoformat(found.pop("verified_at")) <= datetime.now(UTC)
        snaptime = found.pop("snaptime")  # ISO 8601 in the session's time zone: the same instant
        assert (datetime.fromisoformat(snaptime) if snaptime else None) == result.snaptime
        assert found == {k: v for k, v in expected.items() if k != "snaptime"}
    assert last["v"]["mismatches"][0]["delta"] == {"id": "1", "a": "Grüße"}
    assert last["w"]["delta_version"] is None and last["w"]["mismatches"] == []
    assert catalog.last_verify(["nope"]) == {} and catalog.last_verify([]) == {}


def test_a_catalog_of_version_7_gains_the_verify_results_when_apply_upgrades_it(registered, db):
    catalog = registered.catalog
    db.execute("DROP TABLE mvlog.verify_history")
    db.execute("DELETE FROM mvlog.schema_version WHERE version >= 8")
    refused_then_upgraded(registered, 7)
    catalog.record_verify(VerifyResult("v", "full", rows_compared=5).to_json())
    assert catalog.last_verify(["v"])["v"]["rows_compared"] == 5


def test_a_catalog_of_version_8_gains_each_refresh_s_phases_when_apply_upgrades_it(registered, db):
    """Refreshes recorded before version 9 have no phases; after the upgrade each records its own,
    and what the view's refreshes measured carries them (readscope decides by them)."""
    catalog = registered.catalog
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    catalog.history_end(catalog.history_start("v", RefreshMethod.COMPLETE, "r", stamp), WriteCounts(rows_inserted=3))
    db.execute("ALTER TABLE mvlog.refresh_history DROP COLUMN phases")
    db.execute("DELETE FROM mvlog.schema_version WHERE version >= 9")
    refused_then_upgraded(registered, 8)
    catalog.history_end(catalog.history_start("v", RefreshMethod.FAST, "r", stamp), WriteCounts(),
                        method=RefreshMethod.FAST, phases={"prepare": 0.25, "read_whole": 1.5})
    assert [m.phases for m in catalog.measured("v")] == [{"prepare": 0.25, "read_whole": 1.5}, {}]

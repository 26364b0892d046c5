"""The refresh history, and the one module that names its table in SQL: the row each refresh
starts and ends, the refreshes a killed process left running, the rows of views found unchanged,
the versions views were left at, and their lags. A part of
:class:`~mvlog.postgres.catalog.views.Catalog`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg2 import sql
from psycopg2.extras import Json

from mvlog.errors import MvlogError
from mvlog.model import NOT_BUILT, FleetCost, Measured, RefreshMethod
from mvlog.postgres.catalog.rows import HistoryRow
from mvlog.postgres.source import Cursor, Source

INTERRUPTED = "interrupted: the refresh process ended before finishing"

# The history rows of this process's failed refreshes that could not be ended because PostgreSQL
# was away (id -> error): ended once it answers again, by the next refresh of this process
# (:meth:`RefreshHistory.close_interrupted`) or the scheduler's first look
# (:meth:`RefreshHistory.end_unended`). Only the process that ran a refresh knows why it failed;
# another process finding the row 'running' under the view's lock can only call it interrupted.
_unended: dict[int, str] = {}
_unended_lock = threading.Lock()


class RefreshHistory:
    """The refresh-history rows of one database's catalog."""

    source: Source

    def end_failed(self, history_id: int, counts: Any, error: str) -> None:
        """:meth:`history_end` of a failed refresh; when PostgreSQL is away (the failure itself, often),
        the row is remembered and ended with this error once it is back (:meth:`end_unended`)."""
        try:
            self.history_end(history_id, counts, error=error)
        except MvlogError as exc:
            if not exc.transient:
                raise
            with _unended_lock:
                _unended[history_id] = error

    def end_unended(self) -> None:
        """End, as failed with their errors, the history rows this process could not end while
        PostgreSQL was away."""
        with _unended_lock:
            waiting = dict(_unended)
        for history_id, error in waiting.items():
            self.source.query("UPDATE mvlog.refresh_history SET status = 'failed', finished_at = clock_timestamp(), "
                              "error = %s WHERE id = %s AND status = 'running'", (error, history_id))
            with _unended_lock:
                _unended.pop(history_id, None)

    def close_interrupted(self, names: Sequence[str]) -> None:
        """Refreshes still 'running' while we hold the view locks died (killed, crashed, or this
        process's while PostgreSQL was away): say so."""
        self.end_unended()
        self.source.query(
            "UPDATE mvlog.refresh_history SET status = 'failed', finished_at = clock_timestamp(), "
            "error = %s WHERE view_name = ANY(%s) AND status = 'running'",
            (INTERRUPTED, list(names)),
        )

    def measured(self, name: str, limit: int = 8) -> list[Measured]:
        """What the view's latest succeeded fast and complete refreshes cost (``limit`` of each
        method, so that many of one never hide the other), newest first."""
        rows = self.source.query(
            """
            SELECT h.* FROM unnest(ARRAY['fast', 'complete']) AS m(method) CROSS JOIN LATERAL (
                SELECT r.id, r.method, extract(epoch FROM r.finished_at - r.started_at)::float8, r.window_keys,
                       r.rows_inserted, r.phases, r.reason IS NOT DISTINCT FROM %(build)s,
                       r.reason IS DISTINCT FROM %(build)s AND NOT EXISTS (  -- none of its method since the build
                           SELECT FROM mvlog.refresh_history e
                           WHERE e.view_name = %(name)s AND e.status = 'succeeded' AND e.method = r.method
                             AND e.reason IS DISTINCT FROM %(build)s AND e.id < r.id AND e.id > coalesce((
                                 SELECT max(b.id) FROM mvlog.refresh_history b
                                 WHERE b.view_name = %(name)s AND b.status = 'succeeded'
                                   AND b.reason IS NOT DISTINCT FROM %(build)s AND b.id < r.id), 0))
                FROM mvlog.refresh_history r  -- by its (view_name, started_at) index, LIMIT rows of each method
                WHERE r.view_name = %(name)s AND r.status = 'succeeded' AND r.method = m.method
                  AND r.finished_at IS NOT NULL
                ORDER BY r.started_at DESC LIMIT %(limit)s) h
            ORDER BY h.id DESC
            """,
            {"build": NOT_BUILT, "name": name, "limit": limit})
        return [Measured(RefreshMethod(method), seconds, keys, rows if method == "complete" else None, build, first,
                         phases or {})
                for _, method, seconds, keys, rows, phases, build, first in rows]

    def costs_of(self, views: sql.Composable, params: dict[str, Any], limit: int = 8) -> dict[str, FleetCost]:
        """What the refreshes of ``views`` (a subquery of ``(name, view_class)`` rows, with ``params``)
        cost: per view, the medians of its latest ``limit`` fast and complete refreshes (its build
        apart) and its latest build's seconds, by view name."""
        rows = self.source.query(sql.SQL(
            """
            SELECT v.name, v.view_class, f.seconds, c.seconds, b.seconds FROM ({views}) AS v(name, view_class)
            CROSS JOIN LATERAL (
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s) FROM (
                    SELECT extract(epoch FROM finished_at - started_at)::float8 AS s FROM mvlog.refresh_history h
                    WHERE h.view_name = v.name AND status = 'succeeded' AND method = 'fast'
                      AND finished_at IS NOT NULL ORDER BY started_at DESC LIMIT %(limit)s) x) f(seconds)
            CROSS JOIN LATERAL (
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s) FROM (
                    SELECT extract(epoch FROM finished_at - started_at)::float8 AS s FROM mvlog.refresh_history h
                    WHERE h.view_name = v.name AND status = 'succeeded' AND method = 'complete'
                      AND reason IS DISTINCT FROM %(build)s AND finished_at IS NOT NULL
                    ORDER BY started_at DESC LIMIT %(limit)s) x) c(seconds)
            LEFT JOIN LATERAL (
                SELECT extract(epoch FROM finished_at - started_at)::float8 FROM mvlog.refresh_history h
                WHERE h.view_name = v.name AND status = 'succeeded' AND method = 'complete' AND reason = %(build)s
                  AND finished_at IS NOT NULL ORDER BY started_at DESC LIMIT 1) b(seconds) ON true
            """).format(views=views), {**params, "limit": limit, "build": NOT_BUILT})
        return {name: FleetCost(view_class, fast, complete, build) for name, view_class, fast, complete, build in rows}

    def last_attempt_failed(self, name: str) -> bool:
        """Whether the view's latest refresh did not succeed (failed, or still 'running': killed)."""
        rows = self.source.query("SELECT status <> 'succeeded' FROM mvlog.refresh_history WHERE view_name = %s "
                                 "ORDER BY id DESC LIMIT 1", (name,))
        return bool(rows and rows[0][0])

    def history_start(self, view: str, method: RefreshMethod, reason: str, stamp: datetime) -> int:
        rows = self.source.query(
            """
            INSERT INTO mvlog.refresh_history (view_name, started_at, method, reason, snaptime, status)
            VALUES (%s, now(), %s, %s, %s, 'running') RETURNING id
            """,
            (view, method.value, reason, stamp),
        )
        return rows[0][0]

    def history_end(self, history_id: int, counts: Any, error: str | None = None,
                    method: RefreshMethod | None = None, reason: str | None = None,
                    oldest_change: datetime | None = None, window_keys: int | None = None,
                    phases: Mapping[str, float] | None = None) -> None:
        """Finish a history row: failed with ``error``, else succeeded (with the method and reason
        the refresh ended with, and the seconds of its ``phases``). ``counts``: keys_read,
        rows_inserted/updated/deleted and the Delta version written; a success that wrote nothing
        records the version of the view's last success, which still holds it."""
        self.source.query(
            """
            UPDATE mvlog.refresh_history AS h SET finished_at = clock_timestamp(), status = %s, error = %s,
                   keys_read = %s, rows_inserted = %s, rows_updated = %s, rows_deleted = %s,
                   method = coalesce(%s, method), reason = coalesce(%s, reason), oldest_change = %s,
                   window_keys = %s, phases = %s, delta_version = CASE WHEN %s IS NOT NULL THEN NULL ELSE coalesce(%s, (
                       SELECT p.delta_version FROM mvlog.refresh_history AS p
                       WHERE p.view_name = h.view_name AND p.id < h.id AND p.status = 'succeeded'
                         AND p.delta_version IS NOT NULL
                       ORDER BY p.id DESC LIMIT 1)) END
            WHERE id = %s
            """,
            ("failed" if error else "succeeded", error, counts.keys_read, counts.rows_inserted, counts.rows_updated,
             counts.rows_deleted, method.value if method else None, reason, oldest_change, window_keys,
             Json(dict(phases)) if phases else None, error,
             counts.version, history_id),
        )

    def record_fresh(self, cur: Cursor, views: Sequence[tuple[str, datetime]], reason: str) -> None:
        """In ``cur``'s transaction, a succeeded row per (view, stamp) that a refresh found unchanged:
        method ``fresh``, 0 keys, the stamp it still reflects and the Delta version of its last
        success, which still holds it."""
        if not views:
            return
        cur.execute(
            """
            INSERT INTO mvlog.refresh_history (view_name, started_at, finished_at, method, reason, snaptime,
                                               keys_read, rows_inserted, rows_updated, rows_deleted, status,
                                               delta_version)
            SELECT t.name, now(), clock_timestamp(), 'fresh', %s, t.stamp, 0, 0, 0, 0,
                   'succeeded', (SELECT p.delta_version FROM mvlog.refresh_history AS p
                                 WHERE p.view_name = t.name AND p.status = 'succeeded'
                                   AND p.delta_version IS NOT NULL ORDER BY p.id DESC LIMIT 1)
            FROM unnest(%s::text[], %s::timestamptz[]) AS t(name, stamp)
            """,
            (reason, [name for name, _ in views], [stamp for _, stamp in views]),
        )

    def recent_refreshes(self, name: str, limit: int) -> list[HistoryRow]:
        """The ``limit`` most recent refreshes of a view, newest first."""
        rows = self.source.query(
            f"SELECT {_HISTORY_ROW} FROM mvlog.refresh_history WHERE view_name = %s ORDER BY id DESC LIMIT %s",
            (name, limit),
        )
        return [HistoryRow(*row) for row in rows]

    def latest_refreshes(self, names: Sequence[str]) -> dict[str, HistoryRow]:
        """Each named view's latest refresh (running, failed or succeeded), in one query; a view
        never refreshed is left out."""
        rows = self.source.query(
            f"SELECT DISTINCT ON (view_name) view_name, {_HISTORY_ROW} FROM mvlog.refresh_history "
            "WHERE view_name = ANY(%s) ORDER BY view_name, id DESC",
            (list(names),),
        )
        return {row[0]: HistoryRow(*row[1:]) for row in rows}

    def versions_as_of(self, names: Sequence[str], at: datetime) -> tuple[datetime, dict[str, int | None]] | None:
        """The newest stamp at or before ``at`` that every one of ``names`` was refreshed to (a refresh
        group's views share their stamps), and the Delta version each was left at by that refresh
        (None where the history predates recorded versions); None if there is no such stamp."""
        rows = self.source.query(
            """
            WITH common AS (
                SELECT snaptime FROM mvlog.refresh_history
                WHERE view_name = ANY(%(names)s) AND status = 'succeeded' AND snaptime <= %(at)s
                GROUP BY snaptime HAVING count(DISTINCT view_name) = %(n)s
                ORDER BY snaptime DESC LIMIT 1)
            SELECT DISTINCT ON (h.view_name) h.view_name, h.snaptime, h.delta_version
            FROM mvlog.refresh_history AS h JOIN common USING (snaptime)
            WHERE h.view_name = ANY(%(names)s) AND h.status = 'succeeded'
            ORDER BY h.view_name, h.id DESC
            """,
            {"names": list(names), "at": at, "n": len(set(names))},
        )
        if not rows:
            return None
        return rows[0][1], {name: version for name, _, version in rows}

    def lags_since(self, name: str, since: datetime) -> list[float]:
        """The lags (seconds) that the view's successful refreshes finished since ``since`` ended."""
        rows = self.source.query(
            """
            SELECT extract(epoch FROM finished_at - oldest_change)::float8 FROM mvlog.refresh_history
            WHERE view_name = %s AND status = 'succeeded' AND finished_at >= %s AND oldest_change IS NOT NULL
            ORDER BY id
            """,
            (name, since),
        )
        return [row[0] for row in rows]


# The columns of a HistoryRow, in its order (a constant fragment: no name or value pasted in).
_HISTORY_ROW = ("id, started_at, finished_at, extract(epoch FROM finished_at - started_at)::float8, status, method, "
                "reason, snaptime, keys_read, rows_inserted, rows_updated, rows_deleted, error, delta_version, "
                "extract(epoch FROM finished_at - oldest_change)::float8")

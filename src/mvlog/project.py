"""The Project: one object that owns the loaded config and its connections.

CLI commands are thin calls into it: :meth:`Project.apply`, :meth:`Project.refresh`,
:meth:`Project.status`, :meth:`Project.explain`, :meth:`Project.purge`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from mvlog.analysis import ViewClass, analyze
from mvlog.config import Config, RefreshMethod, ViewConfig, load_config
from mvlog.errors import ConcurrentRefreshError, ConfigError, MvlogError, RefreshError, SourceError, UsageError
from mvlog import plan as planner
from mvlog.plan import RefreshPlan, partition_predicates, plan_refresh
from mvlog.shape import HIDDEN_PREFIX, ViewShape, downgrade, keymap_name, shape_view
from mvlog import sqlgen
from mvlog.faults import arm, checkpoint
from mvlog.progress import Reporter
from mvlog.source import LogInfo, Source, StampedSnapshot, TableInfo, log_name_for
from mvlog.warehouse import ApplyCounts, JdbcSource, SchemaDrift, Warehouse

if TYPE_CHECKING:
    from mvlog.explain import Explanation

VIEW_LOCK_NAMESPACE = 0x6D767677  # "mvvw": advisory lock held for the whole refresh of a view


@dataclass
class RefreshResult:
    """The outcome of refreshing one view."""

    view: str
    method: str
    reason: str
    snaptime: datetime | None
    keys_read: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    row_count: int | None = None
    seconds: float = 0.0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["snaptime"] = self.snaptime.isoformat() if self.snaptime else None
        data["seconds"] = round(self.seconds, 3)
        return data


@dataclass
class ApplyReport:
    logs_created: list[str] = field(default_factory=list)
    logs_unchanged: list[str] = field(default_factory=list)
    views_registered: list[str] = field(default_factory=list)
    views_unregistered: list[str] = field(default_factory=list)
    builds: list[RefreshResult] = field(default_factory=list)


@dataclass
class ViewCheck:
    """A view checked against the catalog: its shape, output signature and tables whose key changed."""

    shape: ViewShape
    signature: str
    key_changed: list[str]


def _definition_hash(view: ViewConfig) -> str:
    return hashlib.sha256(view.query.strip().encode()).hexdigest()[:16]


class Project:
    """Loaded configuration, the PostgreSQL source and (lazily) Spark and the warehouse."""

    def __init__(self, config: Config, progress: Callable[[str], None] | None = None,
                 reporter: Reporter | None = None):
        self.config = config
        self.source = Source(config.source.dsn, config.secrets())
        self.jdbc = JdbcSource.from_dsn(config.source.dsn)
        self.reporter = reporter or Reporter()
        self._message = progress
        self._warehouse: Warehouse | None = None

    def progress(self, message: str) -> None:
        (self._message or self.reporter.message)(message)

    @classmethod
    def load(cls, path: str | None = None, **kwargs: Any) -> "Project":
        return cls(load_config(path), **kwargs)

    @property
    def warehouse(self) -> Warehouse:
        if self._warehouse is None:
            from mvlog.spark import build_session

            self.progress("starting Spark")
            spark = build_session(self.config.spark)
            self._warehouse = Warehouse(spark, self.config.warehouse_uri, self.config.secrets())
        return self._warehouse

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> "Project":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the catalog side of apply ---------------------------------------------------

    def _view_shape(self, cur: Any, index: int, view: ViewConfig, logs: dict[int, LogInfo],
                    check_fast: bool = True) -> "ViewCheck":
        """Analyse and validate a view against the database: its shape, output signature, key changes."""
        where = f"views[{index}] ({view.name})"
        try:
            analysis = analyze(view.query)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        by_alias: dict[str, LogInfo] = {}
        key_changed: list[str] = []
        for ref in analysis.tables:
            table = self.source.resolve_table(cur, ref.schema, ref.name)
            if table is None:
                raise ConfigError(f"{where}: table {ref.display} does not exist")
            if table.oid not in logs:
                raise ConfigError(
                    f"{where}: table {table.qualified} has no materialized view log; add it under logs:"
                )
            by_alias[ref.alias] = logs[table.oid]
            if tuple(c.name for c in table.key) != logs[table.oid].key_columns:
                key_changed.append(table.qualified)
        try:
            described = self.source.describe_query(cur, view.query)
            columns = [d[0] for d in described]
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        duplicates = sorted({c for c in columns if columns.count(c) > 1})
        if duplicates:
            raise ConfigError(f"{where}: the query outputs column {duplicates[0]!r} more than once; give each column a unique alias")
        reserved = [c for c in columns if c.startswith(HIDDEN_PREFIX)]
        if reserved:
            raise ConfigError(f"{where}: column names starting with {HIDDEN_PREFIX!r} are reserved for mvlog ({reserved[0]})")
        shape = shape_view(view.name, analysis, by_alias)
        if shape.keyed:  # check the SQL mvlog generates for it; a view it cannot key is complete-only
            try:
                self.source.describe_query(cur, shape.select_sql)
                self.source.describe_query(cur, sqlgen.keymap_probe_sql(shape))
            except ConfigError as exc:
                shape = downgrade(shape, view.query, f"mvlog cannot key this view for fast refresh: {exc}")
        if check_fast and view.refresh is RefreshMethod.FAST and not shape.fast_possible:
            raise ConfigError(f"{where}: refresh: fast is impossible: {'; '.join(shape.fast_reasons)}")
        return ViewCheck(shape, json.dumps(described), key_changed)

    def _apply_catalog(self, cur: Any, report: ApplyReport) -> None:
        self.source.install_schema(cur)
        logs: dict[int, LogInfo] = {}
        for index, entry in enumerate(self.config.logs):
            where = f"logs[{index}]"
            try:
                table = self._resolve_named_table(cur, entry.table)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            if table is None:
                raise ConfigError(f"{where}: table {entry.table} does not exist")
            try:
                logs[table.oid], created = self.source.ensure_log(cur, table)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            (report.logs_created if created else report.logs_unchanged).append(table.qualified)

        cur.execute("SELECT name, definition_hash FROM mvlog.views")
        registered = dict(cur.fetchall())
        for index, view in enumerate(self.config.views):
            shape = self._view_shape(cur, index, view, logs).shape
            digest = _definition_hash(view)
            changed = registered.get(view.name) != digest
            cur.execute(
                """
                INSERT INTO mvlog.views (name, query, definition_hash, location, refresh_method, view_class,
                                         fast_reason, refresh_group, needs_complete)
                VALUES (%(name)s, %(query)s, %(hash)s, %(location)s, %(method)s, %(class)s, %(reason)s, %(group)s,
                        'the view is new')
                ON CONFLICT (name) DO UPDATE SET
                    query = excluded.query, definition_hash = excluded.definition_hash, location = excluded.location,
                    refresh_method = excluded.refresh_method, view_class = excluded.view_class,
                    fast_reason = excluded.fast_reason, refresh_group = excluded.refresh_group,
                    needs_complete = CASE WHEN mvlog.views.definition_hash <> excluded.definition_hash
                                          THEN 'the query changed' ELSE mvlog.views.needs_complete END,
                    updated_at = CASE WHEN mvlog.views.definition_hash <> excluded.definition_hash
                                           OR mvlog.views.refresh_method <> excluded.refresh_method
                                           OR mvlog.views.refresh_group IS DISTINCT FROM excluded.refresh_group
                                      THEN now() ELSE mvlog.views.updated_at END
                """,
                {
                    "name": view.name, "query": view.query, "hash": digest,
                    "location": self.config.view_location(view.name), "method": view.refresh.value,
                    "class": shape.view_class.value, "reason": "; ".join(shape.fast_reasons) or None,
                    "group": view.group,
                },
            )
            cur.execute("DELETE FROM mvlog.view_logs WHERE view_name = %s", (view.name,))
            for log in shape.logs:
                cur.execute(
                    "INSERT INTO mvlog.view_logs (view_name, table_schema, table_name) VALUES (%s, %s, %s)",
                    (view.name, log.table_schema, log.table_name),
                )
            if changed:
                report.views_registered.append(view.name)
                cur.execute(sqlgen.drop_keymap_sql(keymap_name(view.name)))  # its columns may differ now
        gone = sorted(set(registered) - {v.name for v in self.config.views})
        if gone:
            cur.execute("DELETE FROM mvlog.views WHERE name = ANY(%s)", (gone,))
            for name in gone:
                cur.execute(sqlgen.drop_keymap_sql(keymap_name(name)))
            report.views_unregistered.extend(gone)

    def _resolve_named_table(self, cur: Any, name: str) -> TableInfo | None:
        """The table a ``logs:`` entry (or a command argument) names, or None if there is none."""
        try:
            refs = analyze(f"SELECT * FROM {name}").tables
        except ConfigError:
            refs = []
        if len(refs) != 1:
            raise ConfigError(f"{name!r} is not a table name")
        return self.source.resolve_table(cur, refs[0].schema, refs[0].name)

    def validate(self) -> ApplyReport:
        """Check the configuration against the database without changing anything."""
        report = ApplyReport()
        conn = self.source.conn
        try:
            with conn.cursor() as cur:
                self._apply_catalog(cur, report)
        except psycopg2.errors.InsufficientPrivilege as exc:
            raise SourceError(f"PostgreSQL: {self.source._describe(exc)} (mvlog apply needs the rights of the "
                              f"owner of the tables and of schema mvlog)") from None
        except psycopg2.Error as exc:
            raise ConfigError(f"PostgreSQL: {self.source._describe(exc)}") from None
        finally:
            conn.rollback()
        return report

    def apply(self) -> ApplyReport:
        """Install the schema, create logs and triggers, register views, build new ones. Idempotent."""
        self.validate()
        if self.config.views:
            self.warehouse.check_writable()
        report = ApplyReport()
        with self.source.transaction() as cur:
            self._apply_catalog(cur, report)
        pending = self._views_needing_build()
        if pending:
            report.builds = self.refresh(pending, complete=True)
        return report

    def _views_needing_build(self) -> list[str]:
        rows = self.source.query(
            "SELECT name, location FROM mvlog.views WHERE last_snaptime IS NULL OR needs_complete IS NOT NULL"
        )
        names = {name for name, _ in rows}
        for view in self.config.views:
            if view.name not in names and not self.warehouse.exists(self.config.view_location(view.name)):
                names.add(view.name)
        return [v.name for v in self.config.views if v.name in names]

    # -- refresh --------------------------------------------------------------------------

    def _select_views(self, names: list[str] | None, group: str | None) -> list[ViewConfig]:
        if group is not None:
            views = [v for v in self.config.views if v.group == group]
            if not views:
                raise UsageError(f"no view belongs to refresh group {group!r}")
            if names:
                raise UsageError("give either view names or --group, not both")
            return views
        if not names:
            return list(self.config.views)
        selected = []
        for name in names:
            try:
                selected.append(self.config.view(name))
            except KeyError:
                raise UsageError(f"there is no view named {name!r} in the configuration") from None
        return selected

    def _registered_state(self, name: str) -> dict[str, Any]:
        rows = self.source.query(
            "SELECT last_snaptime, needs_complete, row_count, definition_hash, output_signature, last_refresh_at "
            "FROM mvlog.views WHERE name = %s", (name,)
        )
        if not rows:
            raise UsageError(f"view {name} is not registered yet; run 'mvlog apply' first")
        keys = ("last_snaptime", "needs_complete", "row_count", "definition_hash", "output_signature", "last_refresh_at")
        return dict(zip(keys, rows[0]))

    def _check(self, view: ViewConfig) -> "ViewCheck":
        """The view against today's catalog; a query that no longer works makes the view invalid."""
        logs = {log.table_oid: log for log in self.source.logs().values()}
        index = self.config.views.index(view)
        conn = self.source.conn
        try:
            with conn.cursor() as cur:
                return self._view_shape(cur, index, view, logs)
        except ConfigError as exc:
            reason = str(exc).split(": ", 1)[-1]
            raise RefreshError(f"view {view.name} is invalid: {reason} (a base table changed; fix the query or "
                               f"the table, then run 'mvlog apply')") from None
        finally:
            conn.rollback()

    def _needs_complete(self, view: ViewConfig, state: dict, check: "ViewCheck") -> str | None:
        """Why the next refresh must be complete: recorded, or a base table's DDL since the last refresh."""
        if state["needs_complete"]:
            return state["needs_complete"]
        if check.key_changed:
            return f"the primary key of {check.key_changed[0]} changed"
        if state["output_signature"] and state["output_signature"] != check.signature:
            ddl = self.source.ddl_since([log.table_oid for log in check.shape.logs], state["last_refresh_at"])
            what = f" ({ddl[-1][1]} on {ddl[-1][2]})" if ddl else ""
            return f"the columns of its query changed{what}"
        return None

    @contextlib.contextmanager
    def _view_locks(self, names: list[str]) -> Iterator[None]:
        """Session advisory locks that keep two refreshes of one view from running at once."""
        conn = self.source.connect()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                for name in sorted(names):
                    cur.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (VIEW_LOCK_NAMESPACE, name))
                    if not cur.fetchone()[0]:
                        raise ConcurrentRefreshError(f"view {name} is being refreshed by another process; try again later")
            yield
        finally:
            conn.close()  # releases the session locks

    def refresh(self, names: list[str] | None = None, complete: bool = False, group: str | None = None,
                raise_on_error: bool = False) -> list[RefreshResult]:
        """Refresh views: named ones, a group's, or all. Views of one group share one stamp and snapshot."""
        views = self._select_views(names, group)
        self.source.check_schema()
        self.warehouse  # noqa: B018  start Spark first: no view's time includes the JVM start
        batches: dict[str | None, list[ViewConfig]] = {}
        for view in views:
            batches.setdefault(view.group, []).append(view)
        results: list[RefreshResult] = []
        with self.reporter.task("refreshing" if not complete else "building", len(views)):
            for group_name, members in batches.items():
                units = [members] if group_name is not None else [[v] for v in members]
                for unit in units:
                    for result in self._refresh_together(unit, complete):
                        results.append(result)
                        self.reporter.advance(f"{result.view} ({result.method}{', failed' if result.error else ''})")
        failed = [r for r in results if r.error]
        if failed and raise_on_error:
            raise RefreshError(f"refresh of view {failed[0].view} failed: {failed[0].error}")
        return results

    def _refresh_together(self, views: list[ViewConfig], complete: bool) -> list[RefreshResult]:
        """Refresh views from one stamp S and one exported snapshot."""
        started = {v.name: time.monotonic() for v in views}
        try:
            with self._view_locks([v.name for v in views]):
                plans = []
                for view in views:
                    state = self._registered_state(view.name)
                    if state["definition_hash"] != _definition_hash(view):
                        raise RefreshError(f"view {view.name} changed in the configuration; run 'mvlog apply' first")
                    check = self._check(view)
                    shape = check.shape
                    needs_complete = self._needs_complete(view, state, check)
                    location = self.config.view_location(view.name)
                    method = RefreshMethod.COMPLETE if complete else view.refresh
                    # Only a fast refresh needs the Delta table to be there already.
                    might_be_fast = method is not RefreshMethod.COMPLETE and state["last_snaptime"] is not None
                    table_exists = self.warehouse.exists(location) if might_be_fast else True
                    plans.append((view, state, plan_refresh(shape, location, method, state["last_snaptime"],
                                                            needs_complete, table_exists)))
                logs = list({log.log_name: log for _, _, p in plans for log in p.logs}.values())
                self._close_interrupted([v.name for v in views])
                checkpoint("before_stamp")
                results = []
                with self.source.stamp(logs) as stamped:
                    checkpoint("after_stamp")
                    for view, state, plan in plans:
                        results.append(self._execute(view, state, plan, stamped, started[view.name]))
        except MvlogError as exc:
            return [RefreshResult(v.name, "-", "-", None, error=str(exc), seconds=time.monotonic() - started[v.name])
                    for v in views]
        self.source.purge(logs)
        return results

    def _execute(self, view: ViewConfig, state: dict, plan: RefreshPlan, stamped: StampedSnapshot,
                 started: float) -> RefreshResult:
        stamp, snapshot = stamped.time, stamped.snapshot
        history_id = self._history_start(view.name, plan, stamp)
        try:
            plan = self._reconsider(view, plan, stamped)
            counts, plan = self._apply_plan(view, plan, stamped)
        except MvlogError as exc:
            self._history_end(history_id, "failed", ApplyCounts(), error=str(exc))
            return RefreshResult(view.name, plan.method, plan.reason, stamp, error=str(exc),
                                 seconds=time.monotonic() - started)
        if plan.method == "complete":
            row_count = counts.rows_inserted
        else:
            row_count = (state["row_count"] or 0) + counts.rows_inserted - counts.rows_deleted
        checkpoint("after_delta_commit")
        try:
            self._finish(view, plan, stamp, snapshot, row_count)
            checkpoint("after_record")
        except MvlogError as exc:
            self._history_end(history_id, "failed", counts, error=str(exc))
            return RefreshResult(view.name, plan.method, plan.reason, stamp, error=str(exc),
                                 seconds=time.monotonic() - started)
        self._history_end(history_id, "succeeded", counts, method=plan.method, reason=plan.reason)
        return RefreshResult(view.name, plan.method, plan.reason, stamp, counts.keys_read, counts.rows_inserted,
                             counts.rows_updated, counts.rows_deleted, row_count, time.monotonic() - started)

    def _finish(self, view: ViewConfig, plan: RefreshPlan, stamp: datetime, snapshot: str, row_count: int) -> None:
        """After the Delta commit: bring the key map to S and record last_V = S, in one transaction
        that reads the refresh's snapshot. A crash before this commit leaves both at the old
        last_V, so the next refresh re-reads a window that contains this one."""
        shape = plan.shape
        with self.source.snapshot_transaction(snapshot) as cur:
            if shape.keyed and not shape.global_aggregate:
                if plan.method == "complete":
                    # Refill the existing key map only if its columns still fit (a changed primary key
                    # changes them): a refresh role may refill a table it does not own.
                    cur.execute("SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute "
                                "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                                (sqlgen.keymap_table(shape).sql(dialect="postgres"),))
                    current = cur.fetchone()[0]
                    if current is not None and current != sqlgen.keymap_all_columns(shape):
                        cur.execute(sqlgen.drop_keymap_sql(keymap_name(view.name)))
                        current = None
                    statements = sqlgen.keymap_rebuild_sql(shape, exists=current is not None)
                else:
                    statements = sqlgen.keymap_update_sql(shape, plan.since)
                for statement in statements:
                    cur.execute(statement)
            elif plan.method == "complete":
                cur.execute(sqlgen.drop_keymap_sql(keymap_name(view.name)))
            signature = None
            if plan.method == "complete":  # the columns the Delta table now has
                signature = json.dumps(self.source.describe_query(cur, view.query))
            cur.execute(
                """
                UPDATE mvlog.views SET last_snaptime = %s, last_refresh_at = clock_timestamp(), last_method = %s,
                       needs_complete = NULL, row_count = %s, output_signature = coalesce(%s, output_signature)
                WHERE name = %s
                """,
                (stamp, plan.method, row_count, signature, view.name),
            )

    def _reconsider(self, view: ViewConfig, plan: RefreshPlan, stamped: StampedSnapshot) -> RefreshPlan:
        """A fast plan, looked at again once the window is known: a table truncated in it needs a
        complete refresh; so does (for ``force`` views) a window that changed so much of a table
        that a complete refresh is cheaper."""
        if plan.method != "fast":
            return plan
        truncated = [log.qualified_table for log in plan.logs if stamped.truncated_since(log, plan.since)]
        if truncated:
            reason = f"table {truncated[0]} was truncated"
            if view.refresh is RefreshMethod.FAST:
                raise RefreshError(f"view {view.name} cannot be fast-refreshed: {reason}; "
                                   f"run 'mvlog refresh --complete {view.name}'")
            return dataclasses.replace(plan, method="complete", reason=reason)
        if view.refresh is RefreshMethod.FORCE:
            windows = []
            for log in plan.logs:
                ((rows,),) = stamped.query("SELECT reltuples FROM pg_class WHERE oid = %s", (log.table_oid,))
                ((changed,),) = stamped.query(sqlgen.changed_key_count_sql(log, plan.since))
                windows.append(planner.WindowSize(log.qualified_table, int(changed), float(rows or 0)))
            reason = planner.cheaper_complete(windows)
            if reason:
                return dataclasses.replace(plan, method="complete", reason=reason)
        return plan

    def _apply_plan(self, view: ViewConfig, plan: RefreshPlan,
                    stamped: StampedSnapshot) -> tuple[ApplyCounts, RefreshPlan]:
        stamp, snapshot = stamped.time, stamped.snapshot
        metadata = {"view": view.name, "snaptime": stamp.isoformat(), "method": plan.method}
        txn = (f"mvlog:{view.name}", int(stamp.timestamp() * 1_000_000))
        if plan.method == "fast":
            if not any(stamped.window_has_rows(log, plan.since) for log in plan.logs):
                return ApplyCounts(), plan
            self.progress(f"{view.name}: fast refresh")
            null_keys = False
            if plan.shape.keyed and plan.shape.view_class is ViewClass.AGGREGATE and not plan.shape.global_aggregate:
                null_keys = bool(stamped.query(sqlgen.null_keys_check_sql(plan.shape, plan.since))[0][0])
            df = self.warehouse.read(self.jdbc, plan.read_sql(null_keys), snapshot)
            try:
                with self.warehouse.staged(df, sqlgen.CHANGED_KEY_PREFIX + "0") as staged:
                    checkpoint("after_read")
                    arm("during_merge")
                    return self.warehouse.merge(plan.location, staged, plan.key_columns, metadata, txn), plan
            except SchemaDrift as exc:
                if view.refresh is RefreshMethod.FAST:
                    raise RefreshError(f"view {view.name} cannot be fast-refreshed: {exc}") from None
                plan = dataclasses.replace(plan, method="complete", reason=str(exc))
                metadata["method"] = "complete"
        plan = self._partitioned(plan)
        self.progress(f"{view.name}: complete refresh"
                      + (f" ({len(plan.partitions)} partitions)" if plan.partitions else ""))
        df = self.warehouse.read(self.jdbc, plan.read_sql(), snapshot, plan.partitions)
        checkpoint("after_read")
        return self.warehouse.replace(plan.location, df, metadata, txn, plan.key_columns), plan

    def _partitioned(self, plan: RefreshPlan) -> RefreshPlan:
        """A complete refresh's plan with its read split by ranges of the view's first key column."""
        key = plan.shape.range_key
        if plan.method != "complete" or key is None:
            return plan
        stats = self.source.column_stats(key.log, key.base_column)
        return dataclasses.replace(plan, partitions=partition_predicates(plan.shape, stats))

    def _close_interrupted(self, names: list[str]) -> None:
        """Refreshes still 'running' while we hold the view locks died (killed, crashed): say so."""
        self.source.query(
            "UPDATE mvlog.refresh_history SET status = 'failed', finished_at = clock_timestamp(), "
            "error = 'interrupted: the refresh process ended before finishing' "
            "WHERE view_name = ANY(%s) AND status = 'running'",
            (names,),
        )

    def _history_start(self, view: str, plan: RefreshPlan, stamp: datetime) -> int:
        rows = self.source.query(
            """
            INSERT INTO mvlog.refresh_history (view_name, started_at, method, reason, snaptime, status)
            VALUES (%s, now(), %s, %s, %s, 'running') RETURNING id
            """,
            (view, plan.method, plan.reason, stamp),
        )
        return rows[0][0]

    def _history_end(self, history_id: int, status: str, counts: ApplyCounts, error: str | None = None,
                     method: str | None = None, reason: str | None = None) -> None:
        self.source.query(
            """
            UPDATE mvlog.refresh_history SET finished_at = clock_timestamp(), status = %s, error = %s,
                   keys_read = %s, rows_inserted = %s, rows_updated = %s, rows_deleted = %s,
                   method = coalesce(%s, method), reason = coalesce(%s, reason)
            WHERE id = %s
            """,
            (status, error, counts.keys_read, counts.rows_inserted, counts.rows_updated, counts.rows_deleted,
             method, reason, history_id),
        )

    # -- status and purge --------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Views (staleness, pending changes, rows) and logs (size, oldest unconsumed change)."""
        self.source.check_schema()
        logs = self.source.logs()
        view_rows = self.source.query(
            """
            SELECT v.name, v.location, v.refresh_method, v.view_class, v.fast_reason, v.last_refresh_at,
                   v.last_method, v.last_snaptime, v.needs_complete, v.row_count, v.refresh_group,
                   coalesce(array_agg(vl.table_schema || '.' || vl.table_name) FILTER (WHERE vl.view_name IS NOT NULL), '{}')
            FROM mvlog.views v LEFT JOIN mvlog.view_logs vl ON vl.view_name = v.name
            GROUP BY v.name ORDER BY v.name
            """
        )
        now = datetime.now(timezone.utc)
        views = []
        for (name, location, method, view_class, fast_reason, last_at, last_method, last_snap, needs, rows,
             group, tables) in view_rows:
            pending = sum(self.source.pending_rows(logs[t], last_snap) for t in tables if t in logs)
            invalid = None
            try:
                view_config = self.config.view(name)
                needs = needs or self._needs_complete(view_config, self._registered_state(name), self._check(view_config))
            except KeyError:
                pass  # registered, but no longer in this configuration
            except RefreshError as exc:
                invalid = str(exc)
            if invalid:
                staleness, needs = "invalid", invalid
            elif needs or last_snap is None:
                staleness = "needs_complete"
            elif pending:
                staleness = "stale"
            else:
                staleness = "fresh"
            views.append({
                "name": name, "location": location, "refresh": method, "class": view_class,
                "fast_refresh": fast_reason is None, "why_not_fast": fast_reason, "group": group,
                "last_refresh": last_at.isoformat() if last_at else None, "last_method": last_method,
                "staleness": staleness, "needs_complete_reason": needs, "pending_log_rows": pending,
                "rows": rows, "base_tables": sorted(tables),
            })
        log_list = []
        for table, log in sorted(logs.items()):
            (size, bytes_, oldest, pinned_by) = self.source.query(
                sql.SQL(
                    """
                    SELECT (SELECT count(*) FROM {log}), pg_total_relation_size(%(reg)s),
                           (SELECT min("xact_time$$") FROM {log} l WHERE "snaptime$$" > coalesce(
                               (SELECT min(v.last_snaptime) FROM mvlog.view_logs vl JOIN mvlog.views v ON v.name = vl.view_name
                                WHERE vl.table_schema = %(schema)s AND vl.table_name = %(table)s), '-infinity')),
                           (SELECT array_agg(v.name ORDER BY v.name) FROM mvlog.view_logs vl JOIN mvlog.views v
                              ON v.name = vl.view_name WHERE vl.table_schema = %(schema)s AND vl.table_name = %(table)s
                              AND v.last_snaptime IS NULL)
                    """
                ).format(log=log.identifier),
                {"reg": f'mvlog."{log.log_name}"', "schema": log.table_schema, "table": log.table_name},
            )[0]
            log_list.append({
                "table": table, "log": f"mvlog.{log.log_name}", "rows": size, "bytes": bytes_,
                "oldest_unconsumed_change": oldest.isoformat() if oldest else None,
                "oldest_unconsumed_age_seconds": round((now - oldest).total_seconds(), 3) if oldest else None,
                "pinned_by": pinned_by or [],
            })
        return {"views": views, "logs": log_list}

    def history(self, name: str, limit: int = 20) -> list[dict[str, Any]]:
        """The most recent refreshes of a view, newest first."""
        self.source.check_schema()
        if not self.source.query("SELECT 1 FROM mvlog.views WHERE name = %s", (name,)):
            raise UsageError(f"view {name} is not registered; run 'mvlog apply' first")
        rows = self.source.query(
            """
            SELECT id, started_at, finished_at, extract(epoch FROM finished_at - started_at), status, method, reason,
                   snaptime, keys_read, rows_inserted, rows_updated, rows_deleted, error
            FROM mvlog.refresh_history WHERE view_name = %s ORDER BY id DESC LIMIT %s
            """,
            (name, limit),
        )
        keys = ("id", "started_at", "finished_at", "seconds", "status", "method", "reason", "snaptime", "keys_read",
                "rows_inserted", "rows_updated", "rows_deleted", "error")
        out = []
        for row in rows:
            item = dict(zip(keys, row))
            for k in ("started_at", "finished_at", "snaptime"):
                item[k] = item[k].isoformat() if item[k] else None
            item["seconds"] = float(item["seconds"]) if item["seconds"] is not None else None
            out.append(item)
        return out

    def drop_views(self, names: list[str], delete_data: bool = False) -> list[str]:
        """Unregister views (they stop pinning their logs) and drop their key maps; optionally delete
        their Delta tables. Returns what was done, one line each."""
        self.source.check_schema()
        done = []
        with self.source.transaction() as cur:
            for name in names:
                cur.execute("DELETE FROM mvlog.views WHERE name = %s RETURNING location", (name,))
                row = cur.fetchone()
                if row is None:
                    raise UsageError(f"view {name} is not registered")
                cur.execute(sqlgen.drop_keymap_sql(keymap_name(name)))
                done.append((name, row[0]))
        lines = []
        for name, location in done:
            if delete_data:
                self.warehouse.delete(location)
                lines.append(f"view {name} dropped, Delta table {location} deleted")
            else:
                lines.append(f"view {name} dropped (its Delta table {location} is kept)")
        return lines

    def drop_log(self, table: str, cascade: bool = False) -> list[str]:
        """Drop the materialized view log of ``table``; its views too with ``cascade``."""
        self.source.check_schema()
        with self.source.transaction() as cur:
            try:
                found = self._resolve_named_table(cur, table)
            except ConfigError:
                found = None  # maybe a log whose table is gone: look it up by name below
            logs = self.source.logs()
            log = next((lg for lg in logs.values() if found is not None and lg.table_oid == found.oid), None)
            log = log or logs.get(table) or logs.get(f"public.{table}")
            if log is None:
                raise UsageError(f"table {table} has no materialized view log")
            cur.execute("SELECT view_name FROM mvlog.view_logs WHERE table_schema = %s AND table_name = %s "
                        "ORDER BY view_name", (log.table_schema, log.table_name))
            dependents = [r[0] for r in cur.fetchall()]
            if dependents and not cascade:
                raise UsageError(f"views {', '.join(dependents)} depend on the log of {log.qualified_table}; "
                                 f"drop them first or use --cascade")
            for name in dependents:
                cur.execute("DELETE FROM mvlog.views WHERE name = %s", (name,))
                cur.execute(sqlgen.drop_keymap_sql(keymap_name(name)))
            self.source.drop_log(cur, log)
        return [f"view {name} dropped (its Delta table is kept)" for name in dependents] + [
            f"log on {log.qualified_table} dropped"]

    def purge(self) -> dict[str, int]:
        """Delete log rows every dependent view has consumed."""
        self.source.check_schema()
        logs = list(self.source.logs().values())
        purged: dict[str, int] = {}
        with self.reporter.task("purging", len(logs)):
            for log in logs:
                purged.update(self.source.purge([log]))
                self.reporter.advance(log.qualified_table)
        return purged

    def optimize(self, names: list[str] | None = None, vacuum: bool = False) -> list[tuple[str, str]]:
        """Compact the Delta files of the views (all by default) that frequent fast refreshes leave
        small; ``vacuum`` also deletes files older than the tables' retention. Holds each view's
        refresh lock, so it never races a refresh. Returns (view, what was done) pairs."""
        self.source.check_schema()
        views = self._select_views(names, None)
        done = []
        with self.reporter.task("optimizing", len(views)):
            for view in views:
                location = self.config.view_location(view.name)
                with self._view_locks([view.name]):
                    if not self.warehouse.exists(location):
                        done.append((view.name, "not built yet"))
                    else:
                        started = time.monotonic()
                        key = self._check(view).shape.range_key
                        removed, added = self.warehouse.optimize(location, key.column if key else None,
                                                                 planner.ROWS_PER_PARTITION, vacuum)
                        what = f"{removed} files compacted into {added}" if removed else "nothing to compact"
                        done.append((view.name, f"{what}{', vacuumed' if vacuum else ''} "
                                                f"({time.monotonic() - started:.1f} s)"))
                self.reporter.advance(view.name)
        return done

    def explain(self, name: str) -> "Explanation":
        """What refresh capabilities a view has, and why not (Oracle's EXPLAIN_MVIEW)."""
        from mvlog.explain import explain

        view = self._select_views([name], None)[0]
        index = self.config.views.index(view)
        analysis = analyze(view.query)
        conn = self.source.conn
        try:
            with conn.cursor() as cur:
                logs = self._declared_logs(cur)
                missing = []
                for ref in analysis.tables:
                    table = self.source.resolve_table(cur, ref.schema, ref.name)
                    if table is None:
                        raise ConfigError(f"views[{index}] ({view.name}): table {ref.display} does not exist")
                    if table.oid not in logs:
                        missing.append(table.qualified)
                shape = None if missing else self._view_shape(cur, index, view, logs, check_fast=False).shape
        finally:
            conn.rollback()
        return explain(view.name, view.refresh.value, analysis, shape, missing)

    def _declared_logs(self, cur: Any) -> dict[int, LogInfo]:
        """Logs as they are, or as ``apply`` would create them for the tables under ``logs:``."""
        logs = {log.table_oid: log for log in self.source.logs().values()} if self.source.is_installed() else {}
        for entry in self.config.logs:
            try:
                table = self._resolve_named_table(cur, entry.table)
            except ConfigError:
                continue  # apply reports it
            if table is not None and table.key and table.oid not in logs:
                logs[table.oid] = LogInfo.for_table(table, log_name_for(table))
        return logs

    def plan(self, name: str, complete: bool = False) -> RefreshPlan:
        """The plan the next refresh of a view would follow (nothing is read or written)."""
        view = self._select_views([name], None)[0]
        state = self._registered_state(view.name)
        check = self._check(view)
        method = RefreshMethod.COMPLETE if complete else view.refresh
        location = self.config.view_location(view.name)
        return self._partitioned(plan_refresh(check.shape, location, method, state["last_snaptime"],
                                              self._needs_complete(view, state, check), True))

"""``mvlog apply``'s registration: the configuration's logs created and its views, compiled
(:mod:`mvlog.pipeline.compile`), registered in the catalog; and what the catalog says a view's
next refresh must be (:meth:`Registrar.needs_complete`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mvlog.config import Config, ViewConfig
from mvlog.errors import ConfigError
from mvlog.model import MVLOG_SCHEMA, LogInfo, Occupant, RefreshMethod, TableInfo, log_name_for
from mvlog.pipeline.compile import definition_hash
from mvlog.pipeline.parts import ProjectWorker
from mvlog.postgres.capture import needs_slot, prerequisites
from mvlog.postgres.catalog import Catalog, ViewRegistration
from mvlog.postgres.source import Cursor

if TYPE_CHECKING:
    from mvlog.spark.warehouse import Warehouse
    from mvlog.sql.explain import Explanation


@dataclass
class Registration:
    """What registering the configuration did (or, validating it, would do)."""

    logs_created: list[str] = field(default_factory=list)
    logs_unchanged: list[str] = field(default_factory=list)
    logs_skipped: list[str] = field(default_factory=list)  # tables a pattern matched but cannot log, and why
    warnings: list[str] = field(default_factory=list)  # what the database should change, said once per apply
    views_registered: list[str] = field(default_factory=list)
    views_unregistered: list[str] = field(default_factory=list)


class Registrar(ProjectWorker):
    """Validates the configuration against the database and registers it in the catalog."""

    def explain(self, view: ViewConfig) -> Explanation:
        """What refresh capabilities a view has, over the logs as they are or as ``apply`` would make them."""
        with self.source.inspection() as cur:
            return self.compiler.explain(cur, view, self.declared_logs(cur))

    def declared_tables(self, cur: Cursor, skipped: list[str] | None = None) -> list[tuple[str, TableInfo, str]]:
        """The tables ``logs:`` names, each with where it is named (``logs[2]``) and how its log is
        filled (``trigger`` or ``logical``): listed ones, and those a schema's pattern matches now. A
        matched table without a primary key is left out, and said so in ``skipped``; a listed one
        that does not exist is an error."""
        found: dict[int, tuple[str, TableInfo, str]] = {}
        for index, entry in enumerate(self.config.logs):
            where = f"logs[{index}]"
            try:
                if entry.table is not None:
                    table = self.compiler.resolve_named_table(cur, entry.table)
                    if table is None:
                        raise ConfigError(f"table {entry.table} does not exist")
                    found.setdefault(table.oid, (where, table, self.config.capture_of(entry)))
                    continue
                if entry.schema_name == MVLOG_SCHEMA:
                    raise ConfigError(f"schema {MVLOG_SCHEMA} holds mvlog's own tables; its tables cannot be logged")
                assert entry.schema_name is not None  # a log entry names a table or a schema (config)
                names = self.source.tables_matching(cur, entry.schema_name, entry.pattern)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            if not names and skipped is not None:
                skipped.append(f"{entry.schema_name}.{entry.pattern}: no table matches (yet)")
            for name in names:
                table = self.source.resolve_table(cur, entry.schema_name, name)
                if table is None or table.oid in found:
                    continue
                if not table.key:
                    if skipped is not None:
                        skipped.append(f"{table.qualified}: it has no primary key")
                    continue
                found[table.oid] = (where, table, self.config.capture_of(entry))
        return list(found.values())

    def wants_logical(self) -> bool:
        """Whether ``logs:`` asks for a log captured by logical decoding (it may match no table yet)."""
        return needs_slot(self.config.capture_of(entry) for entry in self.config.logs)

    def declared_logs(self, cur: Cursor) -> dict[int, LogInfo]:
        """Logs as they are, or as ``apply`` would create them for the tables under ``logs:``."""
        logs = {log.table_oid: log for log in self.logs.registered().values()} if self.catalog.is_installed() else {}
        try:
            declared = self.declared_tables(cur)
        except ConfigError:
            declared = []  # apply reports it
        for _, table, _ in declared:
            if table.key and table.oid not in logs:
                logs[table.oid] = LogInfo.for_table(table, log_name_for(table))
        return logs

    def register(self, cur: Cursor, report: Registration) -> None:
        """Install the catalog, create the logs and register the views, in the caller's transaction."""
        self.catalog.install(cur)
        logs: dict[int, LogInfo] = {}
        declared = self.declared_tables(cur, report.logs_skipped)
        if needs_slot(capture for _, _, capture in declared):
            refusal = prerequisites.refusal(cur)
            if refusal:
                raise ConfigError(refusal)
            bound = prerequisites.wal_bound_warning(cur)
            if bound:
                report.warnings.append(bound)
        for where, table, capture in declared:
            try:
                log, outcome = self.logs.ensure(cur, table, capture)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            if outcome == "rekeyed":
                self.catalog.mark_needs_complete(cur, log, "the primary key of a base table changed")
            logs[table.oid] = log
            (report.logs_unchanged if outcome == "unchanged" else report.logs_created).append(table.qualified)

        registered = self.catalog.definition_hashes(cur)
        for index, view in enumerate(self.config.views):
            check = self.compiler.compile_view(cur, index, view, logs, check_refresh_sql=True)
            shape = check.shape
            digest = definition_hash(view)
            self.catalog.register(cur, ViewRegistration(
                view.name, view.query, digest, self.config.view_location(view.name), view.refresh,
                shape.view_class.value, "; ".join(shape.fast_reasons) or None, view.group, shape.logs,
                check.volatile,
            ))
            if registered.get(view.name) != digest:
                report.views_registered.append(view.name)
                self.catalog.drop_keymap(cur, view.name)  # its columns may differ now
                if view.refresh is RefreshMethod.FORCE and not shape.fast_possible:  # not in silence
                    report.warnings.append(f"view {view.name} will always be refreshed completely: "
                                           f"{'; '.join(shape.fast_reasons)}")
        gone = sorted(set(registered) - {v.name for v in self.config.views})
        for name in gone:
            self.catalog.unregister(cur, name)
        report.views_unregistered.extend(gone)

    def validate(self) -> Registration:
        """Check the configuration against the database without changing anything."""
        report = Registration()
        needs = "mvlog apply needs the rights of the owner of the tables and of schema mvlog"
        with self.source.validation(needs) as cur:
            self.register(cur, report)
        return report


def check_locations(config: Config, catalog: Catalog, warehouse: Warehouse) -> dict[str, Occupant]:
    """What each view's location holds; refuse (before anything is applied) to write a view
    where other files, or a Delta table mvlog did not write for it, are."""
    if not config.views:
        return {}
    warehouse.check_writable()
    registered = catalog.locations()

    def inspect(view: ViewConfig) -> Occupant:
        here, built = registered.get(view.name, (None, False))
        location = config.view_location(view.name)
        return warehouse.occupant(location, view.name if here == location and built else None)

    # Each look is a Delta log read on the driver: a fleet's are overlapped, as its refreshes are.
    with ThreadPoolExecutor(config.concurrency, "mvlog-inspect") as pool:
        occupants = dict(zip([v.name for v in config.views], pool.map(inspect, config.views),
                             strict=True))
    for index, view in enumerate(config.views):
        location = config.view_location(view.name)
        here, built = registered.get(view.name, (None, False))
        occupant = occupants[view.name]
        refusal = occupant.refusal(view.name, location, here == location, here == location and not built)
        if refusal:
            raise ConfigError(f"views[{index}] ({view.name}): {refusal}; mvlog writes a view only into a missing "
                              f"or empty directory or its own table (README: 'The warehouse')")
    return occupants


def register_tables(config: Config, warehouse: Callable[[], Warehouse], seen: set[str], names: list[str]) -> list[str]:
    """Register built views in the Spark catalog (``catalog:``); the names newly registered
    (``seen``: the views this process registered or found registered already; ``warehouse``: asked
    for only when there is one to register, so that Spark starts only then)."""
    if config.catalog is None:
        return []
    database, registered = config.catalog.database, []
    for name in names:
        if name in seen:  # checked by this process already: no Spark job per refresh
            continue
        if warehouse().register_table(database, name, config.view_location(name)):
            registered.append(f"{database}.{name}")
        seen.add(name)
    return registered

"""The view compiler: a declared view turned into a compiled one (:class:`ViewCheck`) — its query
with the views it reads expanded, classified once (the one caller of
:func:`mvlog.sql.analyze.analysis.analyze`), its shape (with the rules that keep what the analysis
refuses: a query over an aggregate, a correlated aggregate decorrelated, a top-N view), its
strategy's SQL planned by PostgreSQL where asked, its output signature, and what its Delta table
needs. ``apply`` registers compiled views; ``refresh``, ``verify``, ``status``, ``explain`` and
the maintenance commands take them from here (:meth:`Compiler.check`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

from sqlglot import exp

from mvlog.config import Config, ViewConfig
from mvlog.errors import ConfigError, RefreshError
from mvlog.model import HIDDEN_PREFIX, LogInfo, RefreshMethod, TableInfo
from mvlog.pipeline import plan as planner
from mvlog.pipeline.collector import fewer_collections
from mvlog.postgres.capture import is_decoded
from mvlog.postgres.catalog import Catalog, ViewState
from mvlog.postgres.late import LateRows
from mvlog.postgres.logs import Logs
from mvlog.postgres.source import Cursor, Source
from mvlog.spark import features
from mvlog.sql.analyze.analysis import Analysis, analyze, parse_query, tables_read
from mvlog.sql.generate import aggdelta
from mvlog.sql.parse.dependencies import ViewGraph
from mvlog.sql.parse.expansion import Expansion, PgView, expand_views, redefined_view
from mvlog.sql.parse.restrictions import reads_volatile
from mvlog.sql.pieces import aggplan, decompose, topspec
from mvlog.sql.pieces.choice import parameters_kept, shape_view
from mvlog.sql.pieces.shape import ViewShape, downgrade, piece_name
from mvlog.sql.rewrite import decorrelate, rewrite
from mvlog.sql.strategies import composed, topn
from mvlog.sql.strategies.registry import strategy_of

if TYPE_CHECKING:
    from mvlog.sql.explain import Explanation


@dataclass(frozen=True)
class ViewCheck:
    """A view checked against the database: its shape, output signature, the tables whose
    primary key changed since their log was made, and the columns its Delta table has."""

    shape: ViewShape
    signature: str
    key_changed: tuple[str, ...]
    columns: tuple[str, ...]  # the columns a complete refresh writes (the query's and hidden keys)
    volatile: bool = False  # it reads the clock or random numbers (restrictions.reads_volatile), or a PostgreSQL view


CHECK_SINCE = datetime(2000, 1, 1, tzinfo=UTC)  # any window start: the statements are only planned


def definition_hash(view: ViewConfig) -> str:
    return hashlib.sha256(view.query.strip().encode()).hexdigest()[:16]


class Compiler:
    """Compiles the configuration's views against the database (see the module)."""

    def __init__(self, config: Config, source: Source, catalog: Catalog, logs: Logs):
        self.config = config
        self.source = source
        self.catalog = catalog
        self.logs = logs

    def resolve_named_table(self, cur: Cursor, name: str) -> TableInfo | None:
        """The table a ``logs:`` entry (or a command argument) names, or None if there is none."""
        try:
            refs = tables_read(parse_query(f"SELECT * FROM {name}"))
        except ConfigError:
            refs = []
        if len(refs) != 1:
            raise ConfigError(f"{name!r} is not a table name")
        return self.source.resolve_table(cur, refs[0].schema, refs[0].name)

    def needs_complete(self, state: ViewState, check: ViewCheck) -> str | None:
        """Why the next refresh must be complete: recorded, or a base table's DDL since the last refresh."""
        columns_changed = bool(state.output_signature) and state.output_signature != check.signature
        last_ddl = None
        if columns_changed and not state.needs_complete and not check.key_changed:
            ddl = self.catalog.ddl_since([log.table_oid for log in check.shape.logs], state.last_refresh_at)
            last_ddl = (ddl[-1][1], ddl[-1][2]) if ddl else None
        redefined = redefined_view(state.output_signature, check.signature) if state.output_signature else None
        return planner.needs_complete(state.needs_complete, check.key_changed, columns_changed, last_ddl, redefined)

    @staticmethod
    def _classified(query: str, catalog: rewrite.Catalog | None = None, columns: list[str] | None = None,
                    types: list[str] | None = None) -> Analysis:
        """The analysis of ``query`` (with the ``catalog`` of its tables: merged and rewritten)."""
        return analyze(query, catalog, columns, types)

    @fewer_collections()
    def compile_view(self, cur: Cursor, index: int, view: ViewConfig, logs: dict[int, LogInfo],
                     check_fast: bool = True, check_refresh_sql: bool = False, delta_columns: bool = True,
                     compose: bool = True) -> ViewCheck:
        """Analyse and validate a view against the database (``logs``: by table oid).
        ``delta_columns``: its columns are a Delta table's (not a piece kept in PostgreSQL), so a
        name that needs column mapping is refused unless the view allows it. ``compose``: a view
        that is not fast as a whole may be kept over pieces of it (a piece itself is not).
        ``check_refresh_sql`` (apply): have PostgreSQL plan every statement a fast refresh
        would send, so a view mvlog cannot refresh fast is found before its first refresh."""
        where = f"views[{index}] ({view.name})"
        try:
            expansion = self.expand(cur, view.query)
            query = expansion.query
            top = topspec.split(query)  # a top-N view: its full view is analysed and kept
            full_query = top[0] if isinstance(top, tuple) else query
            tree = parse_query(full_query)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        catalog: dict[tuple[str | None, str], TableInfo] = {}
        key_changed: list[str] = []
        for ref in tables_read(tree):
            table = self.source.resolve_table(cur, ref.schema, ref.name)
            if table is None:
                raise ConfigError(f"{where}: table {ref.display} does not exist")
            if table.oid not in logs:
                refusal = self.source.log_refusal(cur, table)
                raise ConfigError(f"{where}: " + (refusal or f"table {table.qualified} has no materialized view log; "
                                                             f"add it under logs:"))
            catalog[(ref.schema, ref.name)] = table
            if tuple(c.name for c in table.key) != logs[table.oid].key_columns:
                key_changed.append(table.qualified)
        try:
            described = self.source.describe_query(cur, query)
            columns = [d[0] for d in described]
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        # CTEs and subqueries: analysed as what they merge into; a UNION's branches with their
        # untyped literals typed as the UNION types them (and a sum of sums pulled up keeps its type)
        merged = rewrite.needs_rewrite(tree)
        nested_groups = merged and any(s is not tree and s.args.get("group") is not None
                                       for s in tree.find_all(exp.Select))
        # a set operation's untyped literals are typed as the union types them (grouping sets
        # become one: a union of one aggregate per set)
        unions = isinstance(tree, exp.SetOperation) or tree.find(exp.GroupingSets, exp.Rollup, exp.Cube) is not None
        types = self.source.output_types(cur, full_query) if nested_groups or unions else None
        # the full view's columns: a top-N view's ORDER BY items that are no outputs are hidden ones
        full_columns = [*columns, *top[1].hidden] if isinstance(top, tuple) else columns
        analysis = self._classified(full_query, catalog, full_columns, types)
        # A rewritten query names its tables as resolved (schema.name), the others as written.
        known: dict[tuple[str | None, str], TableInfo] = {
            **{(t.schema, t.name): t for t in catalog.values()}, **catalog}
        by_alias = {ref.alias: logs[known[(ref.schema, ref.name)].oid] for ref in analysis.read_tables}
        duplicates = sorted({c for c in columns if columns.count(c) > 1})
        if duplicates:
            raise ConfigError(f"{where}: the query outputs column {duplicates[0]!r} more than once; "
                              f"give each column a unique alias")
        reserved = [c for c in columns if c.startswith(HIDDEN_PREFIX)]
        if reserved:
            raise ConfigError(f"{where}: column names starting with {HIDDEN_PREFIX!r} are reserved for mvlog "
                              f"({reserved[0]})")
        if delta_columns and not self.config.column_mapping(view) and (refused := features.refusal(columns)):
            raise ConfigError(f"{where}: {refused}")
        shape = shape_view(view.name, analysis, by_alias)
        if expansion.barrier is not None and shape.fast_possible:
            shape = downgrade(shape, query, f"it reads security-barrier view {expansion.barrier.name}, which "
                                            f"PostgreSQL does not merge into the query")
        if isinstance(top, str):
            shape = downgrade(shape, query, top)
        if not shape.fast_possible and compose and not reads_volatile(analysis.tree):
            joined = decorrelate.scalar_aggregates(analysis.tree)
            shape = self._composed(cur, index, view, logs, joined or full_query, shape,
                                   complete=full_query if joined else None)
        written: tuple[str, ...] = ()
        if shape.fast_possible:  # check the SQL mvlog generates for it; a view it cannot key is complete-only
            try:
                written = tuple(d[0] for d in self.source.describe_query(cur, shape.select_sql))
                if isinstance(top, tuple):
                    shape = self._top(shape, top[1], full_columns, written, query)
                for probe in strategy_of(shape).probe_sql():
                    self.source.describe_query(cur, probe)
                if shape.branches:
                    shape = dataclasses.replace(shape, branches=tuple(self._exact(cur, b) for b in shape.branches))
                shape = parameters_kept(self._exact(cur, shape), query)
                if check_refresh_sql:
                    strategy = strategy_of(shape)
                    statements = strategy.statements(CHECK_SINCE)
                    # as a refresh runs them when the capture wrote rows after its snapshot
                    late = LateRows.stand_in([log for log in shape.logs if is_decoded(log)])
                    statements = [*statements, *(late.resolve(s) for s in statements)] if late else statements
                    self.source.check_statements(cur, statements, [
                        *strategy.stand_in_sql(), *(s.create for s in strategy.scratch(CHECK_SINCE))])
            except ConfigError as exc:  # a shape mvlog claims but writes wrong SQL for: say so, and whose fault
                shape = downgrade(shape, query, f"mvlog cannot key this view for fast refresh: PostgreSQL refused "
                                                f"the SQL mvlog wrote for its shape ({shape.view_class.value}): {exc} "
                                                f"(a bug in mvlog: please report it with the query)")
        if isinstance(top, tuple) and not shape.fast_possible and shape.select_sql != query:
            shape = dataclasses.replace(downgrade(shape, query, ""), fast_reasons=shape.fast_reasons)  # with its LIMIT
        if check_fast and view.refresh is RefreshMethod.FAST and not shape.fast_possible:
            raise ConfigError(f"{where}: refresh: fast is impossible: {'; '.join(shape.fast_reasons)}")
        # Its result can change with nothing in its logs: it reads the clock, or a PostgreSQL view
        # (a CREATE OR REPLACE VIEW logs nothing a refresh could find without checking the view).
        return ViewCheck(shape, expansion.signature(described), tuple(key_changed), written,
                         reads_volatile(analysis.tree) or bool(expansion.pg_views))

    def _composed(self, cur: Cursor, index: int, view: ViewConfig, logs: dict[int, LogInfo], query: str,
                  shape: ViewShape, complete: str | None = None) -> ViewShape:
        """The view kept over the pieces of its query that are fast views of their own
        (:mod:`mvlog.sql.pieces.decompose`, :mod:`mvlog.sql.strategies.composed`), or ``shape`` as it is if it has none
        (``complete``: the view's query, if ``query`` is a rewrite of it)."""
        kept: list[tuple[ViewShape, list[str]]] = []
        refused: list[str] = []  # why each part tried could not be a piece, outermost first

        def piece_columns(sql: str) -> list[str] | None:
            piece = view.model_copy(update={"query": sql, "name": piece_name(view.name, len(kept) + 1)})
            try:
                check = self.compile_view(cur, index, piece, logs, check_fast=False, delta_columns=False,
                                          compose=False)
            except ConfigError as exc:
                refused.append(str(exc).split(": ", 1)[-1])
                return None
            if not check.shape.fast_possible or check.shape.top is not None:
                refused.append("; ".join(check.shape.fast_reasons) or "a top-N piece")
                return None
            kept.append((check.shape, list(check.columns)))
            return [c for c in check.columns if c not in check.shape.hidden_columns]

        found = decompose.decompose(query, piece_columns, lambda sql: self.source.output_types(cur, sql))
        if found is None:
            if refused:  # say which piece stops it
                return dataclasses.replace(shape, fast_reasons=(*shape.fast_reasons, f"none of its parts is fast as a "
                                                                                      f"piece of its own: the first "
                                                                                      f"is not because {refused[0]}"))
            return shape
        outer, _ = found
        # Recomputed on every refresh: a correlated aggregate over a piece (q01's average of its
        # store) joined grouped, not run once per row (8,885 rows × 8,885 at TPC-DS 0.2: 18 s).
        outer = decorrelate.scalar_aggregates(parse_query(outer)) or outer
        return composed.keep_composed(shape, kept, outer, complete or query)

    @staticmethod
    def _top(shape: ViewShape, spec: topspec.TopSpec, columns: list[str], written: tuple[str, ...],
             query: str) -> ViewShape:
        """The top-N view over the full view ``shape``, or complete-only if its ORDER BY is not over
        its output columns."""
        order = topspec.order_of(spec, columns)
        if isinstance(order, str):
            return downgrade(shape, query, order)
        return topn.keep_top(shape, spec, order, written)

    def _exact(self, cur: Cursor, shape: ViewShape) -> ViewShape:
        """``shape``, its groups recomputed if it keeps sums of floating-point inputs by deltas
        (they would drift from the query's own rounding)."""
        if shape.deltas is None:
            return shape
        type_oids = [d[1] for d in self.source.describe_query(cur, aggplan.inputs_probe_sql(shape))]
        return aggdelta.kept_by_deltas(shape, input_types=type_oids)

    def signature(self, cur: Cursor, query: str) -> str:
        """What a view's next refresh compares to see whether it must be complete: the query's
        output columns and the definitions of the PostgreSQL views it reads."""
        expansion = self.expand(cur, query)
        return expansion.signature(self.source.describe_query(cur, expansion.query))

    @cached_property
    def graph(self) -> ViewGraph:
        """Which views of the configuration read which others (a cycle is a :class:`ConfigError`)."""
        return ViewGraph.of(self.config.views)

    def expand(self, cur: Cursor, query: str) -> Expansion:
        """``query`` with the views it reads expanded to their definitions: the project's views
        (a plain name), then PostgreSQL's."""
        self.graph  # noqa: B018  a cycle is refused before any view is expanded

        def lookup(schema: str | None, name: str) -> PgView | None:
            if schema is None:
                try:
                    upstream = self.config.view(name)
                except KeyError:
                    upstream = None
                if upstream is not None:
                    same = self.source.relation_on_path(cur, name)
                    if same is not None:
                        raise ConfigError(f"{name} is both a view of this project and the PostgreSQL relation "
                                          f"{same}; rename the view, or schema-qualify the table")
                    return PgView(upstream.name, upstream.query, upstream=True)
            return self.source.view_definition(cur, schema, name)

        return expand_views(query, lookup)

    def explain(self, cur: Cursor, view: ViewConfig, logs: dict[int, LogInfo]) -> Explanation:
        """What refresh capabilities a view has, and why not (Oracle's EXPLAIN_MVIEW): its query
        analysed as ``apply`` would, over ``logs`` (as they are, or as ``apply`` would make them),
        without needing them to exist yet."""
        from mvlog.sql.explain import explain

        index = self.config.views.index(view)
        try:
            expansion = self.expand(cur, view.query)
            top = topspec.split(expansion.query)
            analysis = self._classified(top[0] if isinstance(top, tuple) else expansion.query)
        except ConfigError as exc:
            raise ConfigError(f"views[{index}] ({view.name}): {exc}") from None
        missing = []
        for ref in analysis.read_tables:
            table = self.source.resolve_table(cur, ref.schema, ref.name)
            if table is None:
                raise ConfigError(f"views[{index}] ({view.name}): table {ref.display} does not exist")
            if table.oid not in logs:
                missing.append(table.qualified)
        shape = None if missing else self.compile_view(cur, index, view, logs, check_fast=False).shape
        columns = [d[0] for d in self.source.describe_query(cur, expansion.query)]
        result = explain(view.name, view.refresh.value, analysis, shape, missing, expansion.pg_views)
        result.upstreams = expansion.upstreams
        result.dependents = list(self.graph.dependents(view.name))
        result.table_features = self.table_features(view, columns)
        return result

    def table_features(self, view: ViewConfig, columns: list[str]) -> list[str]:
        """The Delta table features of the view's table (see :mod:`mvlog.spark.features`), with why."""
        found = []
        unsafe = [c for c in columns if features.needs_column_mapping([c])]
        if unsafe:
            found.append(f"column mapping: column {unsafe[0]!r} is not a valid Delta column name without it "
                         f"(allowed by column_mapping: true; deltalake's to_pandas reads its columns as NULLs)")
        if self.config.deletion_vectors(view):
            found.append("deletion vectors: asked for by deletion_vectors: true (deltalake cannot read the view)")
        if view.change_feed:
            found.append("change data feed: asked for by change_feed: true")
        return found

    def check(self, view: ViewConfig) -> ViewCheck:
        """The view against today's catalog; a query that no longer works makes the view invalid."""
        logs = {log.table_oid: log for log in self.logs.registered().values()}
        try:
            with self.source.inspection() as cur:
                return self.compile_view(cur, self.config.views.index(view), view, logs)
        except ConfigError as exc:
            reason = str(exc).split(": ", 1)[-1]
            raise RefreshError(f"view {view.name} is invalid: {reason} (a base table changed; fix the query or "
                               f"the table, then run 'mvlog apply')") from None


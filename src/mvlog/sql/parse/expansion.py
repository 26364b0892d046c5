"""PostgreSQL views in a view query, expanded to their definitions as PostgreSQL's rewriter does.

A query over ``active_customers`` (``CREATE VIEW active_customers AS SELECT … FROM customers
WHERE active``) is the same query with ``(SELECT … FROM customers WHERE active) AS
active_customers`` in its place, which :mod:`mvlog.sql.rewrite.rewrite` merges like any derived table. The
definitions come from the database (:meth:`mvlog.postgres.source.Source.view_definition`); this module
only substitutes them, so it needs neither a driver nor Spark.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from mvlog.errors import ConfigError
from mvlog.sql.parse.sqltree import DIALECT, identifier_name, parsed, sql_text

MAX_DEPTH = 32  # views over views; PostgreSQL itself forbids cycles


@dataclass(frozen=True)
class PgView:
    """A plain PostgreSQL view: its qualified name, its definition (``pg_get_viewdef`` with every
    name qualified) and whether it is a security barrier (PostgreSQL does not merge those) — or,
    ``upstream``, a view of the project read by its plain name, with its query as definition."""

    name: str
    definition: str
    security_barrier: bool = False
    upstream: bool = False


@dataclass(frozen=True)
class Expansion:
    """A view query with the PostgreSQL views it reads replaced by their definitions."""

    query: str
    views: tuple[PgView, ...] = ()

    @property
    def upstreams(self) -> list[str]:
        """The project's views the query reads, directly or through others."""
        return [v.name for v in self.views if v.upstream]

    @property
    def pg_views(self) -> list[str]:
        """The PostgreSQL views the query reads, directly or through others."""
        return [v.name for v in self.views if not v.upstream]

    @property
    def barrier(self) -> PgView | None:
        """The first security-barrier view the query reads, if any."""
        return next((v for v in self.views if v.security_barrier), None)

    def signature(self, columns: list) -> str:
        """The query's output ``columns`` and the definitions of the views it reads, as one string:
        it changes when a view is redefined (``CREATE OR REPLACE VIEW``)."""
        if not self.views:
            return json.dumps(columns)
        return json.dumps({"columns": columns, "views": {v.name: v.definition for v in self.views}})


def redefined_view(before: str | None, after: str) -> str | None:
    """The view whose definition differs between two :meth:`Expansion.signature` strings, if any."""
    try:
        old, new = json.loads(before or "null"), json.loads(after)
    except ValueError:
        return None
    old_views = old.get("views", {}) if isinstance(old, dict) else {}
    new_views = new.get("views", {}) if isinstance(new, dict) else {}
    return next((name for name in sorted(set(old_views) | set(new_views))
                 if old_views.get(name) != new_views.get(name)), None)


def expand_views(query: str, lookup: Callable[[str | None, str], PgView | None]) -> Expansion:
    """``query`` with every table name that ``lookup(schema, name)`` finds to be a view replaced
    by ``(definition) AS <alias>``, down to base tables; the query unchanged if it reads no view.
    Names of the query's CTEs are not looked up."""
    try:
        tree = parsed(query)
    except ParseError:
        return Expansion(query)  # the analysis words the error
    seen: dict[tuple[str | None, str], PgView | None] = {}
    found: dict[str, PgView] = {}
    for _ in range(MAX_DEPTH):
        ctes = {identifier_name(c.args["alias"].this) for c in tree.find_all(exp.CTE) if c.args.get("alias")}
        replaced = False
        for table in list(tree.find_all(exp.Table)):
            if not isinstance(table.this, exp.Identifier):
                continue
            schema = identifier_name(table.args["db"]) if table.args.get("db") else None
            name = identifier_name(table.this)
            if schema is None and name in ctes:
                continue
            if (schema, name) not in seen:
                seen[(schema, name)] = lookup(schema, name)
            view = seen[(schema, name)]
            if view is None:
                continue
            try:
                body = sqlglot.parse_one(view.definition.strip().rstrip(";"), read=DIALECT)
            except ParseError as exc:
                raise ConfigError(f"the definition of view {view.name} cannot be parsed: "
                                  f"{str(exc).splitlines()[0]}") from None
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name, quoted=True))
            table.replace(exp.Subquery(this=body, alias=alias.copy()))
            found[view.name] = view
            replaced = True
        if not replaced:
            break
    else:
        raise ConfigError(f"views nest deeper than {MAX_DEPTH} levels")
    if not found:
        return Expansion(query)
    return Expansion(sql_text(tree), tuple(found.values()))

"""Views over views: which views of a project read which others, and in what order they refresh.

A view's query may read another view of the same project by its plain name (``FROM silver_orders
s``); it means that view's query at the same source snapshot. :class:`ViewGraph` finds those
reads from the queries alone (no database): a table reference without a schema whose name is a
view of the project (and not a CTE of the query) is an *upstream*. The graph refuses cycles, and
gives the closure a refresh needs (a view's upstreams, transitively) and a dependency order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import ParseError

from mvlog.config import ViewConfig
from mvlog.errors import ConfigError
from mvlog.sql.parse.sqltree import identifier_name, parsed


def plain_table_names(query: str) -> set[str]:
    """The names of the tables ``query`` reads without a schema (CTE names left out), as
    PostgreSQL folds them; empty if the query does not parse (the analysis words that error)."""
    try:
        tree = parsed(query)
    except ParseError:
        return set()
    ctes = {identifier_name(c.args["alias"].this) for c in tree.find_all(exp.CTE) if c.args.get("alias")}
    return {identifier_name(t.this) for t in tree.find_all(exp.Table)
            if isinstance(t.this, exp.Identifier) and not t.args.get("db")} - ctes


@dataclass(frozen=True)
class ViewGraph:
    """The views of a project and the views each one reads (its *upstreams*), by view name."""

    names: tuple[str, ...]  # in configuration order
    upstreams: dict[str, tuple[str, ...]]
    reads: dict[str, frozenset[str]]  # every plain table name each view's query reads, lower case

    @classmethod
    def of(cls, views: Sequence[ViewConfig]) -> ViewGraph:
        """The graph of ``views``; a :class:`ConfigError` naming the cycle if views read each other
        in a circle (a view reading itself included)."""
        by_lower = {v.name.lower(): v.name for v in views}
        reads = {v.name: frozenset(n.lower() for n in plain_table_names(v.query)) for v in views}
        upstreams = {name: tuple(by_lower[n] for n in sorted(read) if n in by_lower) for name, read in reads.items()}
        graph = cls(tuple(v.name for v in views), upstreams, reads)
        graph._check_acyclic([v.name for v in views])
        return graph

    def _check_acyclic(self, names: list[str]) -> None:
        state: dict[str, int] = {}  # 1: on the current path, 2: done

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = path[path.index(name):] + [name]
                index = self.names.index(cycle[0])
                raise ConfigError(f"views[{index}] ({cycle[0]}): views read each other in a cycle: "
                                  + " → ".join(cycle))
            state[name] = 1
            for upstream in self.upstreams.get(name, ()):
                visit(upstream, path + [name])
            state[name] = 2

        for name in names:
            visit(name, [])

    def dependents(self, name: str) -> tuple[str, ...]:
        """The views that read ``name`` directly, in configuration order (``name`` need not be a
        view of the configuration any more: a view being dropped)."""
        return tuple(v for v in self.names if name.lower() in self.reads[v] and v.lower() != name.lower())

    def downstream(self, names: Iterable[str]) -> list[str]:
        """Every view that reads one of ``names``, directly or not, in dependency order."""
        found: set[str] = set()
        stack = list(names)
        while stack:
            for reader in self.dependents(stack.pop()):
                if reader not in found:
                    found.add(reader)
                    stack.append(reader)
        return self.ordered(found)

    def closure(self, names: Iterable[str]) -> list[str]:
        """``names`` with every view they read, transitively, in dependency order (upstreams first;
        otherwise configuration order)."""
        wanted: set[str] = set()
        stack = list(names)
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(self.upstreams.get(name, ()))
        return self.ordered(wanted)

    def ordered(self, names: Iterable[str]) -> list[str]:
        """``names`` in dependency order: each after the views it reads, else in configuration order."""
        wanted, done, order = set(names), set[str](), list[str]()

        def visit(name: str) -> None:
            if name in done:
                return
            done.add(name)
            for upstream in self.upstreams.get(name, ()):  # through views not wanted, too
                visit(upstream)
            if name in wanted:
                order.append(name)

        for name in self.names:
            if name in wanted:
                visit(name)
        return order

    def connected(self, a: str, b: str) -> bool:
        """Whether ``a`` reads ``b`` or ``b`` reads ``a``, directly or not."""
        return b in self.closure([a]) or a in self.closure([b])

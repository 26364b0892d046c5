"""Names in a parsed query: identifiers as PostgreSQL folds them, the tables a SELECT reads
in its FROM items, and the side of a join."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

DIALECT = "postgres"


@dataclass(frozen=True)
class TableRef:
    """A base table as the query names it."""

    schema: str | None
    name: str
    alias: str

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def identifier_name(node: exp.Identifier | str) -> str:
    """The name PostgreSQL gives an identifier: quoted as written, unquoted folded to lower case."""
    if isinstance(node, str):
        return node
    return node.this if node.quoted else node.this.lower()


def table_refs(select: exp.Select) -> list[TableRef]:
    refs = []
    sources = [select.args.get("from_").this] if select.args.get("from_") else []
    sources += [join.this for join in select.args.get("joins") or []]
    for source in sources:
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            schema = identifier_name(source.args["db"]) if source.args.get("db") else None
            name = identifier_name(source.this)
            alias = identifier_name(source.args["alias"].this) if source.alias else name
            refs.append(TableRef(schema, name, alias))
    return refs


def join_side(join: exp.Join) -> str:
    """INNER, LEFT, RIGHT, FULL or CROSS (a comma join is CROSS: its condition is in WHERE)."""
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if side:
        return side
    if kind == "CROSS" or not (join.args.get("on") or join.args.get("using") or join.args.get("method")):
        return "CROSS"
    return "INNER"

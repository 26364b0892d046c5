"""One owner of mvlog's catalog tables: no module outside ``mvlog.postgres.catalog`` names one of
them in SQL; the rest of mvlog asks the catalog's functions (pure: reads the source).

A table is named in SQL by a string (``mvlog.views``, ``"mvlog"."views"``, in a statement, a
fragment or a regclass literal) or by an identifier built from the schema and the table
(``sql.Identifier("mvlog", "views")``, ``sql.Identifier(MVLOG_SCHEMA, "views")``, sqlglot's
``exp.table_("views", db=MVLOG_SCHEMA)``). Docstrings, bare strings and comments are prose and
may name a table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "mvlog"
OWNER = PACKAGE / "postgres" / "catalog"

# The tables of the mvlog schema that the catalog owns, and mvlog.unchanged_views (a function
# reading them, sql/007_unchanged.sql).
CATALOG = ("views", "view_logs", "logs", "log_partitions", "capture_state", "refresh_history", "ddl_log",
           "verify_history", "unchanged_views", "schema_version")
# Tables of sql/ that are not the catalog's (none today: a new one is decided here).
NOT_CATALOG: set[str] = set()

NAMED = re.compile(r'"?\bmvlog"?\s*\.\s*"?(' + "|".join(CATALOG) + r')\b"?')
SCHEMA_NAMES = ("mvlog", "MVLOG_SCHEMA")


def prose(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are statements of their own: docstrings and other
    bare strings, which are never SQL."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def is_schema(node: ast.AST | None) -> bool:
    """Whether ``node`` is the mvlog schema's name: the literal, or ``MVLOG_SCHEMA`` (bare or as an attribute)."""
    if isinstance(node, ast.Constant):
        return node.value == "mvlog"
    if isinstance(node, ast.Name):
        return node.id in SCHEMA_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in SCHEMA_NAMES
    return False


def callee(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def catalog_names(source: str) -> list[tuple[int, str]]:
    """(line, what) of every place ``source`` names a catalog table in SQL."""
    tree = ast.parse(source)
    skipped = prose(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            found += [(node.lineno, match.group(0)) for match in NAMED.finditer(node.value)]
        elif isinstance(node, ast.Call) and callee(node) == "Identifier" and len(node.args) >= 2:
            schema, table = node.args[-2], node.args[-1]
            if is_schema(schema) and isinstance(table, ast.Constant) and table.value in CATALOG:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and callee(node) == "table_" and node.args:
            db = next((k.value for k in node.keywords if k.arg == "db"), node.args[1] if len(node.args) > 1 else None)
            table = node.args[0]
            if is_schema(db) and isinstance(table, ast.Constant) and table.value in CATALOG:
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def sql_tables() -> set[str]:
    """The tables sql/*.sql creates in the mvlog schema."""
    created = re.compile(r"CREATE TABLE IF NOT EXISTS mvlog\.(\w+)", re.IGNORECASE)
    return {name for path in (ROOT / "sql").glob("*.sql") for name in created.findall(path.read_text())}


def test_only_the_catalog_package_names_the_catalog_tables():
    wrong = [f"{path.relative_to(PACKAGE)}:{line}: {what}"
             for path in sorted(PACKAGE.rglob("*.py")) if OWNER not in path.parents
             for line, what in catalog_names(path.read_text(encoding="utf-8"))]
    assert not wrong, "name these tables in mvlog.postgres.catalog only (add a function there):\n" + "\n".join(wrong)


def test_the_catalog_package_names_every_catalog_table():
    """The check above looks for the names the owner really uses."""
    named = {re.sub(r'["\s]', "", what).split(".")[1]
             for path in OWNER.rglob("*.py") for _, what in catalog_names(path.read_text(encoding="utf-8"))}
    assert named == set(CATALOG)


def table_of(what: str) -> str:
    """The catalog table a match of :func:`catalog_names` (or of NAMED) names."""
    match = NAMED.search(what)
    return match.group(1) if match else next(t for t in CATALOG if repr(t) in what or f'"{t}"' in what)


# The module of the catalog that names each table.
TABLE_OWNERS = {"views.py": {"views", "view_logs", "ddl_log", "unchanged_views", "schema_version"},
                "history.py": {"refresh_history"}, "log_registry.py": {"logs", "log_partitions"},
                "capture_state.py": {"capture_state"}, "verify_results.py": {"verify_history"}}


def test_each_catalog_table_is_named_by_its_one_module_of_the_package():
    """Inside the catalog too, one module owns a table, in SQL and in its prose: a statement
    about another module's table asks that module for the fragment (log_registry.tables_where).
    Catalog's parts (the registry and the schema; the history) are two modules."""
    owners: dict[str, set[str]] = {}
    for path in sorted(OWNER.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for what in [w for _, w in catalog_names(text)] + [m.group(0) for m in NAMED.finditer(text)]:
            owners.setdefault(table_of(what), set()).add(path.name)
    expected = {table: {module} for module, tables in TABLE_OWNERS.items() for table in tables}
    assert owners == expected, f"catalog tables named by other modules than their owner: {owners}"


def test_every_table_of_the_mvlog_schema_is_decided():
    """A table added to sql/ is the catalog's (CATALOG) or said not to be (NOT_CATALOG)."""
    assert sql_tables() == (set(CATALOG) - {"unchanged_views"}) | NOT_CATALOG


@pytest.mark.parametrize("code", [
    'cur.execute("SELECT 1 FROM mvlog.views WHERE name = %s", (name,))',
    'cur.execute("UPDATE mvlog.logs SET last_stamp = %s "\n            "WHERE log_name = ANY(%s)", (s, n))',
    'q = f"SELECT {columns} FROM mvlog.capture_state"',
    "source.query(\"SELECT to_regclass('mvlog.refresh_history')\")",
    'cur.execute(\'SELECT * FROM "mvlog"."ddl_log"\')',
    'sql.SQL("DELETE FROM {}").format(sql.Identifier("mvlog", "view_logs"))',
    'sql.SQL("SELECT max(version) FROM {}").format(sql.Identifier(MVLOG_SCHEMA, "schema_version"))',
    'exp.select("*").from_(exp.table_("views", db=MVLOG_SCHEMA))',
])
def test_a_statement_naming_a_catalog_table_is_found(code):
    assert catalog_names(code)


@pytest.mark.parametrize("code", [
    '"""Reads ``mvlog.views``: the registry."""',
    'def f():\n    """Writes mvlog.logs rows."""\n    return 1',
    'x = 1  # the position in mvlog.capture_state',
    'cur.execute("SELECT * FROM mvlog.log_partitions_old")',
    'sql.Identifier(MVLOG_SCHEMA, log.log_name)',
    'sql.Identifier(MVLOG_SCHEMA, "mlog$_t_1")',
    'cur.execute("SELECT mvlog.cover_partitions(%s, %s)", (oid, how))',
    'cur.execute("SELECT * FROM mvlog.logs_old")',
])
def test_prose_and_other_mvlog_objects_are_not(code):
    assert not catalog_names(code)

"""The package's layers: imports only point down, and each layer keeps to its drivers.

``mvlog.sql`` is pure (no psycopg2, no pyspark), ``mvlog.postgres`` never imports pyspark,
``mvlog.spark`` never psycopg2 (it is handed JDBC options); none imports the pipeline above it;
``mvlog.ops`` (verify, freshness, metrics) reads the pipeline but never the facade or the CLI.
Checked on the source (every import statement, also inside functions; ``TYPE_CHECKING`` blocks
are annotations only), and by importing each pure module in a fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mvlog"
BASE = {"mvlog.model", "mvlog.errors", "mvlog.config"}  # shared facts every layer may read
ALLOWED = {  # layer -> (mvlog modules or packages it may import, third-party roots it must not)
    "sql": ({"mvlog.sql"} | BASE, {"psycopg2", "pyspark", "py4j"}),
    "postgres": ({"mvlog.postgres", "mvlog.sql"} | BASE, {"pyspark", "py4j"}),
    "spark": ({"mvlog.spark"} | BASE, {"psycopg2"}),
    # Operations: over the pipeline and the layers below it; never the facade or the commands.
    "ops": ({"mvlog.ops", "mvlog.sql", "mvlog.postgres", "mvlog.spark", "mvlog.plan", "mvlog.apply",
             "mvlog.refresh"} | BASE, set()),
}


def imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every import in ``path`` outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree)
               if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
               for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "mvlog":  # from mvlog import x: the module mvlog.x
                found += [(f"mvlog.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((node.module, node.lineno))
    return found


def layer_modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).glob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_itself_the_layers_below_and_its_own_drivers(layer):
    allowed, forbidden = ALLOWED[layer]
    wrong = []
    for path in layer_modules(layer):
        for module, line in imports(path):
            root = module.split(".")[0]
            if root in forbidden:
                wrong.append(f"{path.name}:{line} imports {module}")
            elif root == "mvlog" and not any(module == a or module.startswith(a + ".") for a in allowed):
                wrong.append(f"{path.name}:{line} imports {module}")
    assert not wrong, wrong


def test_every_module_of_a_layer_is_in_its_package_and_has_a_docstring():
    for layer in ALLOWED:
        for path in layer_modules(layer):
            assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), f"{layer}/{path.name}"


@pytest.mark.parametrize("module", [f"mvlog.sql.{p.stem}" for p in layer_modules("sql") if p.stem != "__init__"]
                         + ["mvlog.plan", "mvlog.model", "mvlog.config", "mvlog.errors"])
def test_pure_modules_load_no_driver_when_imported(module):
    probe = (f"import sys, json, {module}; "
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg2', 'pyspark', 'py4j') "
             "or m.startswith(('mvlog.postgres.', 'mvlog.spark.')))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       check=True).stdout)
    assert loaded == []

"""The package's layers: every module of ``mvlog`` is in one layer, imports only point down, each
layer keeps to its drivers, and no two modules of one package import each other in a cycle.

Checked on the source (every import statement, also inside functions), and by importing each pure
module in a fresh interpreter. Imports in ``TYPE_CHECKING`` blocks (annotations only) may name a
driver's types, but never a layer above.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mvlog"

# The layers, bottom up: a module of a layer may import modules of its own layer and of the layers
# *below it in this table*, and none of the third-party roots its row forbids. ``mvlog`` itself is
# the package's ``__init__``/``__main__``.
LAYERS: list[tuple[str, set[str], set[str]]] = [  # (layer, its modules or packages, forbidden roots)
    ("shared", {"mvlog.errors", "mvlog.model", "mvlog.config", "mvlog.timeouts", "mvlog.yamltext", "mvlog.faults",
                "mvlog.progress"},
     {"psycopg2", "pyspark", "py4j", "rich", "click", "prometheus_client"}),
    ("sql", {"mvlog.sql"}, {"psycopg2", "pyspark", "py4j", "rich", "click"}),
    ("postgres", {"mvlog.postgres"}, {"pyspark", "py4j", "rich", "click"}),
    ("spark", {"mvlog.spark"}, {"psycopg2", "rich", "click"}),
    ("pipeline", {"mvlog.pipeline"}, {"psycopg2", "pyspark", "py4j", "rich", "click"}),
    ("ops", {"mvlog.ops"}, {"psycopg2", "rich", "click"}),
    ("facade", {"mvlog.project"}, {"psycopg2", "rich", "click"}),
    ("ui", {"mvlog.ui"}, {"psycopg2", "pyspark", "py4j", "rich", "click"}),
    ("commands", {"mvlog.commands", "mvlog.__main__", "mvlog"}, {"psycopg2"}),
]
# Beside the order: the adapters do not import each other (Spark reads PostgreSQL through the JDBC
# options it is handed).
NOT_BELOW = {"spark": {"postgres"}}
# The SQL layer's passes, in order (its folders): a module of a pass imports only its own pass and
# those before it; ``mvlog.sql.explain`` (and the package itself) sit on top of them all.
SQL_PASSES = ["parse", "rewrite", "analyze", "pieces", "generate", "strategies"]
PURE = ["mvlog.pipeline.plan", "mvlog.pipeline.cost", "mvlog.pipeline.readform", "mvlog.model", "mvlog.config",
        "mvlog.timeouts", "mvlog.errors", "mvlog.progress"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def layer_of(module: str) -> int:
    """The index in LAYERS of the layer ``module`` belongs to (its longest matching entry)."""
    best = None
    for index, (_, members, _) in enumerate(LAYERS):
        for member in members:
            if (module == member or module.startswith(member + ".")) and (
                    best is None or len(member) > best[1]):
                best = (index, len(member))
    assert best is not None, f"{module} is in no layer of tests/test_layers.py"
    return best[0]


def imports(path: Path, annotations: bool = False) -> list[tuple[str, int]]:
    """(module, line) of every import in ``path`` (with ``annotations``, also those in ``if
    TYPE_CHECKING:`` blocks); relative imports resolved, ``from package import module`` as the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set() if annotations else {
        id(n) for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for n in ast.walk(node)}
    here = module_name(path).split(".")
    package = here if path.stem == "__init__" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).rstrip(".") \
                if node.level else node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                    (PACKAGE.parent / Path(*candidate.split(".")) / "__init__.py").exists()
                found.append((candidate if is_module else base, node.lineno))
    return found


def mvlog_imports(path: Path) -> list[tuple[str, int]]:
    return [(m, line) for m, line in imports(path) if m == "mvlog" or m.startswith("mvlog.")]


def test_every_module_is_in_exactly_one_layer():
    for path in all_modules():
        layer_of(module_name(path))


@pytest.mark.parametrize("layer", [name for name, _, _ in LAYERS])
def test_a_layer_imports_only_itself_the_layers_below_and_its_own_drivers(layer):
    index = [name for name, _, _ in LAYERS].index(layer)
    forbidden = LAYERS[index][2]
    wrong = []
    for path in all_modules():
        module = module_name(path)
        if layer_of(module) != index:
            continue
        run_time = set(imports(path))
        for imported, line in imports(path, annotations=True):
            where = f"{path.relative_to(PACKAGE)}:{line} imports {imported}"
            if (imported, line) in run_time and imported.split(".")[0] in forbidden:
                wrong.append(where)
            elif imported == "mvlog" or imported.startswith("mvlog."):
                target = layer_of(imported)
                if target > index:  # not even for annotations: a layer knows nothing of those above it
                    wrong.append(f"{where} (layer {LAYERS[target][0]})")
                elif (imported, line) in run_time and LAYERS[target][0] in NOT_BELOW.get(layer, ()):
                    wrong.append(f"{where} (layer {LAYERS[target][0]})")
    assert not wrong, wrong


def sql_pass_of(module: str) -> int:
    """The index in SQL_PASSES of the pass a module of ``mvlog.sql`` is in (its folder); the
    modules at the folder's root come after every pass."""
    parts = module.split(".")
    assert parts[:2] == ["mvlog", "sql"], module
    if len(parts) == 2 or len(parts) == 3 and (PACKAGE / "sql" / f"{parts[2]}.py").exists():
        return len(SQL_PASSES)
    assert parts[2] in SQL_PASSES, f"{module} is in no pass of tests/test_layers.py's SQL_PASSES"
    return SQL_PASSES.index(parts[2])


def test_every_sql_folder_is_a_pass():
    folders = sorted(p.name for p in (PACKAGE / "sql").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(SQL_PASSES)


def test_a_pass_of_the_sql_layer_imports_only_itself_and_the_passes_before_it():
    wrong = []
    for path in sorted((PACKAGE / "sql").rglob("*.py")):
        module = module_name(path)
        here = sql_pass_of(module)
        for imported, line in imports(path, annotations=True):
            if imported.startswith("mvlog.sql.") and sql_pass_of(imported) > here:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports {imported} "
                             f"(pass {SQL_PASSES[sql_pass_of(imported)]})")
    assert not wrong, wrong


def test_no_cycle_between_the_modules_of_one_package():
    graph: dict[str, set[str]] = {}
    for path in all_modules():
        module = module_name(path)
        package = module.rsplit(".", 1)[0] if path.stem != "__init__" else module
        graph[module] = {m for m, _ in mvlog_imports(path)
                         if m != module and m.rsplit(".", 1)[0] == package and m != package}
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


def test_every_module_has_a_docstring():
    for path in all_modules():
        if path.name != "__main__.py":
            assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), path.relative_to(PACKAGE)


@pytest.mark.parametrize("module", sorted(module_name(p) for p in (PACKAGE / "sql").rglob("*.py")) + PURE)
def test_pure_modules_load_no_driver_when_imported(module):
    probe = (f"import sys, json, {module}; "
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg2', 'pyspark', 'py4j', "
             "'rich') or m.startswith(('mvlog.postgres.', 'mvlog.spark.')))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       check=True).stdout)
    assert loaded == []


def test_the_command_line_loads_no_spark_and_no_database_driver_for_help():
    probe = ("import sys, json, mvlog.commands.cli; "
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg2', 'pyspark', 'py4j'))))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       check=True).stdout)
    assert loaded == []


README = PACKAGE.parents[1] / "README.md"


def readme_layers() -> list[tuple[str, str]]:
    """(layer, its modules cell) of the README's layer table, in order."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| layer | modules | may not import |"):].split("\n\n")[0].splitlines()[2:]
    return [(cells[1].strip(), cells[2]) for cells in (row.split("|") for row in table)]


def test_the_readme_s_layer_table_is_this_table():
    """The README's layers, in order, are LAYERS', and each names every module of its layer."""
    rows = readme_layers()
    assert [name for name, _ in rows] == [name for name, _, _ in LAYERS]
    missing = []
    for (name, cell), index in zip(rows, range(len(LAYERS))):
        named = {n.removeprefix("mvlog/") for n in re.findall(r"`([\w/]+?)/?`", cell)}
        for path in all_modules():
            module = module_name(path)
            if layer_of(module) == index and module != "mvlog" and path.stem != "__main__":
                parts = module.split(".")
                if parts[-1] not in named and "/".join(parts[1:]) not in named:
                    missing.append(f"{name}: {module}")
    assert not missing, f"the README's layer table does not name: {missing}"

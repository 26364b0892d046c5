"""The shipped notebooks run top to bottom in a real kernel against a built and refreshed example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SPARK_MODES

from mvlog.commands.demo import examples_dir
from mvlog.config import load_config
from mvlog.project import Project

pytestmark = pytest.mark.integration

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(scope="session")
def python3_kernel() -> str:
    """The ``python3`` kernel spec, installed into this environment if it is missing."""
    from jupyter_client.kernelspec import find_kernel_specs

    if "python3" not in find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True)
    return "python3"


# The [local] run is deep: the main tier runs the notebook over Connect, and every [local]
# refresh test runs the classic session the kernel would start.
@pytest.mark.parametrize("spark_mode", [pytest.param(m, marks=pytest.mark.deep) if m == "local" else m
                                        for m in SPARK_MODES])
def test_tpch_revenue_notebook_runs(python3_kernel, db, tmp_path, monkeypatch, request, spark_mode):
    import nbformat
    from nbclient import NotebookClient

    if spark_mode == "connect":  # the kernel, and the project here, run on the engine
        monkeypatch.setenv("SPARK_REMOTE", request.getfixturevalue("connect_engine").remote)

    folder = examples_dir() / "tpch"
    db.execute((folder / "schema.sql").read_text())
    config_text = (folder / "mvlog.yaml").read_text().replace("warehouse: ./warehouse", f"warehouse: {tmp_path / 'wh'}")
    config_path = tmp_path / "mvlog.yaml"
    config_path.write_text(config_text)
    monkeypatch.setenv("MVLOG_DEMO_DSN", db.dsn)
    with Project(load_config(config_path)) as project:
        assert [r.error for r in project.apply().builds] == [None] * len(project.config.views)
        db.execute((folder / "changes.sql").read_text())
        assert [r.error for r in project.refresh()] == [None] * len(project.config.views)

    monkeypatch.setenv("MVLOG_CONFIG", str(config_path))
    monkeypatch.setenv("TZ", "UTC")
    nb = nbformat.read(NOTEBOOKS / "tpch_revenue.ipynb", as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells
               if cell.cell_type == "code"), "commit notebooks without outputs"
    # Any failing cell raises nbclient's CellExecutionError, which fails the test with the cell's traceback.
    NotebookClient(nb, timeout=600, kernel_name=python3_kernel,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [output for cell in nb.cells if cell.cell_type == "code" for output in cell.outputs]
    assert any("image/png" in output.get("data", {}) for output in outputs if output.output_type == "display_data")
    text = "\n".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    assert "FRANCE" in text
    assert "KINGDOM OF MOROCCO" in text  # the refreshed state, not the first build
    assert text.count("total revenue") >= 2  # the per-version plot ran over at least two Delta versions

"""``mvlog demo``: the whole loop on a throwaway PostgreSQL and a local warehouse."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from mvlog.commands.report import results_table
from mvlog.config import load_config
from mvlog.model import HIDDEN_PREFIX
from mvlog.postgres.capture import needs_slot
from mvlog.postgres.pgtemp import TempPostgres
from mvlog.project import Project

EXAMPLES = {
    "shop": {
        "show": "open_orders",
        "loaded": "200 customers, 2000 orders",
        "changes": "2 orders inserted, 4 status changes, 1 primary-key update, 2 deletes, 1 customer renamed",
    },
    "tpch": {
        "show": "revenue_by_nation",
        "loaded": "25 nations, 1000 customers, 10000 orders, about 40000 line items",
        "changes": "a new order with 3 lines, 3 orders closed, a customer moved, a nation renamed, "
                   "an order deleted, a line-item key update, lines returned",
    },
}


def examples_dir() -> Path:
    """The shipped examples (packaged, or the repository's ``examples/``)."""
    packaged = Path(__file__).resolve().parents[1] / "examples"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[3] / "examples"


def _show(console: Console, project: Project, view: str, title: str) -> None:
    spark = project.warehouse.spark
    df = spark.read.format("delta").load(project.config.view_location(view))
    visible = [c for c in df.columns if not c.startswith(HIDDEN_PREFIX)]
    rows = df.select(*visible).orderBy(visible[0]).limit(8).collect()
    table = Table(title=f"{title}: {view} ({df.count()} rows, first 8)", title_justify="left", show_edge=False)
    for column in visible:
        table.add_column(column)
    for row in rows:
        table.add_row(*["NULL" if v is None else str(v) for v in row])
    console.print(table)


def run_demo(keep: bool = False, warehouse: str | None = None, console: Console | None = None,
             example: str = "shop", capture: str = "trigger") -> None:
    """Start PostgreSQL, load an example, apply, change data, fast-refresh, show before and after
    (``capture="logical"``: the logs filled by logical decoding instead of triggers)."""
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    shop = examples_dir() / example
    facts = EXAMPLES[example]
    workdir = Path(tempfile.mkdtemp(prefix="mvlog-demo-"))
    console.print("[bold]1. Starting a throwaway PostgreSQL[/bold]")
    pg = TempPostgres().start()
    try:
        pg.run_script((shop / "schema.sql").read_text())
        console.print(f"   PostgreSQL on 127.0.0.1:{pg.port}, {example} data loaded ({facts['loaded']})")
        config_text = (shop / "mvlog.yaml").read_text()
        if warehouse:
            config_text = config_text.replace("warehouse: ./warehouse", f"warehouse: {Path(warehouse).resolve()}")
        if needs_slot([capture]):
            doc = yaml.safe_load(config_text)
            config_text = yaml.safe_dump({**doc, "source": {**doc["source"], "capture": capture}}, sort_keys=False)
        (workdir / "mvlog.yaml").write_text(config_text)
        os.environ["MVLOG_DEMO_DSN"] = pg.dsn()
        config = load_config(workdir / "mvlog.yaml")
        with Project(config, progress=lambda m: console.print(f"   [dim]… {m}[/dim]")) as project:
            console.print("[bold]2. mvlog apply[/bold]: logs, "
                          + ("a replication slot" if needs_slot([capture]) else "triggers")
                          + " and a complete build of every view")
            report = project.apply()
            console.print(results_table(report.builds))
            _show(console, project, facts["show"], "before")
            console.print(f"[bold]3. Changing the data[/bold] (examples/{example}/changes.sql)")
            pg.run_script((shop / "changes.sql").read_text())
            console.print(f"   {facts['changes']}")
            console.print("[bold]4. mvlog refresh[/bold]: fast refresh from the logs")
            results = project.refresh(raise_on_error=True)
            console.print(results_table(results))
            _show(console, project, facts["show"], "after")
            console.print("[bold]5. mvlog status[/bold]")
            for view in project.status()["views"]:
                console.print(f"   {view['name']}: {view['staleness']}, {view['rows']} rows, "
                              f"last {view['last_method']}")
            console.print(f"\nConfiguration: {workdir / 'mvlog.yaml'}; warehouse: {config.warehouse_uri}")
            if keep:  # the kept configuration names the kept cluster itself (a file of the demo's own, not output)
                (workdir / "mvlog.yaml").write_text(config_text.replace("${MVLOG_DEMO_DSN}", pg.dsn()))
                console.print(f"[bold]6. The dashboard[/bold]: mvlog -c {workdir / 'mvlog.yaml'} ui   "
                              "(then open http://127.0.0.1:8765/)")
            else:
                console.print("[bold]6. The dashboard[/bold]: run mvlog demo --keep, then the "
                              "'mvlog -c …/mvlog.yaml ui' it prints (then open http://127.0.0.1:8765/)")
    finally:
        os.environ.pop("MVLOG_DEMO_DSN", None)
        if keep:
            console.print(f"Kept: PostgreSQL at {pg.dsn(password='***')} (data in {pg.root}), stop it with pg_ctl")
        else:
            pg.stop()
            shutil.rmtree(workdir, ignore_errors=True)

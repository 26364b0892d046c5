"""``mvlog drop``, ``purge`` and ``optimize``: the upkeep of views, logs and their files."""

from __future__ import annotations

import click

from mvlog.commands.context import project_of
from mvlog.commands.output import out


@click.command()
@click.argument("views", nargs=-1)
@click.option("--log", "log_table", metavar="TABLE", help="Drop the materialized view log of TABLE instead.")
@click.option("--cascade", is_flag=True, help="With --log: also drop the views that depend on the log.")
@click.option("--delete-data", is_flag=True, help="Also delete the views' Delta tables.")
@click.pass_context
def drop(ctx: click.Context, views: tuple[str, ...], log_table: str | None, cascade: bool, delete_data: bool) -> None:
    """Drop VIEWS (unregister, drop key maps), or a log with --log TABLE (triggers and log table).

    Remove them from mvlog.yaml too, or the next 'mvlog apply' creates them again.
    """
    project = project_of(ctx)
    if bool(views) == bool(log_table):
        raise click.UsageError("give view names, or --log TABLE")
    lines = project.drop_log(log_table, cascade) if log_table else project.drop_views(list(views), delete_data)
    for line in lines:
        out.print(line, markup=False)


@click.command()
@click.pass_context
def purge(ctx: click.Context) -> None:
    """Delete log rows that every dependent view has consumed."""
    for table, deleted in project_of(ctx).purge().items():
        out.print(f"{table}: {deleted} log rows purged")


@click.command()
@click.argument("views", nargs=-1)
@click.option("--vacuum", is_flag=True,
              help="Also delete data files older than the tables' retention (Delta default 7 days).")
@click.pass_context
def optimize(ctx: click.Context, views: tuple[str, ...], vacuum: bool) -> None:
    """Compact the small Delta files that fast refreshes leave (default: every view)."""
    for view, what in project_of(ctx).optimize(list(views) or None, vacuum):
        out.print(f"{view}: {what}", markup=False)

"""``mvlog engine start|stop|status``: the local Spark Connect server other commands reuse."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mvlog.commands.output import err, print_engine

if TYPE_CHECKING:
    from mvlog.config import SparkConfig


@click.group()
def engine() -> None:
    """A local Spark Connect server that mvlog commands reuse (spark.remote / $SPARK_REMOTE)."""


def _engine_spark_config(ctx: click.Context) -> SparkConfig:
    """The ``spark:`` section of the configuration if there is one (master, settings, and what its
    warehouse and catalog need), else defaults."""
    from mvlog.config import SparkConfig, load_config, resolve_path
    from mvlog.spark.settings import for_project

    path = ctx.find_root().obj.config  # the cli's State: -c, or $MVLOG_CONFIG
    if path is None and not resolve_path(None).exists():
        return SparkConfig()
    return for_project(load_config(path))[0]


@engine.command("start")
@click.option("--host", default=None, help="Address to listen on (default: 127.0.0.1, loopback only).")
@click.option("--port", type=int, default=None, help="Port (default: spark.remote's port, else 15002).")
@click.option("--json", "as_json", is_flag=True, help="Print the engine as JSON.")
@click.pass_context
def engine_start(ctx: click.Context, host: str | None, port: int | None, as_json: bool) -> None:
    """Start the engine in the background (or report the running one) and wait until it listens."""
    from mvlog.spark import engine as engines

    config = _engine_spark_config(ctx)
    if not as_json:
        err.print("starting the Spark Connect engine (the first start downloads Delta's jars)", markup=False)
    info = engines.start(config, host, port)
    print_engine(info, as_json, "listening on")


@engine.command("stop")
@click.option("--json", "as_json", is_flag=True, help="Print what was stopped as JSON.")
def engine_stop(as_json: bool) -> None:
    """Stop the running engine."""
    from mvlog.spark import engine as engines

    print_engine(engines.stop(), as_json, "stopped, was", flag="stopped")


@engine.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def engine_status(ctx: click.Context, as_json: bool) -> None:
    """Where the engine listens and since when; exit code 3 if none is running."""
    from mvlog.spark import engine as engines

    info = engines.status()
    print_engine(info, as_json, "running at")
    if info is None:
        ctx.exit(3)

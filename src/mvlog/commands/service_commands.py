"""``mvlog schedule`` and ``mvlog ui``: the commands that serve until stopped."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

import click

from mvlog.commands.context import project_of, state_of


@click.command()
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve Prometheus metrics on this port (/metrics).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address the metrics are served on (0.0.0.0: every interface).")
@click.option("--ui", "with_ui", is_flag=True, help="Serve the dashboard (mvlog ui) from this process too.")
@click.option("--ui-port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="Port of the dashboard.")
@click.option("--ui-host", default="127.0.0.1", show_default=True,
              help="Address the dashboard is served on (0.0.0.0: every interface).")
@click.pass_context
def schedule(ctx: click.Context, metrics_port: int | None, metrics_host: str, with_ui: bool, ui_port: int,
             ui_host: str) -> None:
    """Refresh each view or group on its cron schedule and within its freshness target, with one warm
    SparkSession, until SIGTERM/SIGINT."""
    from mvlog.commands.native_stderr import routed_native_stderr
    from mvlog.commands.schedule import Scheduler

    state = state_of(ctx)

    def log(line: str) -> None:
        click.echo(f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} {state.redact(line)}", err=False)
        sys.stdout.flush()

    metrics = None
    if metrics_port is not None:
        from mvlog.ops.metrics import SchedulerMetrics

        metrics = SchedulerMetrics()
        metrics.serve(metrics_port, metrics_host)
        log(f"serving metrics on http://{metrics_host}:{metrics_port}/metrics")
    project = project_of(ctx)
    if with_ui:
        from mvlog.ui import serve

        log(f"serving the dashboard on {serve.address(serve.start(project.config, ui_host, ui_port))}")
    scheduler = Scheduler(project, log, metrics=metrics)
    scheduler.install_signal_handlers()
    with routed_native_stderr(log):  # libpq's own lines (a connection opened as the server stops), in its words
        scheduler.run()


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on (0.0.0.0: every interface; the pages show no secret, but all else).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to serve on.")
@click.pass_context
def ui(ctx: click.Context, host: str, port: int) -> None:
    """Serve a read-only dashboard of the project: the graph of logs and views, each view's
    freshness, history and why, each table's log and capture (no Spark), until Ctrl-C."""
    from mvlog.config import load_config
    from mvlog.ui import serve

    server = serve.start(load_config(state_of(ctx).config), host, port)
    click.echo(f"mvlog ui: serving {serve.address(server)} (Ctrl-C stops)")
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()

"""The ``mvlog`` command line: thin calls into :class:`mvlog.project.Project`.

What the commands print is :mod:`mvlog.cli_output`'s. One handler turns every error into
``Error: <one sentence>`` on stderr and an exit code: 0 success, 1 a refresh (or another
runtime step) failed, 2 bad usage or config.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from mvlog.cli_engine import engine
from mvlog.cli_output import (
    emit_json,
    err,
    out,
    print_apply_report,
    print_explain,
    print_history,
    print_results,
    print_status,
    reporter_for,
)
from mvlog.errors import MvlogError, redact

if TYPE_CHECKING:
    from mvlog.project import Project

# How long `mvlog refresh` waits for a view another process is refreshing before it skips it:
# an overlapping cron or Airflow run usually finishes within it, and this run then takes the rest.
DEFAULT_WAIT = 60.0


@dataclass
class State:
    """What one invocation carries from the options to the commands and back to :func:`main`."""

    config: str | None = None
    debug: bool = False
    quiet: bool = False
    project: Any = None

    @property
    def secrets(self) -> list[str]:
        """The loaded configuration's secrets (none before it is loaded)."""
        return self.project.secrets if self.project is not None else []

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)


def _state(ctx: click.Context) -> State:
    return ctx.ensure_object(State)


def _project(ctx: click.Context) -> Project:
    state = _state(ctx)
    if state.project is None:
        from mvlog.config import load_config
        from mvlog.project import Project

        config = load_config(state.config)
        state.project = ctx.with_resource(Project(config, reporter=reporter_for(err, state.quiet)))
    return state.project


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config", metavar="FILE", envvar="MVLOG_CONFIG",
              help="Configuration file (default: ./mvlog.yaml, or $MVLOG_CONFIG).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
@click.version_option(package_name="mvlog")
@click.pass_context
def cli(ctx: click.Context, config: str | None, debug: bool, quiet: bool) -> None:
    """mvlog: materialized view logs on PostgreSQL, fast-refreshed Delta Lake views."""
    state = _state(ctx)
    state.config, state.debug, state.quiet = config, debug, quiet


@cli.command()
@click.pass_context
def apply(ctx: click.Context) -> None:
    """Install the mvlog schema, create logs and triggers, register and build views (idempotent)."""
    report = _project(ctx).apply()
    print_apply_report(report, _state(ctx).secrets)
    if any(r.error for r in report.builds):
        ctx.exit(1)


@cli.command()
@click.argument("views", nargs=-1)
@click.option("--complete", is_flag=True, help="Recompute the views completely.")
@click.option("--group", metavar="G", help="Refresh the views of refresh group G from one snapshot.")
@click.option("--concurrency", type=click.IntRange(1, 64), metavar="N",
              help="Refresh up to N views (or groups) at once (default: the configuration's concurrency, 4).")
@click.option("--wait", type=click.FloatRange(0), default=DEFAULT_WAIT, show_default=True, metavar="SECONDS",
              help="Wait this long for a view another process is refreshing; then skip it (not a failure).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def refresh(ctx: click.Context, views: tuple[str, ...], complete: bool, group: str | None, concurrency: int | None,
            wait: float, as_json: bool) -> None:
    """Refresh VIEWS (default: all views). Exit 0 when every view was refreshed or is being
    refreshed by another process (skipped), 1 when one failed."""
    results = _project(ctx).refresh(list(views) or None, complete=complete, group=group, concurrency=concurrency,
                                    wait=wait)
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        print_results(results, _state(ctx).secrets)
    failed = [r for r in results if r.error]
    if failed:
        state = _state(ctx)
        if state.debug:
            for result in failed:
                err.print(state.redact(result.detail or ""), markup=False, highlight=False)
        error = state.redact(failed[0].error or "")
        err.print(f"Error: refresh of view {failed[0].view} failed: {error}", markup=False)
        ctx.exit(1)


@cli.command()
@click.option("--once", is_flag=True, help="One pass: write what has committed, then exit.")
@click.option("--interval", type=click.FloatRange(0.05), default=1.0, show_default=True, metavar="SECONDS",
              help="Pause between tries while another process captures (and between passes that found "
                   "nothing, where PostgreSQL refuses a replication connection).")
@click.option("--batch-rows", type=click.IntRange(1), default=100_000, show_default=True, metavar="N",
              help="Commit the log rows a pass writes every N rows.")
@click.pass_context
def capture(ctx: click.Context, once: bool, interval: float, batch_rows: int) -> None:
    """Run the logical capture (capture: logical): stream the database's replication slot into the
    logs until Ctrl-C, each change decoded once. A refresh captures what it needs itself when no
    capture runs, and waits for this one when it does; this keeps the slot's backlog, and each
    refresh's wait, small. One process captures at a time; others wait their turn."""
    import signal
    import threading

    from mvlog.postgres.capture.batch import Pass
    from mvlog.schedule import capture_until

    def written(done: Pass) -> None:
        out.print(f"captured {done.rows} log rows up to {done.position} in {done.seconds:.2f} s", markup=False)

    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        if once:
            for done in _project(ctx).capture(once=True, batch_rows=batch_rows):
                written(done)
        else:  # long-running: it outlives PostgreSQL's restarts, saying so
            capture_until(_project(ctx), lambda line: out.print(line, markup=False), stopping, interval,
                          batch_rows, written)
    except KeyboardInterrupt:
        out.print("capture stopped", markup=False)
    finally:
        signal.signal(signal.SIGTERM, previous)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per view: staleness, pending changes, last refresh, rows. Per log: size and oldest change."""
    data = _project(ctx).status()
    if as_json:
        emit_json(data)
    else:
        print_status(data)


@cli.command()
@click.argument("view")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--complete", is_flag=True, help="Plan a complete refresh.")
@click.pass_context
def plan(ctx: click.Context, view: str, as_json: bool, complete: bool) -> None:
    """Show how the next refresh of VIEW would run, without running it."""
    p = _project(ctx).plan(view, complete=complete)
    if as_json:
        emit_json(p.to_json())
    else:
        out.print(p.describe(), markup=False)


@cli.command()
@click.argument("view")
@click.option("--json", "as_json", is_flag=True, help="Print the capabilities as JSON.")
@click.pass_context
def explain(ctx: click.Context, view: str, as_json: bool) -> None:
    """Which refresh capabilities VIEW has, and why not (like Oracle's EXPLAIN_MVIEW)."""
    result = _project(ctx).explain(view)
    if as_json:
        emit_json(result.to_json())
    else:
        print_explain(result)


@cli.command()
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve Prometheus metrics on this port (/metrics).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address the metrics are served on (0.0.0.0: every interface).")
@click.pass_context
def schedule(ctx: click.Context, metrics_port: int | None, metrics_host: str) -> None:
    """Refresh each view or group on its cron schedule and within its freshness target, with one warm
    SparkSession, until SIGTERM/SIGINT."""
    from mvlog.schedule import Scheduler

    state = _state(ctx)

    def log(line: str) -> None:
        click.echo(f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} {state.redact(line)}", err=False)
        sys.stdout.flush()

    metrics = None
    if metrics_port is not None:
        from mvlog.ops.metrics import SchedulerMetrics

        metrics = SchedulerMetrics()
        metrics.serve(metrics_port, metrics_host)
        log(f"serving metrics on http://{metrics_host}:{metrics_port}/metrics")
    scheduler = Scheduler(_project(ctx), log, metrics=metrics)
    scheduler.install_signal_handlers()
    scheduler.run()


@cli.command()
@click.argument("views", nargs=-1)
@click.option("--sample", type=click.IntRange(1), default=1000, show_default=True, metavar="N",
              help="Compare every row of random key ranges holding about N rows.")
@click.option("--full", is_flag=True,
              help="Compare every row (by per-bucket fingerprint sums, then the differing buckets).")
@click.option("--refresh", "refresh_first", is_flag=True, help="Refresh the views first.")
@click.option("--repair", is_flag=True, help="Re-merge mismatched keys from PostgreSQL (recorded in the history).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def verify(ctx: click.Context, views: tuple[str, ...], sample: int, full: bool, refresh_first: bool, repair: bool,
           as_json: bool) -> None:
    """Compare VIEWS (default: all) with their queries in PostgreSQL, at the source snapshot of each
    view's last refresh. Exit 0 when every view matches (or was repaired), 1 on a mismatch or failure."""
    from mvlog.render import verify_table

    results = _project(ctx).verify(list(views) or None, None if full else sample, repair, refresh_first)
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        out.print(verify_table(results, _state(ctx).secrets))
    bad = [r for r in results if r.status in ("mismatch", "failed")]
    if bad:
        what = (f"view {bad[0].view} differs from its query in {bad[0].mismatched} keys" if bad[0].status == "mismatch"
                else f"verify of view {bad[0].view} failed: {_state(ctx).redact(bad[0].reason or '')}")
        err.print(f"Error: {what}", markup=False)
        ctx.exit(1)


@cli.command()
@click.argument("view")
@click.option("--limit", default=20, show_default=True, help="How many refreshes to show.")
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON.")
@click.pass_context
def history(ctx: click.Context, view: str, limit: int, as_json: bool) -> None:
    """Recent refreshes of VIEW: when, how, why, what changed, errors."""
    rows = [row.to_json() for row in _project(ctx).history(view, limit)]
    if as_json:
        emit_json(rows)
    else:
        print_history(rows, _state(ctx).redact)


@cli.command()
@click.argument("views", nargs=-1)
@click.option("--log", "log_table", metavar="TABLE", help="Drop the materialized view log of TABLE instead.")
@click.option("--cascade", is_flag=True, help="With --log: also drop the views that depend on the log.")
@click.option("--delete-data", is_flag=True, help="Also delete the views' Delta tables.")
@click.pass_context
def drop(ctx: click.Context, views: tuple[str, ...], log_table: str | None, cascade: bool, delete_data: bool) -> None:
    """Drop VIEWS (unregister, drop key maps), or a log with --log TABLE (triggers and log table).

    Remove them from mvlog.yaml too, or the next 'mvlog apply' creates them again.
    """
    project = _project(ctx)
    if bool(views) == bool(log_table):
        raise click.UsageError("give view names, or --log TABLE")
    lines = project.drop_log(log_table, cascade) if log_table else project.drop_views(list(views), delete_data)
    for line in lines:
        out.print(line, markup=False)


@cli.command()
@click.pass_context
def purge(ctx: click.Context) -> None:
    """Delete log rows that every dependent view has consumed."""
    for table, deleted in _project(ctx).purge().items():
        out.print(f"{table}: {deleted} log rows purged")


@cli.command()
@click.argument("views", nargs=-1)
@click.option("--vacuum", is_flag=True,
              help="Also delete data files older than the tables' retention (Delta default 7 days).")
@click.pass_context
def optimize(ctx: click.Context, views: tuple[str, ...], vacuum: bool) -> None:
    """Compact the small Delta files that fast refreshes leave (default: every view)."""
    for view, what in _project(ctx).optimize(list(views) or None, vacuum):
        out.print(f"{view}: {what}", markup=False)


cli.add_command(engine)


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the PostgreSQL cluster and warehouse afterwards (prints where).")
@click.option("--warehouse", metavar="DIR", help="Warehouse directory (default: a temporary directory).")
@click.option("--example", type=click.Choice(["shop", "tpch"]), default="shop", show_default=True,
              help="shop: simple views; tpch: join and aggregate views.")
@click.option("--capture", type=click.Choice(["trigger", "logical"]), default="trigger", show_default=True,
              help="How the logs are filled: triggers, or logical decoding of the WAL.")
def demo(keep: bool, warehouse: str | None, example: str, capture: str) -> None:
    """The whole loop on a throwaway PostgreSQL and a local warehouse."""
    from mvlog.demo import run_demo

    run_demo(keep=keep, warehouse=warehouse, console=out, example=example, capture=capture)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and map errors to one line and an exit code."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    state = State(debug=debug)  # filled in by the command; its secrets are redacted from every error
    redact = state.redact
    try:
        # Without standalone mode click returns ctx.exit()'s code instead of raising it.
        result = cli.main(args=argv, prog_name="mvlog", standalone_mode=False, obj=state)
        return result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        err.print("Error: aborted", markup=False)
        return 130
    except click.ClickException as exc:
        err.print(f"Error: {redact(exc.format_message())}", markup=False)
        return 2
    except MvlogError as exc:
        if debug:
            traceback.print_exc()
        err.print(f"Error: {redact(str(exc))}", markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("Error: interrupted", markup=False)
        return 130
    except Exception as exc:  # a bug: still one line, unless --debug
        if debug:
            traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        err.print(f"Error: internal error ({exc.__class__.__name__}): {redact(first)} (run with --debug for details)",
                  markup=False)
        return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()

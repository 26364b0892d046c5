"""The ``mvlog`` command line: thin calls into :class:`mvlog.project.Project`.

What the commands print is :mod:`mvlog.commands.output`'s. One handler turns every error into
``Error: <one sentence>`` on stderr and an exit code: 0 success, 1 a refresh (or another
runtime step) failed, 2 bad usage or config.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from mvlog.commands.context import State, project_of, state_of
from mvlog.commands.engine_commands import engine
from mvlog.commands.output import (
    emit_json,
    err,
    out,
    print_apply_report,
    print_explain,
    print_history,
    print_results,
    print_status,
)
from mvlog.commands.service_commands import schedule, ui
from mvlog.commands.upkeep_commands import drop, optimize, purge
from mvlog.config import CAPTURE_KINDS
from mvlog.errors import MvlogError

# How long `mvlog refresh` waits for a view another process is refreshing before it skips it:
# an overlapping cron or Airflow run usually finishes within it, and this run then takes the rest.
DEFAULT_WAIT = 60.0


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config", metavar="FILE", envvar="MVLOG_CONFIG",
              help="Configuration file (default: ./mvlog.yaml, or $MVLOG_CONFIG).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
@click.version_option(package_name="mvlog")
@click.pass_context
def cli(ctx: click.Context, config: str | None, debug: bool, quiet: bool) -> None:
    """mvlog: materialized view logs on PostgreSQL, fast-refreshed Delta Lake views."""
    state = state_of(ctx)
    state.config, state.debug, state.quiet = config, debug, quiet


@cli.command()
@click.pass_context
def apply(ctx: click.Context) -> None:
    """Install the mvlog schema, create logs and triggers, register and build views (idempotent)."""
    report = project_of(ctx).apply()
    print_apply_report(report, state_of(ctx).secrets)
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
    results = project_of(ctx).refresh(list(views) or None, complete=complete, group=group, concurrency=concurrency,
                                    wait=wait)
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        print_results(results, state_of(ctx).secrets)
    failed = [r for r in results if r.error]
    if failed:
        state = state_of(ctx)
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

    from mvlog.commands.native_stderr import routed_native_stderr
    from mvlog.commands.schedule import capture_until
    from mvlog.commands.stopping import beside_signals, stop_within
    from mvlog.postgres.capture.batch import Pass

    def written(done: Pass) -> None:
        out.print(f"captured {done.rows} log rows up to {done.position} in {done.seconds:.2f} s", markup=False)

    project = project_of(ctx)
    stopping, stopped = threading.Event(), threading.Event()

    def say(line: str) -> None:
        out.print(line, markup=False)

    def request_stop(*_: object) -> None:
        if not stopping.is_set():  # a stream stalled in a call is given up after a grace period
            threading.Thread(target=stop_within, args=(stopped, project.give_up, say), daemon=True).start()
        stopping.set()

    previous = signal.signal(signal.SIGTERM, request_stop)
    try:
        if once:
            for done in project.capture(once=True, batch_rows=batch_rows):
                written(done)
        else:  # long-running: it outlives PostgreSQL's restarts and stalls, saying so
            with routed_native_stderr(say):
                beside_signals(lambda: capture_until(project, say, stopping, interval, batch_rows, written), stopped)
    except KeyboardInterrupt:
        stopping.set()
        out.print("capture stopped", markup=False)
    finally:
        stopped.set()
        signal.signal(signal.SIGTERM, previous)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per view: staleness, pending changes, last refresh, rows. Per log: size and oldest change."""
    data = project_of(ctx).status()
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
    p = project_of(ctx).plan(view, complete=complete)
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
    result = project_of(ctx).explain(view)
    if as_json:
        emit_json(result.to_json())
    else:
        print_explain(result)


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
    from mvlog.commands.report import verify_table

    results = project_of(ctx).verify(list(views) or None, None if full else sample, repair, refresh_first)
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        out.print(verify_table(results, state_of(ctx).secrets))
    bad = [r for r in results if r.status in ("mismatch", "failed")]
    if bad:
        what = (f"view {bad[0].view} differs from its query in {bad[0].mismatched} keys" if bad[0].status == "mismatch"
                else f"verify of view {bad[0].view} failed: {state_of(ctx).redact(bad[0].reason or '')}")
        err.print(f"Error: {what}", markup=False)
        ctx.exit(1)


@cli.command()
@click.argument("view")
@click.option("--limit", default=20, show_default=True, help="How many refreshes to show.")
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON.")
@click.pass_context
def history(ctx: click.Context, view: str, limit: int, as_json: bool) -> None:
    """Recent refreshes of VIEW: when, how, why, what changed, errors."""
    rows = [row.to_json() for row in project_of(ctx).history(view, limit)]
    if as_json:
        emit_json(rows)
    else:
        print_history(rows, state_of(ctx).redact)


for command in (engine, drop, purge, optimize, schedule, ui):
    cli.add_command(command)


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the PostgreSQL cluster and warehouse afterwards (prints where).")
@click.option("--warehouse", metavar="DIR", help="Warehouse directory (default: a temporary directory).")
@click.option("--example", type=click.Choice(["shop", "tpch"]), default="shop", show_default=True,
              help="shop: simple views; tpch: join and aggregate views.")
@click.option("--capture", type=click.Choice(list(CAPTURE_KINDS)), default="trigger", show_default=True,
              help="How the logs are filled: triggers, or logical decoding of the WAL.")
def demo(keep: bool, warehouse: str | None, example: str, capture: str) -> None:
    """The whole loop on a throwaway PostgreSQL and a local warehouse."""
    from mvlog.commands.demo import run_demo

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
    """The ``mvlog`` process: ``main`` with what the process inherited that is not its own taken out.

    pyspark marks a process that opened a Spark Connect session by setting ``SPARK_CONNECT_MODE_ENABLED``
    in its environment, so a process started from it (``!mvlog refresh`` in a notebook that called
    :func:`mvlog.commands.notebook.session`, a scheduler's script that used Spark Connect) inherits the mark
    without the session. Then its own Spark on ``spark.master`` cannot start (pyspark asks for a
    Connect URL), and on an engine each pyspark call captures its Python call site, the first one
    importing IPython where it is installed (a fast read 0.20 -> 0.65 s, BENCHMARKS.md session 53).
    mvlog opens its Connect sessions without the mark, as it does when started from a shell.

    psycopg2's own print of a COPY the server cut (:mod:`mvlog.commands.native_stderr`) is left out
    of the process's stderr: mvlog reports the error itself."""
    from mvlog.commands.native_stderr import without_psycopg2_prints

    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    sys.excepthook = without_psycopg2_prints(sys.excepthook)
    sys.exit(main())


if __name__ == "__main__":
    entry()

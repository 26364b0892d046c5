"""What the ``mvlog`` commands print: the two consoles, progress (bars or lines), the reports of
``apply`` and ``refresh``, the tables of ``status``, ``explain`` and ``history``, the engine's line,
and ``--json`` output.

:mod:`mvlog.commands.cli` parses the options, calls the project and decides the exit code; this module
turns what the project returns into text. :mod:`mvlog.commands.report` is imported only when a table is
printed, so that ``mvlog --help`` loads none of the refresh machinery it imports.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from mvlog.progress import Reporter

if TYPE_CHECKING:
    from mvlog.pipeline.results import RefreshResult
    from mvlog.project import ApplyReport
    from mvlog.spark.engine import EngineInfo
    from mvlog.sql.explain import Explanation

# Not a terminal (a pipe, a log file): wide enough that tables are not squeezed.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON with sorted keys (``--json``)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_results(results: list[RefreshResult], secrets: list[str]) -> None:
    """The table of refresh results, if there are any."""
    from mvlog.commands.report import results_table

    if results:
        out.print(results_table(results, secrets))


def print_apply_report(report: ApplyReport, secrets: list[str]) -> None:
    """What ``mvlog apply`` did: logs, views registered, builds, catalog tables, change feeds."""
    for table in report.logs_created:
        out.print(f"log created on {table}")
    for table in report.logs_unchanged:
        out.print(f"log on {table} is up to date")
    for note in report.logs_skipped:
        out.print(f"not logged: {note}")
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")
    for name in report.views_registered:
        out.print(f"view {name} registered")
    for name in report.views_unregistered:
        out.print(f"view {name} is no longer in the configuration: unregistered (its Delta table is kept)")
    print_results(report.builds, secrets)
    for table in report.tables_registered:
        out.print(f"catalog table {table} registered")
    for name, changed in report.features.items():
        out.print(f"view {name}: {', '.join(changed)}")


def print_status(data: dict) -> None:
    """The ``views`` and ``logs`` tables of ``mvlog status``."""
    from mvlog.commands.report import duration_text, freshness_text

    views = Table(title="views", show_edge=False, title_justify="left")
    for column in ("view", "class", "refresh", "staleness", "lag", "freshness (last day)", "pending", "rows",
                   "last refresh", "location"):
        views.add_column(column)
    for v in data["views"]:
        color = {"fresh": "green", "stale": "yellow"}.get(v["staleness"], "red")
        reads = f" (reads {', '.join(v['upstreams'])})" if v.get("upstreams") else ""
        views.add_row(v["name"] + reads, v["class"], v["refresh"], f"[{color}]{v['staleness']}[/{color}]",
                      duration_text(v["lag_seconds"]), freshness_text(v),
                      str(v["pending_log_rows"]), "" if v["rows"] is None else str(v["rows"]),
                      f"{v['last_refresh'] or 'never'} ({v['last_method'] or '-'})", v["location"])
    out.print(views)
    logs = Table(title="logs", show_edge=False, title_justify="left")
    for column in ("table", "log", "capture", "rows", "bytes", "oldest unconsumed change", "pinned by", "covers"):
        logs.add_column(column)
    for log in data["logs"]:
        covers = f"{len(log['partitions'])} partitions" if log["partitions"] else "the table"
        logs.add_row(log["table"], log["log"], log["capture"], str(log["rows"]), str(log["bytes"]),
                     log["oldest_unconsumed_change"] or "-", ", ".join(log["pinned_by"]) or "-",
                     covers + (f"; NOT {log['not_covered']}" if log["not_covered"] else ""))
    out.print(logs)
    if data.get("captures"):
        slots = Table(title="logical capture", show_edge=False, title_justify="left")
        for column in ("slot", "state", "retained WAL", "lag", "written up to", "keys written"):
            slots.add_column(column)
        for slot in data["captures"]:
            state = slot["wal_status"] + (", capturing" if slot["active"] else "")
            color = "red" if slot["wal_status"] in ("lost", "unreserved") else "green"
            lag = (f"{slot['lag_bytes']} bytes" + (f", {slot['lag_seconds']:.1f} s" if slot["lag_seconds"] else ""))
            slots.add_row(slot["slot"], f"[{color}]{state}[/{color}]", f"{slot['retained_bytes']} bytes", lag,
                          slot["written_lsn"], str(slot["keys_written"]))
        out.print(slots)


def print_explain(result: Explanation) -> None:
    """A view's class, key and tables, then its capabilities table (possible or not, and why)."""
    out.print(f"view {result.view}: {result.view_class}, refresh {result.refresh}, "
              f"key {', '.join(result.key) or '-'}, tables {', '.join(result.base_tables)}"
              + (f" (through PostgreSQL views {', '.join(result.pg_views)}, expanded)" if result.pg_views else ""),
              markup=False)
    if result.upstreams or result.dependents:
        out.print(f"reads views {', '.join(result.upstreams) or '-'} (expanded to their queries, refreshed first "
                  f"from the same snapshot); read by views {', '.join(result.dependents) or '-'}", markup=False)
    table = Table(show_edge=False)
    for column in ("capability", "possible", "reason"):
        table.add_column(column, no_wrap=column != "reason")
    for cap in result.capabilities:
        table.add_row(cap.name, "[green]Y[/green]" if cap.possible else "[red]N[/red]", cap.reason)
    out.print(table)
    out.print("Delta table features: " + ("; ".join(result.table_features) if result.table_features else
                                          "none that a reader may lack (Spark, deltalake, polars and DuckDB read it)"),
              markup=False)
    if result.readers:
        which = "its Delta table as it is" if result.readers_of == "table" else "its table as mvlog would write it"
        verdicts = "; ".join(f"{reader} {verdict}" for reader, verdict in result.readers.items())
        out.print(f"readers ({which}): {verdicts}", markup=False)
    if result.next_refresh:
        nxt = result.next_refresh
        write = f", write: {nxt['write']}" if nxt["write"] else ""
        read = ", read: its whole query" if nxt.get("read") == "whole" else ""
        out.print(f"next refresh: {nxt['method']} ({nxt['reason']}){write}{read}", markup=False)


def print_history(rows: list[dict], redact: Callable[[str], str]) -> None:
    """The table of a view's recent refreshes (``rows``: their JSON), errors redacted."""
    table = Table(show_edge=False)
    for column in ("started", "seconds", "status", "method", "snaptime", "version", "keys", "inserted", "updated",
                   "deleted", "reason / error"):
        table.add_column(column, no_wrap=column != "reason / error")
    for r in rows:
        table.add_row(r["started_at"], "" if r["seconds"] is None else f"{r['seconds']:.1f}", r["status"],
                      r["method"] or "-", r["snaptime"] or "",
                      *[str(r[k] if r[k] is not None else "") for k in
                        ("delta_version", "keys_read", "rows_inserted", "rows_updated", "rows_deleted")],
                      redact(r["error"]) if r["error"] else (r["reason"] or ""))
    out.print(table)


def print_engine(info: EngineInfo | None, as_json: bool, verb: str, flag: str = "running") -> None:
    """The engine (``info``; None: no engine) as one line, or as JSON with ``flag`` saying whether there is one."""
    if as_json:
        emit_json({flag: info is not None, **(info.to_json() if info else {})})
    elif info is None:
        out.print("no engine is running", markup=False)
    else:
        out.print(f"engine {verb}: {info.remote} (pid {info.pid}, master {info.master}, since {info.started_at}); "
                  f"log {info.log}", markup=False)


# -- progress: the rich implementations of mvlog.progress.Reporter ---------------------------


class LineReporter(Reporter):
    """Plain lines, for logs and pipes."""

    def __init__(self, console: Console):
        self.console = console
        self._label, self._total, self._done = "", 0, 0

    def message(self, text: str) -> None:
        self.console.print(f"… {text}", markup=False, highlight=False)

    @contextlib.contextmanager
    def task(self, label: str, total: int) -> Iterator[Reporter]:
        self._label, self._total, self._done = label, total, 0
        yield self

    def advance(self, text: str) -> None:
        self._done += 1
        self.message(f"{self._label} {self._done}/{self._total}: {text}")


class BarReporter(Reporter):
    """A rich progress bar, for terminals."""

    def __init__(self, console: Console):
        self.console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def message(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, status=text)
        else:
            self.console.print(f"[dim]… {text}[/dim]")

    @contextlib.contextmanager
    def task(self, label: str, total: int) -> Iterator[Reporter]:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("[dim]{task.fields[status]}"))
        with Progress(*columns, console=self.console, transient=True) as progress:
            self._progress = progress
            self._task = progress.add_task(label, total=total, status="")
            try:
                yield self
            finally:
                self._progress, self._task = None, None

    def advance(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, status=text)


def reporter_for(console: Console, quiet: bool) -> Reporter:
    """A bar on a terminal, lines elsewhere, nothing when quiet."""
    if quiet:
        return Reporter()
    return BarReporter(console) if console.is_terminal else LineReporter(console)

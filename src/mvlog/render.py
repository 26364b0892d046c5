"""How refresh results read: one table for people (``mvlog refresh``, ``apply``, ``demo``) and
one line for logs (``mvlog schedule``)."""

from __future__ import annotations

from typing import Iterable

from rich.markup import escape
from rich.table import Table

from mvlog.errors import redact
from mvlog.refresh import RefreshResult

NUMBERS = ("keys", "inserted", "updated", "deleted", "rows", "seconds")


def results_table(results: Iterable[RefreshResult], secrets: Iterable[str] = ()) -> Table:
    """A rich table: a row per view with its method, counts, time, and the reason or error."""
    secrets = list(secrets)
    table = Table(title=None, show_edge=False)
    for column in ("view", "method", *NUMBERS, "note"):
        table.add_column(column, no_wrap=column != "note", justify="right" if column in NUMBERS else "left")
    for r in results:
        table.add_row(r.view, r.method or "-", str(r.keys_read), str(r.rows_inserted), str(r.rows_updated),
                      str(r.rows_deleted), "" if r.row_count is None else str(r.row_count), f"{r.seconds:.1f}",
                      f"[red]failed: {escape(redact(r.error, secrets))}[/red]" if r.error
                      else f"[yellow]skipped: {escape(r.reason)}[/yellow]" if r.skipped else escape(r.reason))
    return table


def result_line(result: RefreshResult) -> str:
    """``key=value`` fields on one line, for a log file."""
    if result.error:
        return f"view={result.view} status=failed seconds={result.seconds:.1f} error={result.error!r}"
    if result.skipped:
        return f"view={result.view} status=skipped reason={result.reason!r}"
    return (f"view={result.view} status=ok method={result.method} keys={result.keys_read} "
            f"inserted={result.rows_inserted} updated={result.rows_updated} deleted={result.rows_deleted} "
            f"rows={result.row_count} seconds={result.seconds:.1f}")

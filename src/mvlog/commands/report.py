"""How refresh results read: one table for people (``mvlog refresh``, ``apply``, ``demo``) and
one line for logs (``mvlog schedule``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from mvlog.errors import redact
from mvlog.pipeline.results import RefreshResult

if TYPE_CHECKING:
    from mvlog.ops.verify import VerifyResult

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
            f"rows={result.row_count} seconds={result.seconds:.1f}"
            + "".join(f" {name}={seconds:.2f}" for name, seconds in result.phases.items()))


def verify_table(results: Iterable[VerifyResult], secrets: Iterable[str] = ()) -> Table:
    """A rich table: a row per view (status, rows compared, pending keys, Delta version), then
    a row per mismatched key shown, with the columns that differ."""
    secrets = list(secrets)
    table = Table(title=None, show_edge=False)
    for column in ("view", "status", "compared", "pending", "mismatched", "version", "seconds", "note"):
        table.add_column(column, no_wrap=column != "note",
                         justify="right" if column in ("compared", "pending", "mismatched", "version", "seconds")
                         else "left")
    for r in results:
        colour = {"ok": "green", "repaired": "yellow", "pending": "yellow"}.get(r.status, "red")
        note = escape(redact(r.reason or "", secrets)) or (f"{r.mode}; repaired {r.repaired} keys" if r.repaired
                                                            else r.mode)
        table.add_row(r.view, f"[{colour}]{r.status}[/{colour}]", str(r.rows_compared), str(r.pending_keys),
                      str(r.mismatched), "" if r.delta_version is None else str(r.delta_version), f"{r.seconds:.1f}",
                      note)
        for m in r.mismatches:
            key = ", ".join(f"{k}={v}" for k, v in m.key.items())
            if m.delta is None or m.source is None:
                what = "missing from Delta" if m.delta is None else "not in the query's result"
            else:
                what = "; ".join(f"{c}: Delta {m.delta[c]!r}, PostgreSQL {m.source[c]!r}"
                                 for c in m.source if m.delta.get(c) != m.source[c])
            table.add_row("", "", "", "", "", "", "", escape(f"{key}: {what}"))
    return table


def duration_text(seconds: float | None) -> str:
    """``45s``, ``12m05s``, ``3h20m``, ``2d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def freshness_text(view: dict) -> str:
    """A status row's freshness target, and whether the last day missed it."""
    target = view.get("freshness_seconds")
    if target is None:
        return "-"
    if view.get("freshness_missed_last_day"):
        return f"{duration_text(target)} [red](missed: {duration_text(view['max_lag_last_day_seconds'])})[/red]"
    return f"{duration_text(target)} [green](met)[/green]"

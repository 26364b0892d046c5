"""Progress reporting: a bar on a terminal, plain numbered lines elsewhere (no database, no Spark)."""

from __future__ import annotations

import io

from rich.console import Console

from mvlog.commands.output import BarReporter, LineReporter, reporter_for
from mvlog.progress import Reporter


def test_plain_lines_when_not_a_terminal():
    buffer = io.StringIO()
    reporter = reporter_for(Console(file=buffer, force_terminal=False, width=200), quiet=False)
    assert isinstance(reporter, LineReporter)
    reporter.message("starting Spark")
    with reporter.task("building", 2):
        reporter.advance("v1 (complete)")
        reporter.advance("v2 (complete)")
    assert buffer.getvalue().splitlines() == [
        "… starting Spark", "… building 1/2: v1 (complete)", "… building 2/2: v2 (complete)"]


def test_a_bar_on_a_terminal():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    reporter = reporter_for(console, quiet=False)
    assert isinstance(reporter, BarReporter)
    with reporter.task("refreshing", 3):
        reporter.advance("a (fast)")
        console.print("")  # let the live display render once
        reporter.advance("b (fast)")
    output = buffer.getvalue()
    assert "refreshing" in output and "━" in output and "/3" in output


def test_quiet_is_silent():
    assert type(reporter_for(Console(file=io.StringIO()), quiet=True)) is Reporter

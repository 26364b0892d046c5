"""Progress of long work (apply builds, refreshes, purges): a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class Reporter:
    """Silent reporter; the base of the others. ``task`` wraps work of ``total`` steps."""

    def message(self, text: str) -> None:
        pass

    @contextlib.contextmanager
    def task(self, label: str, total: int) -> Iterator[Reporter]:
        yield self

    def advance(self, text: str) -> None:
        """One step of the current task is done; ``text`` says which."""


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
        self._task = None

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

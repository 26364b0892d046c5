"""Progress of long work (apply builds, refreshes, purges): the interface the pipeline reports to.

:class:`Reporter` is silent; the commands hand the project one that prints (a rich bar on a
terminal, plain lines elsewhere: :mod:`mvlog.commands.output`). No console library is loaded here,
so the pipeline below the commands stays free of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class Reporter:
    """The interface, and the silent reporter: ``message`` says what is happening, ``task``
    wraps work of ``total`` steps and ``advance`` marks one done. Implementations override all three."""

    def message(self, text: str) -> None:
        pass

    @contextlib.contextmanager
    def task(self, label: str, total: int) -> Iterator[Reporter]:
        yield self

    def advance(self, text: str) -> None:
        """One step of the current task is done; ``text`` says which."""

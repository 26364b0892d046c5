"""What one ``mvlog`` invocation carries from its options to its commands: the options, and the
one :class:`~mvlog.project.Project` the commands share (made on first use)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from mvlog.commands.output import err, reporter_for
from mvlog.errors import redact

if TYPE_CHECKING:
    from mvlog.project import Project


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


def state_of(ctx: click.Context) -> State:
    return ctx.ensure_object(State)


def project_of(ctx: click.Context) -> Project:
    state = state_of(ctx)
    if state.project is None:
        from mvlog.config import load_config
        from mvlog.project import Project

        config = load_config(state.config)
        state.project = ctx.with_resource(Project(config, reporter=reporter_for(err, state.quiet)))
    return state.project

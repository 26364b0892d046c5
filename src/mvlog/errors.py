"""The one error hierarchy of mvlog.

Every error a user can cause or meet is an :class:`MvlogError` whose message is one
clear sentence. The CLI prints ``Error: <message>`` and exits with ``exit_code``.
"""

from __future__ import annotations


class MvlogError(Exception):
    """Base class: a problem mvlog can explain in one sentence."""

    exit_code = 1


class ConfigError(MvlogError):
    """The configuration file or a view definition is invalid (exit code 2)."""

    exit_code = 2


class UsageError(MvlogError):
    """The command line asks for something that does not exist (exit code 2)."""

    exit_code = 2


class SourceError(MvlogError):
    """PostgreSQL is unreachable, refused us, or failed a statement."""


class WarehouseError(MvlogError):
    """The Delta warehouse cannot be read or written."""


class RefreshError(MvlogError):
    """A refresh could not be carried out as asked."""


class ConcurrentRefreshError(RefreshError):
    """Another refresh of the same view is running."""


class SetupError(MvlogError):
    """A local prerequisite (PostgreSQL binaries, Java, ...) is missing."""

"""The one error hierarchy of mvlog, and the one function that keeps secrets out of messages.

Every error a user can cause or meet is an :class:`MvlogError` whose message is one
clear sentence. The CLI prints ``Error: <message>`` and exits with ``exit_code``. An
error is ``transient`` when the same call may well succeed later (a connection lost, a
concurrent refresh): the scheduler retries those, and only those.
"""

from __future__ import annotations

from collections.abc import Iterable


class MvlogError(Exception):
    """Base class: a problem mvlog can explain in one sentence."""

    exit_code = 1
    transient = False

    def __init__(self, message: str, *, transient: bool | None = None):
        super().__init__(message)
        if transient is not None:
            self.transient = transient


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
    """Another refresh of the same view is running (and did not end within the wait). Not a
    failure of a refresh run: the view is being refreshed; the run reports it as skipped."""

    transient = True

    def __init__(self, view: str, holder: str):
        super().__init__(f"view {view} is being refreshed by {holder}")
        self.view = view
        self.holder = holder


class RefreshRefused(RefreshError):
    """A ``fast`` view cannot be fast-refreshed this time (``reason``) and will not turn complete."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class SetupError(MvlogError):
    """A local prerequisite (PostgreSQL binaries, Java, ...) is missing."""


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (a password) replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text

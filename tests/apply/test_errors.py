"""The error hierarchy: exit codes, transience, and the one redaction function."""

from __future__ import annotations

from mvlog.errors import (
    ConcurrentRefreshError,
    ConfigError,
    MvlogError,
    RefreshError,
    SourceError,
    UsageError,
    WarehouseError,
    redact,
)


def test_exit_codes():
    assert ConfigError("x").exit_code == UsageError("x").exit_code == 2
    assert SourceError("x").exit_code == WarehouseError("x").exit_code == RefreshError("x").exit_code == 1


def test_errors_say_whether_they_are_transient():
    assert not MvlogError("x").transient and not SourceError("a failed statement").transient
    assert SourceError("connection lost", transient=True).transient
    assert ConcurrentRefreshError("v", "pid 1 on h").transient
    assert str(ConcurrentRefreshError("v", "pid 1 on h")) == "view v is being refreshed by pid 1 on h"
    assert str(SourceError("one sentence", transient=True)) == "one sentence"


def test_redact_replaces_every_secret_everywhere():
    assert redact("user app password s3cret at s3cret", ["s3cret"]) == "user app password *** at ***"
    assert redact("nothing here", ["", "s3cret"]) == "nothing here"
    assert redact("a b", []) == "a b"

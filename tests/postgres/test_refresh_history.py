"""The refresh history on a real PostgreSQL (no Spark): typed rows, interrupted runs closed."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from mvlog.errors import UsageError
from mvlog.model import RefreshMethod
from mvlog.spark.warehouse import WriteCounts

pytestmark = pytest.mark.integration


def test_history_rows_are_typed_and_interrupted_runs_are_closed(registered):
    catalog = registered.catalog
    stamp = datetime(2026, 11, 22, 3, 1, 2, tzinfo=timezone.utc)
    done = catalog.refreshes.start("v", RefreshMethod.FAST, "changed keys since the last refresh", stamp)
    catalog.refreshes.end(done, WriteCounts(3, 1, 1, 1), method=RefreshMethod.COMPLETE, reason="a table was truncated")
    catalog.refreshes.start("v", RefreshMethod.FAST, "changed keys since the last refresh", stamp)
    catalog.refreshes.close_interrupted(["v"])
    newest, oldest = registered.history("v")
    assert (newest.status, newest.method) == ("failed", "fast")
    assert newest.error == "interrupted: the refresh process ended before finishing"
    assert (oldest.status, oldest.method, oldest.reason, oldest.keys_read, oldest.rows_deleted) == (
        "succeeded", "complete", "a table was truncated", 3, 1)
    assert isinstance(oldest.seconds, float) and oldest.seconds >= 0
    data = oldest.to_json()
    assert data["snaptime"] == stamp.isoformat() and data["error"] is None and data["id"] == done
    with pytest.raises(UsageError, match="view nope is not registered"):
        registered.history("nope")

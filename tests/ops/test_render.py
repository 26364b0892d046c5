"""How refresh results read: the table of `mvlog refresh`/`apply`/`demo`, the line of `mvlog schedule`."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from mvlog.commands.report import result_line, results_table
from mvlog.errors import ConcurrentRefreshError, SourceError
from mvlog.model import RefreshMethod
from mvlog.pipeline.results import RefreshResult

S = datetime(2026, 11, 22, 3, 1, 2, tzinfo=UTC)
OK = RefreshResult("open_orders", RefreshMethod.FAST, "changed keys since the last refresh", S, 10, 4, 0, 6, 498, 3.91,
                   phases={"prepare": 0.2104, "read": 0.3, "write": 3.3, "record": 0.1})
FAILED = RefreshResult.failed("per_customer", SourceError("cannot connect: password s3cret refused", transient=True),
                              started=0.0)
BUSY = RefreshResult.busy("big_orders", ConcurrentRefreshError("big_orders", "pid 7 on [host-a]"), started=0.0)


def rendered(results, secrets=()) -> str:
    console = Console(width=200, record=True)
    console.print(results_table(results, secrets))
    return console.export_text()


def test_the_table_has_a_row_per_view_with_counts_and_the_reason_or_error():
    text = rendered([OK, FAILED], ["s3cret"])
    row = next(line.replace("│", " ").split() for line in text.splitlines() if line.strip().startswith("open_orders"))
    assert row[:8] == ["open_orders", "fast", "10", "4", "0", "6", "498", "3.9"]
    assert "changed keys since the last refresh" in text
    failed = next(line for line in text.splitlines() if line.strip().startswith("per_customer"))
    assert " - " in failed and "failed: cannot connect: password *** refused" in failed and "s3cret" not in text


def test_a_result_that_could_not_start_has_no_method():
    assert FAILED.method is None and FAILED.transient
    assert FAILED.to_json()["method"] == "-" and "transient" not in FAILED.to_json()
    assert OK.to_json() == {"view": "open_orders", "method": "fast", "reason": "changed keys since the last refresh",
                            "snaptime": S.isoformat(), "keys_read": 10, "rows_inserted": 4, "rows_updated": 0,
                            "rows_deleted": 6, "row_count": 498, "seconds": 3.91, "error": None, "status": "succeeded",
                            "phases": {"prepare": 0.21, "read": 0.3, "write": 3.3, "record": 0.1}}
    assert FAILED.to_json()["status"] == "failed"


def test_a_view_another_process_is_refreshing_is_skipped_not_failed():
    assert (BUSY.status, BUSY.error, BUSY.method, BUSY.transient) == ("skipped", None, None, False)
    data = BUSY.to_json()
    assert (data["status"], data["method"], data["reason"]) == ("skipped", "-", "being refreshed by pid 7 on [host-a]")
    row = next(line for line in rendered([BUSY]).splitlines() if line.strip().startswith("big_orders"))
    assert "skipped: being refreshed by pid 7 on [host-a]" in row  # brackets are text, not markup
    assert result_line(BUSY) == "view=big_orders status=skipped reason='being refreshed by pid 7 on [host-a]'"


def test_the_log_line():
    assert result_line(OK) == ("view=open_orders status=ok method=fast keys=10 inserted=4 updated=0 deleted=6 "
                               "rows=498 seconds=3.9 prepare=0.21 read=0.30 write=3.30 record=0.10")
    assert result_line(FAILED).startswith("view=per_customer status=failed seconds=")
    assert "error='cannot connect: password s3cret refused'" in result_line(FAILED)  # the CLI redacts its log

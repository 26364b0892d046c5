"""The idempotent-write transaction of a refresh (pure: no PostgreSQL, no Spark)."""

import random
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from mvlog.pipeline.refresh import refresh_txn

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECONDS = st.integers(min_value=1_600_000_000_000_000, max_value=2_500_000_000_000_000)


def test_the_version_is_the_stamp_s_exact_microseconds() -> None:
    # through a float (stamp.timestamp() * 1e6) about one stamp in forty came out a microsecond low;
    # hypothesis's integers lean to round values, which the float gets right: draw them uniformly
    draw = random.Random()
    for us in (draw.randrange(1_600_000_000_000_000, 2_500_000_000_000_000) for _ in range(5_000)):
        stamp = EPOCH + timedelta(microseconds=us)
        assert refresh_txn("v", stamp) == ("mvlog:v", us)
        assert refresh_txn("v", stamp.astimezone(timezone(timedelta(hours=-5))))[1] == us


@given(MICROSECONDS)
def test_stamps_a_microsecond_apart_have_versions_in_their_order(us: int) -> None:
    # the take-back's fence is the next refresh's stamp minus one: it must stay above every older
    # refresh's version and below the next one's own
    earlier, later = EPOCH + timedelta(microseconds=us), EPOCH + timedelta(microseconds=us + 1)
    assert refresh_txn("v", earlier)[1] == refresh_txn("v", later)[1] - 1


def test_a_naive_stamp_is_local_time() -> None:
    naive = datetime(2026, 12, 2, 3, 4, 5, 123456)
    assert refresh_txn("v", naive)[1] == refresh_txn("v", naive.astimezone())[1]

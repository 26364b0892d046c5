"""A view's state on the dashboard, from its status and latest refresh (pure)."""

from __future__ import annotations

import pytest

from mvlog.ui.states import BEHIND, FAILING, FRESH, NEVER_BUILT, STATES, view_state

BUILT = {"staleness": "fresh", "last_refresh": "2026-11-28T10:00:00+00:00", "lag_seconds": 0.0,
         "freshness_seconds": 60.0}
OK = {"status": "succeeded", "error": None}
FAILED = {"status": "failed", "error": "table public.t was truncated"}


@pytest.mark.parametrize(("status", "latest", "state"), [
    (BUILT, OK, FRESH),
    ({**BUILT, "lag_seconds": 61.0}, OK, BEHIND),
    ({**BUILT, "lag_seconds": 60.0}, OK, FRESH),  # at the target is within it
    ({**BUILT, "lag_seconds": 5000.0, "freshness_seconds": None}, OK, FRESH),  # no target: never behind
    ({**BUILT, "staleness": "stale", "lag_seconds": 3.0}, OK, FRESH),
    ({**BUILT, "lag_seconds": 61.0}, FAILED, FAILING),  # failing says more than behind
    ({**BUILT, "staleness": "invalid"}, OK, FAILING),  # a query that no longer works
    ({**BUILT, "last_refresh": None, "lag_seconds": None}, None, NEVER_BUILT),
    ({**BUILT, "last_refresh": None, "lag_seconds": None}, FAILED, FAILING),  # its build failed
    ({**BUILT, "last_refresh": None, "lag_seconds": None}, {"status": "running", "error": None}, NEVER_BUILT),
])
def test_the_state_of_a_view(status, latest, state):
    assert view_state(status, latest) == state


def test_each_state_has_a_colour_of_its_own():
    assert len({s.colour for s in STATES.values()}) == len(STATES) == 4
    assert set(STATES) == {"fresh", "behind", "failing", "never_built"}

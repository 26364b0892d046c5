"""What state a view is shown in on the dashboard, and its colour (pure).

One decision, from the fields ``mvlog status --json`` gives a view and its latest refresh
(``mvlog history --json``'s newest row): a view whose latest refresh failed, or that cannot be
refreshed at all, is *failing*; one never built is *never built*; one whose lag is over its
``freshness:`` target is *behind*; any other is *fresh* (a view without a target is never behind).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class State:
    """A state as the page shows it."""

    name: str  # the value in the API (``state``)
    label: str  # the words on the page
    colour: str  # the node's fill (a CSS colour)


FRESH = State("fresh", "fresh", "#2e7d32")
BEHIND = State("behind", "behind its target", "#ef8f00")
FAILING = State("failing", "failing", "#c62828")
NEVER_BUILT = State("never_built", "never built", "#78909c")
STATES = {s.name: s for s in (FRESH, BEHIND, FAILING, NEVER_BUILT)}


def view_state(status: dict[str, Any], latest: dict[str, Any] | None) -> State:
    """The state of a view from its ``status`` fields and its ``latest`` refresh (None: never refreshed)."""
    if status.get("staleness") == "invalid" or (latest is not None and latest["status"] == "failed"):
        return FAILING
    if status.get("last_refresh") is None:
        return NEVER_BUILT
    lag, target = status.get("lag_seconds"), status.get("freshness_seconds")
    if lag is not None and target is not None and lag > target:
        return BEHIND
    return FRESH

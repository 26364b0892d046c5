"""When a scheduled unit is due: a view, or every view of a refresh group, on its cron schedule,
or — with a ``freshness:`` target — when the lag of its stalest view plus what its last refresh
took, plus a tenth of the target to spare, would pass the target before the next check. The
scheduler's rules (:class:`Unit`), read from the configuration (:func:`units_of`); the loop that
applies them is :mod:`mvlog.commands.schedule`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from croniter import croniter

from mvlog.commands.report import duration_text
from mvlog.config import Config
from mvlog.errors import ConfigError

FRESHNESS_POLL_MIN = 1.0  # seconds between freshness checks: a tenth of the target, within these bounds
FRESHNESS_POLL_MAX = 30.0


@dataclass
class Unit:
    """What fires together: one view, or every view of a refresh group."""

    name: str
    views: list[str]
    cron: str | None = None
    group: str | None = None
    freshness: timedelta | None = None
    next_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    last_seconds: float = 0.0  # what its last refresh took: a freshness unit starts that much early
    stamp: datetime | None = None  # the source time its last refresh applied (a group's oldest)

    def advance(self, after: datetime) -> None:
        """The next moment to fire (cron) or to look at the lag (freshness), after ``after``."""
        if self.cron is None:
            self.next_at = after + timedelta(seconds=self.poll)
            return
        self.next_at = self._next_firing(after)
        if self.freshness is not None:
            self.next_at = min(self.next_at, after + timedelta(seconds=self.poll))

    def advance_after_refresh(self, stamp: datetime | None, now: datetime) -> None:
        """The next look after a refresh that applied the source as of ``stamp`` (its oldest
        stamp, for a group): when the lag could reach the point where :meth:`fresh_enough` fires,
        at once if it already has, and no later than a poll away. A unit kept busy by its target
        refreshes back to back, not a poll apart."""
        self.advance(now)
        if self.freshness is None or stamp is None:
            return
        due = stamp + timedelta(seconds=self._margin)
        self.next_at = min(self.next_at, max(now, due))

    @property
    def _margin(self) -> float:
        """The lag at which the unit must refresh (see :meth:`fresh_enough`)."""
        assert self.freshness is not None
        target = self.freshness.total_seconds()
        return target - self.last_seconds - self.poll - target / 10

    @property
    def poll(self) -> float:
        target = self.freshness.total_seconds() if self.freshness else FRESHNESS_POLL_MAX
        return min(max(target / 10, FRESHNESS_POLL_MIN), FRESHNESS_POLL_MAX)

    def cron_due(self, now: datetime, previous: datetime) -> bool:
        """Whether a cron firing falls in (previous, now]."""
        return self.cron is not None and self._next_firing(previous) <= now

    def _next_firing(self, after: datetime) -> datetime:
        assert self.cron is not None
        seconds_first = len(self.cron.split()) == 6  # 6 fields: seconds first
        return croniter(self.cron, after, second_at_beginning=seconds_first).get_next(datetime)

    def fresh_enough(self, lag: float | None) -> bool:
        """Whether the unit's lag can wait for the next check (None: a view was never built)."""
        if self.freshness is None:
            return True
        if lag is None:
            return False
        # A tenth of the target to spare: a refresh can take longer than the last one did.
        return lag == 0 or lag < self._margin

    def describe(self) -> str:
        when = [f"on {self.cron!r}"] if self.cron else []
        if self.freshness is not None:
            when.append(f"at most {duration_text(self.freshness.total_seconds())} behind")
        return f"{self.name} ({', '.join(self.views)}) {' and '.join(when)}"


def units_of(config: Config) -> list[Unit]:
    """Scheduled units: views with a schedule or a freshness target; a group's views must share one
    schedule, and the group keeps the strictest freshness target of its views."""
    units: dict[str, Unit] = {}
    for view in config.views:
        if view.schedule is None and view.freshness is None:
            continue
        if view.group is None:
            units[view.name] = Unit(view.name, [view.name], view.schedule, freshness=view.freshness)
            continue
        name = f"group {view.group}"
        unit = units.setdefault(name, Unit(name, [], view.schedule, view.group, view.freshness))
        if unit.cron != view.schedule and unit.cron is not None and view.schedule is not None:
            raise ConfigError(f"the views of refresh group {view.group} have different schedules "
                              f"({unit.cron!r} and {view.schedule!r}); give them one")
        unit.cron = unit.cron or view.schedule
        if view.freshness is not None:
            unit.freshness = min(unit.freshness or view.freshness, view.freshness)
        unit.views.append(view.name)
    if not units:
        raise ConfigError("no view has a schedule or a freshness target: add schedule: '<cron>' or "
                          "freshness: 10m to the views to refresh")
    return list(units.values())

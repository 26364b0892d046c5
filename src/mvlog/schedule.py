"""``mvlog schedule``: refresh views and groups on their cron schedules with one warm SparkSession.

One process; the units that are due at the same moment are refreshed together, up to the
configuration's ``concurrency`` at once on the one Spark (never two of the same view; across
processes the per-view advisory lock holds: a view another process is refreshing is skipped, not
waited for, and comes due again). Transient failures (PostgreSQL unreachable or its connection
lost: errors that say they are transient) are retried with exponential backoff. SIGTERM or SIGINT stops the loop after the
refresh in flight; the Spark JVM ignores SIGINT, so Ctrl-C does not cut a refresh in half.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from croniter import croniter

from mvlog.config import Config
from mvlog.errors import ConfigError
from mvlog.project import Project
from mvlog.render import result_line


@dataclass
class Unit:
    """What fires together: one view, or every view of a refresh group."""

    name: str
    views: list[str]
    cron: str
    group: str | None = None
    next_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def advance(self, after: datetime) -> None:
        seconds_first = len(self.cron.split()) == 6
        self.next_at = croniter(self.cron, after, second_at_beginning=seconds_first).get_next(datetime)


def units_of(config: Config) -> list[Unit]:
    """Scheduled units: views with a schedule; a group's views must share one schedule."""
    units: dict[str, Unit] = {}
    for view in config.views:
        if view.schedule is None:
            continue
        if view.group is None:
            units[view.name] = Unit(view.name, [view.name], view.schedule)
            continue
        unit = units.setdefault(f"group {view.group}", Unit(f"group {view.group}", [], view.schedule, view.group))
        if unit.cron != view.schedule:
            raise ConfigError(f"the views of refresh group {view.group} have different schedules "
                              f"({unit.cron!r} and {view.schedule!r}); give them one")
        unit.views.append(view.name)
    if not units:
        raise ConfigError("no view has a schedule: add schedule: '<cron>' to the views to refresh")
    return list(units.values())


class Scheduler:
    """The long-running loop behind ``mvlog schedule``."""

    def __init__(self, project: Project, log: Callable[[str], None], max_retries: int = 3, backoff: float = 2.0):
        self.project = project
        self.units = units_of(project.config)
        self.log = log
        self.max_retries = max_retries
        self.backoff = backoff
        self.stop = threading.Event()

    def install_signal_handlers(self) -> None:
        def request_stop(signum: int, _frame: object) -> None:
            if not self.stop.is_set():
                self.log(f"received {signal.Signals(signum).name}: stopping after the refresh in flight")
            self.stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    def run(self) -> None:
        now = datetime.now(timezone.utc)
        for unit in self.units:
            unit.advance(now)
            self.log(f"scheduled {unit.name} ({', '.join(unit.views)}) on {unit.cron!r}; next {unit.next_at:%H:%M:%S}")
        self.project.warehouse  # start Spark once, before the first refresh is due
        while not self.stop.is_set():
            wait = (min(u.next_at for u in self.units) - datetime.now(timezone.utc)).total_seconds()
            if wait > 0 and self.stop.wait(wait):
                break
            now = datetime.now(timezone.utc)
            due = [u for u in self.units if u.next_at <= now]
            self.refresh(due)
            for unit in due:
                unit.advance(max(datetime.now(timezone.utc), unit.next_at))
        self.log("stopped")

    def _views(self, unit: Unit) -> list[str]:
        """The views a unit refreshes: a group's are all of its views, scheduled or not."""
        if unit.group is None:
            return unit.views
        return [v.name for v in self.project.config.views if v.group == unit.group]

    def refresh(self, units: list[Unit]) -> None:
        """Refresh the due units together (concurrently, up to the configuration's bound); retry
        the units with transient failures, with exponential backoff."""
        pending = list(units)
        for attempt in range(self.max_retries + 1):
            results = self.project.refresh([name for unit in pending for name in self._views(unit)])
            for result in results:
                self.log(result_line(result))
            transient = {r.view for r in results if r.error and r.transient}
            pending = [unit for unit in pending if transient & set(self._views(unit))]
            if not pending or attempt == self.max_retries or self.stop.is_set():
                return
            delay = self.backoff * 2 ** attempt
            self.log(f"retrying {', '.join(u.name for u in pending)} in {delay:.0f} s "
                     f"(attempt {attempt + 2} of {self.max_retries + 1})")
            if self.stop.wait(delay):
                return

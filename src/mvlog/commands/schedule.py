"""``mvlog schedule``: refresh views and groups on their cron schedules and freshness targets with
one warm SparkSession.

A unit (a view, or every view of a refresh group) fires on its cron schedule, or — with a
``freshness:`` target — when the lag of its stalest view (time since the oldest change it has
not applied started) plus what its last refresh took, plus a tenth of the target to spare,
would pass the target before the next check; never while its logs hold nothing pending for it.

One process; the units that are due at the same moment are refreshed together, up to the
configuration's ``concurrency`` at once on the one Spark (never two of the same view; across
processes the per-view advisory lock holds: a view another process is refreshing is skipped, not
waited for, and comes due again). Transient failures (PostgreSQL unreachable or its connection
lost: errors that say they are transient) are retried with exponential backoff. While PostgreSQL
itself is away (a restart, a crash, a failover), the scheduler keeps running: it says so once, asks
again with backoff (:class:`SourceWatch`), says when it is back and how long it was away, and then
refreshes what fell behind; the capture thread reconnects the same way. A connection that stops
answering without closing (a partition, a NAT or proxy that forgot it) is given up at its bound
(:mod:`mvlog.postgres.deadlines`): the refresh fails transiently and is retried when PostgreSQL
answers again. SIGTERM or SIGINT stops the loop after the refresh in flight, and gives that refresh
up if it has not ended within ``STOP_GRACE`` seconds (a stalled connection); the Spark JVM ignores
SIGINT, so Ctrl-C does not cut a refresh in half.
"""

from __future__ import annotations

import faulthandler
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mvlog.commands.report import duration_text, result_line
from mvlog.commands.stopping import STOP_GRACE, beside_signals, stop_within
from mvlog.commands.timing import Unit, units_of
from mvlog.errors import MvlogError, UsageError
from mvlog.postgres.capture.batch import Pass
from mvlog.postgres.capture.decoding import BATCH_ROWS
from mvlog.project import Project

if TYPE_CHECKING:
    from mvlog.ops.metrics import SchedulerMetrics


CAPTURE_INTERVAL = 1.0  # seconds between logical capture passes that found nothing
RETRY_FIRST = 1.0  # seconds before PostgreSQL (or the capture) is tried again after it went away: doubled
RETRY_MOST = 30.0  # each time up to this
REMIND_EVERY = 300.0  # seconds between reminders that PostgreSQL is still away
LOST_SLOT = ("the replication slot was missing or had lost WAL (a failover to a standby without a copy of it, or "
             "max_slot_wal_keep_size): it was made again; the views of logical logs refresh completely next "
             "('mvlog status' says so; a view with refresh: fast waits for 'mvlog refresh --complete')")


def capture_until(project: Project, log: Callable[[str], None], stop: threading.Event,
                  interval: float = CAPTURE_INTERVAL, batch_rows: int = BATCH_ROWS,
                  written: Callable[[Pass], None] = lambda _: None) -> None:
    """Run the logical capture until ``stop`` (``mvlog capture``, and beside the scheduler's
    refreshes), calling ``written`` for each write of log rows. When it fails (PostgreSQL away,
    the stream cut) it says so once, tries again with backoff, and says when it writes again: the
    stream resumes from the position the capture recorded. A slot found missing is said too."""
    failed_at: float | None = None
    failure, delay = "", RETRY_FIRST
    replaced = _replaced_at(project)
    while not stop.is_set():
        try:
            for done in project.capture(interval=interval, stop=stop.is_set, batch_rows=batch_rows):
                if failed_at is not None or done.lost:
                    if failed_at is not None:
                        log(f"capture: resumed after {duration_text(time.monotonic() - failed_at)}")
                    failed_at, failure, delay = None, "", RETRY_FIRST
                    # Found lost here, or by a refresh's own pass while this capture was away.
                    if (now := _replaced_at(project)) != replaced:
                        log(f"capture: {LOST_SLOT}")
                        replaced = now
                if not done.lost:
                    written(done)
            return  # stopped, or the capture was dropped
        except MvlogError as exc:
            if not exc.transient and isinstance(exc, UsageError):
                raise  # nothing to capture
            if stop.is_set():  # given up as the process stops
                return
            if failed_at is None:
                failed_at = time.monotonic()
            if str(exc) != failure:  # once per outage (and again if the reason changes)
                log(f"capture: {exc}; trying again every {RETRY_FIRST:g}-{RETRY_MOST:g} s")
                failure = str(exc)
            stop.wait(delay)
            delay = min(delay * 2, RETRY_MOST)


def _replaced_at(project: Project) -> datetime | None:
    """When the slot was last made again; None if never, or if PostgreSQL cannot say now."""
    try:
        return project.slot_replaced_at()
    except MvlogError:
        return None


class SourceWatch:
    """Waits out PostgreSQL being away: says so once, asks again with backoff (``RETRY_FIRST``
    doubled up to ``RETRY_MOST``; a reminder every ``REMIND_EVERY`` seconds), and says when it is
    back and after how long."""

    def __init__(self, ping: Callable[[], None], log: Callable[[str], None], stop: threading.Event):
        self.ping = ping
        self.log = log
        self.stop = stop

    def wait(self, exc: MvlogError) -> bool:
        """Wait until ``ping`` succeeds; False if the scheduler was stopped first. A non-transient
        error of ``ping`` (the password changed while it was away) is raised."""
        started = reminded = time.monotonic()
        self.log(f"PostgreSQL is unavailable ({exc}); the scheduler keeps running and tries again every "
                 f"{RETRY_FIRST:g}-{RETRY_MOST:g} s")
        delay = RETRY_FIRST
        while not self.stop.wait(delay):
            try:
                self.ping()
            except MvlogError as again:
                if not again.transient:
                    raise
                delay = min(delay * 2, RETRY_MOST)
                if time.monotonic() - reminded >= REMIND_EVERY:
                    reminded = time.monotonic()
                    self.log(f"PostgreSQL still unavailable after {duration_text(reminded - started)} ({again})")
                continue
            self.log(f"PostgreSQL is back after {duration_text(time.monotonic() - started)}")
            return True
        return False


class Scheduler:
    """The long-running loop behind ``mvlog schedule``."""

    def __init__(self, project: Project, log: Callable[[str], None], max_retries: int = 3, backoff: float = 2.0,
                 metrics: SchedulerMetrics | None = None):
        self.project = project
        self.metrics = metrics
        self.units = units_of(project.config)
        self.log = log
        self.max_retries = max_retries
        self.backoff = backoff
        self.stop = threading.Event()
        self.stopped = threading.Event()  # the loop has ended
        self.refreshing = threading.Event()  # a refresh is in flight
        self.source_watch = SourceWatch(project.reachable, log, self.stop)
        # Builds the Delta state of the versions refreshes committed, beside the next looks: on the
        # loop, four views' warming held the next refresh of a 5 s freshness target for seconds.
        self.warmer = ThreadPoolExecutor(1, thread_name_prefix="mvlog-warm")

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the loop (see the module); SIGUSR1 prints every thread's stack
        on stderr and carries on (what a scheduler that seems stuck is doing)."""
        faulthandler.register(signal.SIGUSR1, all_threads=True)

        def request_stop(signum: int, _frame: object) -> None:
            if not self.stop.is_set():
                # A refresh in flight may end for STOP_GRACE seconds; anything else (a look, the
                # capture's stream) is given up at once.
                grace = STOP_GRACE if self.refreshing.is_set() else 0.0
                self.log(f"received {signal.Signals(signum).name}: stopping"
                         + (f" after the refresh in flight (given up after {grace:g} s)" if grace else ""))
                threading.Thread(target=stop_within, args=(self.stopped, self.project.give_up, self.log, grace),
                                 name="mvlog-stop", daemon=True).start()
            self.stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    def run(self) -> None:
        """Run the loop until stopped (on a thread of its own: see :func:`beside_signals`)."""
        beside_signals(self._run, self.stopped)

    def _run(self) -> None:
        now = datetime.now(UTC)
        for unit in self.units:
            unit.last_seconds = self._last_seconds(unit)
            unit.advance(now)
            self.log(f"scheduled {unit.describe()}; next look {unit.next_at:%H:%M:%S}")
        _ = self.project.warehouse  # start Spark once, before the first refresh is due
        self.log("ready: Spark started")
        if self.project.logs.logical.exists():
            threading.Thread(target=self._capture, name="mvlog-capture", daemon=True).start()
        self._update_gauges()
        looked = {unit.name: now for unit in self.units}
        while not self.stop.is_set():
            wait = (min(u.next_at for u in self.units) - datetime.now(UTC)).total_seconds()
            if wait > 0 and self.stop.wait(wait):
                break
            now = datetime.now(UTC)
            looking = [u for u in self.units if u.next_at <= now]
            try:
                due = self.due(looking, looked, now)
                self.refresh(due)
                self._update_gauges()
            except MvlogError as exc:
                if not exc.transient:
                    raise
                if self.stop.is_set():  # given up as the scheduler stops
                    break
                self.source_watch.wait(exc)
                continue  # look at the same units again at once: they fell behind while it was away
            for unit in looking:
                looked[unit.name] = now
                unit.advance_after_refresh(unit.stamp if unit in due else None, max(datetime.now(UTC), now))
        self.warmer.shutdown(wait=True, cancel_futures=True)
        self.log("stopped")

    def _capture(self) -> None:
        """The logical capture, beside the refreshes, until the scheduler stops (:func:`capture_until`)."""
        self.log("capturing: logical decoding into the logs")
        capture_until(self.project, self.log, self.stop)

    def _update_gauges(self) -> None:
        if self.metrics is None:
            return
        try:
            self.metrics.update_gauges(self.project.config.views, self.project.freshness, self.project.status_reader)
        except MvlogError as exc:  # the database is away: the gauges keep their last values
            self.log(f"metrics not updated: {exc}")

    def _last_seconds(self, unit: Unit) -> float:
        """The longest of the unit's last successful refreshes (up to 5 per view), from the history."""
        took = []
        for name in self._views(unit):
            try:
                took += [h.seconds for h in self.project.history(name, 5) if h.status == "succeeded" and h.seconds]
            except MvlogError:
                pass  # not registered yet: its first refresh says why
        return max(took, default=0.0)

    def due(self, looking: list[Unit], looked: dict[str, datetime], now: datetime) -> list[Unit]:
        """The units to refresh now: a cron firing since they were last looked at, or a lag that
        would pass their freshness target before the next look."""
        due = [unit for unit in looking if unit.cron_due(now, looked[unit.name])]
        watched = [unit for unit in looking if unit.freshness is not None and unit not in due]
        lags = self.project.lags([name for unit in watched for name in self._views(unit)]) if watched else {}
        for unit in watched:
            assert unit.freshness is not None
            views = [lags[name] for name in self._views(unit)]
            lag = None if None in views else max((v for v in views if v is not None), default=0.0)
            if not unit.fresh_enough(lag):
                self.log(f"{unit.name}: lag {duration_text(lag)} + last refresh {duration_text(unit.last_seconds)} "
                         f"nears the target {duration_text(unit.freshness.total_seconds())}: refreshing"
                         if lag is not None else f"{unit.name}: not built yet: refreshing")
                due.append(unit)
        return due

    def _views(self, unit: Unit) -> list[str]:
        """The views a unit refreshes: a group's are all of its views, scheduled or not."""
        if unit.group is None:
            return unit.views
        return [v.name for v in self.project.config.views if v.group == unit.group]

    def refresh(self, units: list[Unit]) -> None:
        """Refresh the due units together (concurrently, up to the configuration's bound); retry
        the units with transient failures, with exponential backoff."""
        if not units or self.stop.is_set():
            return
        pending, attempt = list(units), 0
        while True:
            self.refreshing.set()
            try:
                results = self.project.refresh([name for unit in pending for name in self._views(unit)])
            finally:
                self.refreshing.clear()
            for result in results:
                self.log(result_line(result))
                if self.metrics is not None:
                    self.metrics.observe(result)
            # Now, beside the next looks: else the next refresh of each view builds it first (Delta
            # builds a version's state once: a refresh that needs it meanwhile waits for this build).
            wrote = [r.view for r in results if r.wrote]
            if wrote:
                self.warmer.submit(self.project.warm, wrote)
            done = {r.view: r for r in results if not r.error and not r.skipped}
            for unit in pending:
                mine = [done[v] for v in self._views(unit) if v in done]
                unit.last_seconds = max((r.seconds for r in mine), default=unit.last_seconds)
                unit.stamp = min((r.snaptime for r in mine if r.snaptime is not None), default=None)
            transient = {r.view for r in results if r.error and r.transient}
            pending = [unit for unit in pending if transient & set(self._views(unit))]
            if not pending or self.stop.is_set():
                return
            try:
                self.project.reachable()
            except MvlogError as exc:  # PostgreSQL went away: wait for it, then refresh them at once
                if not exc.transient:
                    raise
                if not self.source_watch.wait(exc):
                    return
                continue
            if attempt == self.max_retries:
                return
            delay = self.backoff * 2 ** attempt
            attempt += 1
            self.log(f"retrying {', '.join(u.name for u in pending)} in {delay:.0f} s "
                     f"(attempt {attempt + 1} of {self.max_retries + 1})")
            if self.stop.wait(delay):
                return

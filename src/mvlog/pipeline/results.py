"""What refreshing one view came to (:class:`RefreshResult`), and where its seconds went."""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from mvlog.errors import ConcurrentRefreshError, MvlogError, RefreshRefused
from mvlog.model import RefreshMethod
from mvlog.pipeline.plan import RefreshPlan


@dataclass
class RefreshResult:
    """The outcome of refreshing one view (``method`` None: the refresh could not start)."""

    view: str
    method: RefreshMethod | Literal["fresh"] | None  # fresh: nothing changed, nothing done (model.UNCHANGED)
    reason: str
    snaptime: datetime | None
    keys_read: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    row_count: int | None = None
    seconds: float = 0.0
    error: str | None = None
    transient: bool = False  # the error may go away by itself (retried by the scheduler)
    # Where the seconds went: prepare (lock, check, plan, stamp; shared by a group's views),
    # read (from PostgreSQL, staged), write (the Delta commit; a complete refresh reads here
    # too), record (key map and catalog).
    phases: dict[str, float] = field(default_factory=dict)
    skipped: bool = False  # another process was refreshing the view: not a failure (reason says who)
    detail: str | None = None  # a failure's traceback, with the error it reports (``mvlog --debug``)

    @property
    def wrote(self) -> bool:
        """Whether the refresh committed to its Delta table (a new version whose state a reader
        builds first)."""
        changed = self.rows_inserted or self.rows_updated or self.rows_deleted
        return (not self.error and not self.skipped
                and (self.method is RefreshMethod.COMPLETE or (self.method is RefreshMethod.FAST and bool(changed))))

    @classmethod
    def failed(cls, view: str, exc: MvlogError, started: float, plan: RefreshPlan | None = None,
               snaptime: datetime | None = None) -> RefreshResult:
        """A refresh that failed; a refused one (a ``fast`` view that needs a complete refresh)
        ran no method, and its reason is the refusal's."""
        if isinstance(exc, RefreshRefused):
            return cls(view, None, exc.reason, snaptime, error=str(exc), seconds=time.monotonic() - started,
                       detail=_traceback(exc))
        return cls(view, plan.method if plan else None, plan.reason if plan else "-", snaptime, error=str(exc),
                   seconds=time.monotonic() - started, transient=exc.transient, detail=_traceback(exc))

    @classmethod
    def busy(cls, view: str, exc: ConcurrentRefreshError, started: float) -> RefreshResult:
        """Skipped: another process is refreshing the view (``exc`` says who)."""
        return cls(view, None, f"being refreshed by {exc.holder}", None, seconds=time.monotonic() - started,
                   skipped=True)

    @property
    def status(self) -> str:
        return "failed" if self.error else "skipped" if self.skipped else "succeeded"

    def to_json(self) -> dict[str, Any]:
        """The result as ``mvlog refresh --json`` prints it (docs/json.md)."""
        data = asdict(self)
        del data["transient"], data["skipped"], data["detail"]
        data["status"] = self.status
        data["method"] = str(self.method) if self.method else "-"
        data["snaptime"] = self.snaptime.isoformat() if self.snaptime else None
        data["seconds"] = round(self.seconds, 3)
        data["phases"] = {name: round(seconds, 3) for name, seconds in self.phases.items()}
        return data


def _traceback(exc: BaseException) -> str:
    """The traceback of ``exc``, preceded by that of the error it was raised from or while handling
    (mvlog words errors in one sentence ``from None``; the cause is what --debug is for)."""
    parts = traceback.format_exception(exc)
    inner = exc.__cause__ or exc.__context__
    if inner is not None and exc.__suppress_context__:
        parts = traceback.format_exception(inner) + ["\nreported by mvlog as:\n\n"] + parts
    return "".join(parts)


# A refresh's phases, in their order: the plan (lock, check, stamp, the plan at the stamp); the look
# at the Delta table before a fast write (the state of its newest version, which the write then
# uses); the rows read from PostgreSQL (the changed keys', or the whole query's: ``read_whole``,
# :mod:`mvlog.pipeline.readscope`); the Delta commit; the key map and the catalog's record, and
# within it the reads its statements share, which the record computes again (``reread``: a composed
# view's pieces' fast reads, :meth:`~mvlog.sql.strategies.strategy.Strategy.scratch`).
PHASES = ("prepare", "table", "read", "read_whole", "write", "reread", "record")


class Phases:
    """Seconds spent per phase of a refresh, each second counted once: a phase timed inside
    another (the Delta table's look, ``table``, inside ``prepare``) is taken out of the outer one."""

    def __init__(self, **seconds: float):
        self.seconds = dict(seconds)
        self._inner: list[float] = []  # per open phase, the seconds its inner phases took

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        self._inner.append(0.0)
        try:
            yield
        finally:
            spent = time.monotonic() - started
            self.seconds[name] = self.seconds.get(name, 0.0) + spent - self._inner.pop()
            if self._inner:
                self._inner[-1] += spent

    def rest(self, name: str, seconds: float) -> Phases:
        """Count as ``name`` what of ``seconds`` (all the refresh took so far) no phase counted."""
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds - sum(self.seconds.values()))
        return self

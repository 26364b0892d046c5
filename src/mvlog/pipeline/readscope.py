"""What a fast refresh reads from PostgreSQL: its changed keys' rows, or its view's whole query.

A fast refresh reads the rows of the keys its window changed: the affected keys found from the
logs (and the key maps), the view's query recomputed for them. Where a change reaches most of a
view — a re-categorised item moves its category's average and so every state's count (TPC-DS
q06), an inventory change reaches most of q72's weeks — that read recomputes the whole query and
pays for finding the keys besides: at TPC-DS scale 1, q06's read took 71.2 s where its complete
refresh read and wrote the whole query in 4.4 s, q72's 102.2 s against 21.7 s, q59's 32.9 s
against 4.7 s (BENCHMARKS.md, session 65's run). A complete refresh is no way out: it rebuilds the
view's state too (q06's 118.7 s, q72's 86.6 s).

So a fast refresh may read the whole query instead (:func:`whole_read`), when what each cost says
so: its keyed reads (phase ``read``, the latest ``SAMPLES``, medians) against the whole query's
reads — its earlier whole reads (``read_whole``), else its complete refreshes' read and write
(their ``write`` phase: the whole query read and written, more than a read alone), the build's
while no other complete refresh was measured. Its rows are then compared with the view's table by
one MERGE that deletes the table's rows the query no longer has (:meth:`Merger.merge`'s ``whole``),
so unchanged rows stay untouched and a change feed sees only what changed; the state (key maps,
pieces) is brought to the stamp from the logs as after a keyed read. After ``SAMPLES`` whole reads
in a row the keyed read runs once more, so that a window that shrank is measured again (and that
one read, not the older ones, then stands for the keyed read). A view of
more than ``WHOLE_MAX_ROWS`` rows always reads its keys: its whole read is one JDBC query where a
complete refresh reads in partitions, and its MERGE would compare every row.

Pure: the refresh history is read by the catalog (:meth:`RefreshHistory.measured`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from statistics import median

from mvlog.model import Measured, RefreshMethod

SAMPLES = 4  # the latest refreshes of each kind that measure it
WHOLE_MAX_ROWS = 1_000_000  # views above this many rows always read their changed keys' rows
READ, READ_WHOLE, WRITE = "read", "read_whole", "write"  # the phases measured (mvlog.pipeline.results.PHASES)


def whole_read(measured: Sequence[Measured], row_count: int | None) -> str | None:
    """Why the next fast refresh reads its view's whole query (None: it reads its changed keys'
    rows), from the view's latest refreshes (``measured``, newest first) and its rows now."""
    if row_count is None or row_count > WHOLE_MAX_ROWS:
        return None
    fast = [m for m in measured if m.method is RefreshMethod.FAST and (READ in m.phases or READ_WHOLE in m.phases)]
    if len(fast) >= SAMPLES and all(READ_WHOLE in m.phases for m in fast[:SAMPLES]):
        return None  # measure the keyed read again
    # The keyed reads since the latest whole read (one measured again), else all of them; the
    # first after the build (cold) only while it is the only one.
    since_whole = list(itertools.takewhile(lambda m: READ_WHOLE not in m.phases, fast))
    reads = [m for m in (since_whole or fast) if READ in m.phases]
    keyed = _latest([m.phases[READ] for m in reads if not m.first_after_build] or [m.phases[READ] for m in reads])
    whole, source = _whole(measured)
    if keyed is None or whole is None or whole >= keyed:
        return None
    return f"its whole query read ({whole:.1f} s, {source}) costs less than its changed keys' rows ({keyed:.1f} s)"


def _whole(measured: Sequence[Measured]) -> tuple[float | None, str]:
    """The seconds of a whole read, and what they rest on: the view's whole reads, else its
    complete refreshes' reads and writes (the build's while it is the only one)."""
    reads = [m.phases[READ_WHOLE] for m in measured if READ_WHOLE in m.phases]
    if reads:
        return _latest(reads), f"its latest {_count(reads, 'whole read', 'whole reads')}"
    complete = [m for m in measured if m.method is RefreshMethod.COMPLETE and WRITE in m.phases]
    later = [m.phases[WRITE] for m in complete if not m.build]
    if later:
        return _latest(later), f"its latest {_count(later, 'complete refresh', 'complete refreshes')}, read and written"
    built = [m.phases[WRITE] for m in complete if m.build]
    return _latest(built), "its build, read and written"


def _latest(seconds: list[float]) -> float | None:
    return median(seconds[:SAMPLES]) if seconds else None


def _count(seconds: list[float], one: str, many: str) -> str:
    n = min(len(seconds), SAMPLES)
    return one if n == 1 else f"{n} {many}"

"""The capture contract, over every capture kind, without Spark (#48).

What a refresh relies on, whoever fills the logs: a stamp S taken at a snapshot gives, for a
consumer at the previous stamp, a window that holds exactly the keys changed by the transactions
S sees and the previous stamp did not: none missing, none from an earlier window again. Under
logical capture one more kind of key may be there: that of a transaction that committed but
that S does not see yet (its rows written early by a running capture; the key is re-read at S,
and again by the next window: harmless). A TRUNCATE that S sees is reported (the refresh goes
complete). A transaction that commits while the stamp is being taken belongs to this window or
to the next, never to neither, and one held open across stamps to the first that sees it.

Hypothesis draws the writes: inserts, updates, primary-key updates (across partitions too),
deletes, TRUNCATEs of a table or of one partition, a partition detached and attached again,
multi-statement and rolled-back transactions, one held open across stamps, one that commits at
a random moment during a stamp, and (logical capture, no capture beside) a capture pass that
dies as it commits. The examples are random, so they differ between runs
(``derandomize=False``); a failure prints the example and its seed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from mvlog.postgres.capture import CAPTURE_KINDS
from mvlog.postgres.capture.decoding import Decoding
from mvlog.sql.generate.changes import changed_keys_sql
from mvlog.sql.parse.sqltree import DIALECT
from tests.conftest import examples, project_maker

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE t (id int PRIMARY KEY, v int);
CREATE TABLE p (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
CREATE TABLE p_lo PARTITION OF p FOR VALUES FROM (MINVALUE) TO (7);
CREATE TABLE p_hi PARTITION OF p DEFAULT;
"""
TABLES = ("t", "p")
KEYS = st.integers(1, 12)  # the writer's keys; a racing transaction's 100..107, a held one's 200..207: no lock waits
RACING_KEYS = st.integers(100, 107)
HELD_KEYS = st.integers(200, 207)
STAMP_WAIT = 20.0  # seconds a stamp waits for the capture (a capture that hangs fails the example)


def writes(keys: st.SearchStrategy[int], truncate: bool) -> st.SearchStrategy[tuple]:
    table = st.sampled_from(TABLES)
    kinds = [
        st.tuples(st.just("insert"), table, keys, st.integers(0, 9)),
        st.tuples(st.just("update"), table, keys, st.integers(0, 9)),
        st.tuples(st.just("rekey"), table, keys, keys),
        st.tuples(st.just("delete"), table, keys),
    ]
    if truncate:  # and the other statements that take the table's lock
        kinds.append(st.tuples(st.just("truncate"), st.sampled_from(["t", "p", "p_lo"])))
        kinds.append(st.tuples(st.just("reattach"), st.just("p")))
    return st.one_of(*kinds)


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("txn"), st.lists(writes(KEYS, truncate=False), min_size=1, max_size=4), st.booleans()),
        st.tuples(st.just("txn"), st.lists(writes(KEYS, truncate=True), min_size=1, max_size=2), st.just(True)),
        st.tuples(st.just("stamp"), st.lists(writes(RACING_KEYS, truncate=False), max_size=3),
                  st.floats(0, 0.15)),
        st.tuples(st.just("hold"), st.lists(writes(HELD_KEYS, truncate=False), min_size=1, max_size=2)),
        st.tuples(st.just("release")),
        st.tuples(st.just("crash")),
    ),
    min_size=3, max_size=14,
)


@dataclass
class Txn:
    """A committed transaction: its xid, the keys it touched and the tables it truncated."""

    xid: str
    keys: dict[str, set[int]] = field(default_factory=dict)
    truncated: set[str] = field(default_factory=set)


def run_write(cur, op: tuple, txn: Txn) -> None:
    """Run one write, and note in ``txn`` what it touched (from RETURNING: no model of the rows)."""
    kind, table = op[0], op[1]
    if kind == "truncate":
        cur.execute(f"TRUNCATE {table}")
        txn.truncated.add("p" if table.startswith("p") else table)
        return
    if kind == "reattach":  # every key of the partition leaves the table and comes back
        cur.execute("SELECT id FROM p_lo")
        txn.keys.setdefault("p", set()).update(row[0] for row in cur.fetchall())
        cur.execute("ALTER TABLE p DETACH PARTITION p_lo")
        cur.execute("ALTER TABLE p ATTACH PARTITION p_lo FOR VALUES FROM (MINVALUE) TO (7)")
        return
    if kind == "insert":
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s) ON CONFLICT (id) DO NOTHING RETURNING id", (op[2], op[3]))
    elif kind == "update":
        cur.execute(f"UPDATE {table} SET v = %s WHERE id = %s RETURNING id", (op[3], op[2]))
    elif kind == "rekey":
        cur.execute(f"UPDATE {table} SET id = %s WHERE id = %s AND NOT EXISTS (SELECT FROM {table} WHERE id = %s) "
                    f"RETURNING id", (op[3], op[2], op[3]))
        if cur.fetchall():
            txn.keys.setdefault(table, set()).update({op[2], op[3]})
        return
    else:
        cur.execute(f"DELETE FROM {table} WHERE id = %s RETURNING id", (op[2],))
    txn.keys.setdefault(table, set()).update(row[0] for row in cur.fetchall())


def xid_of(cur) -> str:
    cur.execute("SELECT pg_current_xact_id()::text")
    return cur.fetchone()[0]


@pytest.fixture(params=[*CAPTURE_KINDS, "logical+capture", "trigger@18", "logical+capture@18"])
def captured(request, tmp_path, monkeypatch):
    """A database, a project whose two tables (one partitioned) are captured by the kind under
    test, and its logs; ``+capture``: with a capture running beside, writing while stamps are
    taken (each stamp pauses after its snapshot, when a racing commit is not in it but the
    capture may write its keys); ``@18``: on PostgreSQL 18."""
    variant, _, version = request.param.partition("@")
    kind, _, beside = variant.partition("+")
    db = request.getfixturevalue("db18" if version else "db")
    db.execute(SCHEMA)
    with project_maker(db, tmp_path, request) as make:
        project = make([{"table": t, "capture": kind} for t in TABLES], [])
        project.apply()
        logs = {log.table_name: log for log in project.logs.registered().values()}
        if not beside:
            yield db, project, logs, kind
            return
        yield from with_capture_beside(db, project, logs, variant, monkeypatch)


def with_capture_beside(db, project, logs, variant: str, monkeypatch):
    monkeypatch.setenv("MVLOG_PAUSE", "after_snapshot:0.08")
    stop = threading.Event()
    capture = threading.Thread(target=lambda: list(project.capture(interval=0.005, stop=stop.is_set)))
    capture.start()
    try:
        yield db, project, logs, variant
    finally:
        stop.set()
        capture.join()


class Contract:
    """Runs the drawn steps, stamping as told, and checks each stamp's windows against what committed."""

    def __init__(self, project, db, logs, kind: str):
        self.project, self.db, self.logs, self.kind = project, db, logs, kind
        self.unseen: list[Txn] = []  # committed, not visible to any stamp yet
        self.held: tuple[object, Txn] | None = None  # a transaction open across steps
        self.after = None
        self.after = self.stamp([])[0]  # a baseline: what earlier examples left is windowed here

    def run(self, steps) -> None:
        conn = self.db.connect()
        try:
            for step in steps:
                if step[0] == "txn":
                    if self.held and any(op[0] in ("truncate", "reattach") for op in step[1]):
                        continue  # it would wait for the held transaction's locks
                    self.transaction(conn, step[1], commit=step[2])
                elif step[0] == "hold":
                    self.hold(step[1])
                elif step[0] == "release":
                    self.release()
                elif step[0] == "crash":
                    self.crash()
                else:
                    self.check(step[1], step[2])
            self.release()
            self.check([], 0.0)
            self.check([], 0.0)  # a racing transaction of the last stamp may be visible only now
            assert not self.unseen, "a committed transaction was seen by no stamp"
        finally:
            conn.close()
            if self.held:
                self.held[0].close()

    def transaction(self, conn, ops, commit: bool) -> None:
        with conn.cursor() as cur:
            txn = Txn(xid_of(cur))
            for op in ops:
                run_write(cur, op, txn)
        if commit:
            conn.commit()
            self.unseen.append(txn)
        else:
            conn.rollback()

    def hold(self, ops) -> None:
        """Open a transaction (if none is) that stays open over the next stamps."""
        if self.held is None:
            conn = self.db.connect()
            with conn.cursor() as cur:
                txn = Txn(xid_of(cur))
                for op in ops:
                    run_write(cur, op, txn)
            self.held = (conn, txn)

    def release(self) -> None:
        if self.held is not None:
            conn, txn = self.held
            conn.commit()
            conn.close()
            self.held = None
            self.unseen.append(txn)

    def crash(self) -> None:
        """A capture pass that dies as it commits its rows (logical capture, none running beside):
        the next pass must write them again, so the slot must not have passed them."""
        if self.kind != "logical":
            return
        decoding = self.project.logs.decoding
        original = Decoding.record

        def dying(self, writer, *args, **kwargs):
            return original(self, DyingAtCommit(writer), *args, **kwargs)
        Decoding.record = dying  # type: ignore[method-assign]
        try:
            with contextlib.suppress(CaptureDied):
                decoding.catch_up()
        finally:
            Decoding.record = original  # type: ignore[method-assign]

    def check(self, racing_ops, delay: float) -> None:
        """A stamp while a transaction (``racing_ops``) commits ``delay`` seconds after it starts;
        its windows against the transactions the stamp's snapshot sees."""
        racer = None
        if racing_ops:
            conn = self.db.connect()
            with conn.cursor() as cur:
                txn = Txn(xid_of(cur))
                for op in racing_ops:
                    run_write(cur, op, txn)

            def commit() -> None:
                time.sleep(delay)
                conn.commit()
                conn.close()
            racer = threading.Thread(target=commit)
            racer.start()
        try:
            stamp, windows, replaced, visible = self.stamp([t.xid for t in self.unseen] + ([txn.xid] if racer else []))
        finally:
            if racer:
                racer.join()
                self.unseen.append(txn)
        seen = [t for t in self.unseen if visible[t.xid]]
        self.unseen = [t for t in self.unseen if not visible[t.xid]]
        for table in TABLES:
            truncated = any(table in t.truncated for t in seen)
            if truncated:
                assert replaced[table], f"{table}: a TRUNCATE the stamp sees is not reported"
                continue  # the refresh goes complete: its window's keys do not matter
            if not any(table in t.truncated for t in self.unseen):
                assert not replaced[table], f"{table}: reported replaced, and nothing truncated it"
            want = set().union(*(t.keys.get(table, set()) for t in seen))
            assert want <= windows[table], f"{table}: keys missing from the window: {want - windows[table]}"
            early = set().union(*(t.keys.get(table, set()) for t in self.unseen)) if self.kind != "trigger" else set()
            extra = windows[table] - want - early
            assert not extra, (f"{table}: keys in the window that no transaction new to the stamp touched: {extra}; "
                               f"{self.rows_of(table, extra)}; new: {[t.xid for t in seen]}, "
                               f"unseen: {[t.xid for t in self.unseen]}")
        self.after = stamp

    def rows_of(self, table: str, keys: set[int]) -> list[tuple]:
        """The log rows of ``keys`` (for a failure's message)."""
        return self.db.execute(f'SELECT id, "dmltype$$", "xid$$"::text, "lsn$$"::text, "snaptime$$"::text '
                               f'FROM mvlog."{self.logs[table].log_name}" WHERE id = ANY(%s)', (sorted(keys),))

    def stamp(self, xids: list[str]):
        """Stamp both logs; each log's window for a consumer at the last stamp, whether it reports a
        TRUNCATE, and which of ``xids`` the stamp's snapshot sees."""
        after = self.after
        logs = list(self.logs.values())
        with self.project.logs.stamp(logs, capture_wait=STAMP_WAIT) as stamped:
            windows = {table: {row[0] for row in stamped.query(changed_keys_sql(log, after).sql(dialect=DIALECT))}
                       for table, log in self.logs.items()}
            replaced = {table: stamped.replaced_since(log, after) is not None for table, log in self.logs.items()}
            visible = {xid: bool(stamped.query("SELECT pg_visible_in_snapshot(%s::xid8, pg_current_snapshot())",
                                               (xid,))[0][0]) for xid in xids}
            return stamped.time, windows, replaced, visible


class CaptureDied(Exception):
    """A capture pass killed as it commits."""


class DyingAtCommit:
    """A connection whose commit fails: everything else goes to the real one."""

    def __init__(self, conn):
        self._conn = conn

    def commit(self) -> None:
        raise CaptureDied

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


# No shrinking: an example leaves the database as it ends, so a smaller one after a failure would
# not start where the failing one did; the failure is reported as drawn, with its seed.
@settings(max_examples=examples(15), derandomize=False, deadline=None,
          phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=STEPS)
def test_every_committed_change_is_in_the_window_of_the_stamp_that_sees_it(captured, steps):
    db, project, logs, kind = captured
    Contract(project, db, logs, kind).run(steps)

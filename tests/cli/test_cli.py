"""The mvlog command as a user runs it: exit codes, one-line errors, no tracebacks, no secrets."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import SUBPROCESS_SPARK

from mvlog.config import load_config
from mvlog.postgres.pgtemp import free_port
from mvlog.project import Project

pytestmark = pytest.mark.integration


def run(config: Path, *args: str, timeout: int = 300, quiet: bool = True, **env_vars: str
        ) -> subprocess.CompletedProcess:
    env = {**os.environ, "TZ": "UTC", **env_vars}
    env.pop("MVLOG_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "mvlog", *(["-q"] if quiet else []), "-c", str(config), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def write_config(tmp_path: Path, dsn: str, logs: list[str], views: list[dict], warehouse: str | None = None,
                 remote: str | None = None) -> Path:
    """A config; ``remote``: every command runs on that Spark Connect server (no JVM of its own to start)."""
    path = tmp_path / "mvlog.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"dsn": dsn}, "warehouse": warehouse or str(tmp_path / "wh"),
        "spark": {"remote": remote} if remote else SUBPROCESS_SPARK,
        "logs": [{"table": t} for t in logs], "views": views,
    }, sort_keys=False))
    return path


def assert_one_line_error(result: subprocess.CompletedProcess, code: int, *fragments: str,
                          secret: str = "pg-secret-4711"):
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output
    assert secret not in output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def mvlog_installed(db) -> bool:
    return db.execute("SELECT to_regnamespace('mvlog') IS NOT NULL")[0][0]


def test_malformed_yaml(tmp_path):
    path = tmp_path / "mvlog.yaml"
    path.write_text("source:\n  dsn: 'unterminated\nwarehouse: x\n")
    assert_one_line_error(run(path, "apply"), 2, "malformed YAML")


def test_table_without_primary_key_creates_nothing(db, tmp_path):
    db.execute("CREATE TABLE has_pk (id int PRIMARY KEY); CREATE TABLE no_pk (a int, b text)")
    config = write_config(tmp_path, db.dsn, ["has_pk", "no_pk"], [])
    assert_one_line_error(run(config, "apply"), 2, "logs[1]", "public.no_pk has no primary key")
    assert not mvlog_installed(db)
    assert db.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'has_pk'::regclass")[0][0] == 0


def test_unknown_table_and_unknown_column(db, tmp_path):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int)")
    config = write_config(tmp_path, db.dsn, ["t"], [{"name": "v", "query": "SELECT id FROM nope"}])
    assert_one_line_error(run(config, "apply"), 2, "views[0] (v)", "table nope does not exist")
    config = write_config(tmp_path, db.dsn, ["t"], [{"name": "v", "query": "SELECT id, missing FROM t"}])
    assert_one_line_error(run(config, "apply"), 2, "views[0] (v)", 'column "missing" does not exist')
    db.execute("CREATE TABLE u (id int PRIMARY KEY)")
    config = write_config(tmp_path, db.dsn, ["t"], [{"name": "v", "query": "SELECT t.id FROM t JOIN u ON u.id = t.a"}])
    assert_one_line_error(run(config, "apply"), 2, "table public.u has no materialized view log")
    assert not mvlog_installed(db)


def test_fast_on_unsupported_sql_is_rejected(db, tmp_path):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int)")
    config = write_config(tmp_path, db.dsn, ["t"], [{"name": "v", "refresh": "fast",
                                                      "query": "SELECT id, a FROM t LIMIT 5"}])
    assert_one_line_error(run(config, "apply"), 2, "refresh: fast is impossible", "LIMIT")
    assert not mvlog_installed(db)


def test_unreachable_database(tmp_path):
    config = write_config(tmp_path, f"postgresql://app:pg-secret-4711@127.0.0.1:{free_port()}/shop", [], [])
    assert_one_line_error(run(config, "apply"), 1, "cannot connect to PostgreSQL", "Connection refused")


def test_a_dsn_without_a_host_is_refused_before_connecting(tmp_path, monkeypatch):
    monkeypatch.delenv("PGHOST", raising=False)
    config = write_config(tmp_path, "postgresql://app:pg-secret-4711@/postgres", [], [])
    for command in ("apply", "status"):
        assert_one_line_error(run(config, command), 2, "source.dsn must name a TCP host for Spark's JDBC reads")


def test_wrong_password(pg, tmp_path):
    config = write_config(tmp_path, pg.dsn(password="wrong-pw-0815"), [], [])
    assert_one_line_error(run(config, "status"), 1, "password authentication failed", secret="wrong-pw-0815")


def test_status_before_apply_and_unknown_view(db, tmp_path):
    config = write_config(tmp_path, db.dsn, [], [])
    assert_one_line_error(run(config, "status"), 2, "run 'mvlog apply' first")
    assert_one_line_error(run(config, "refresh", "nope"), 2, "no view named 'nope'")


def test_unwritable_warehouse_applies_nothing(db, tmp_path):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int)")
    config = write_config(tmp_path, db.dsn, ["t"], [{"name": "v", "query": "SELECT * FROM t"}],
                          warehouse="/proc/mvlog-warehouse")
    assert_one_line_error(run(config, "apply"), 1, "the warehouse /proc/mvlog-warehouse is not writable")
    assert not mvlog_installed(db)


def test_apply_refresh_status_json(db, tmp_path, connect_engine):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t SELECT g, g FROM generate_series(1, 10) g")
    config = write_config(tmp_path, db.dsn, ["t"], [
        {"name": "evens", "refresh": "fast", "query": "SELECT id, a FROM t WHERE a % 2 = 0"},
        {"name": "top", "query": "SELECT id FROM t LIMIT 3"},  # complete-only: no ORDER BY
    ], remote=connect_engine.remote)
    result = run(config, "apply")
    assert result.returncode == 0, result.stderr
    assert "log created on public.t" in result.stdout and "view evens registered" in result.stdout
    db.execute("UPDATE t SET a = a + 1 WHERE id <= 4; DELETE FROM t WHERE id = 10")

    status = json.loads(run(config, "status", "--json").stdout)
    views = {v["name"]: v for v in status["views"]}
    assert views["evens"]["staleness"] == "stale" and views["evens"]["pending_log_rows"] == 5
    assert views["top"]["fast_refresh"] is False and "LIMIT" in views["top"]["why_not_fast"]
    assert status["logs"][0]["table"] == "public.t" and status["logs"][0]["rows"] == 5
    assert status["logs"][0]["oldest_unconsumed_change"] is not None

    result = run(config, "refresh", "--json")
    assert result.returncode == 0, result.stderr
    results = {r["view"]: r for r in json.loads(result.stdout)}
    assert results["evens"]["method"] == "fast" and results["evens"]["keys_read"] == 5
    assert (results["evens"]["rows_inserted"], results["evens"]["rows_deleted"]) == (2, 3)  # 1,3 in; 2,4,10 out
    assert results["evens"]["row_count"] == 4
    assert results["top"]["method"] == "complete"

    status = json.loads(run(config, "status", "--json").stdout)
    assert {v["name"]: v["staleness"] for v in status["views"]} == {"evens": "fresh", "top": "fresh"}
    assert status["logs"][0]["rows"] == 0  # purged after both views consumed
    human = run(config, "status")
    assert human.returncode == 0 and "evens" in human.stdout and "fresh" in human.stdout

    result = run(config, "optimize", "--vacuum")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    # The MERGE (no deletion vectors) rewrote the build's file; ZORDER sorts even one file.
    assert re.match(r"[1-9]\d* files? compacted into 1, vacuumed \(", lines["evens"]) and "top" in lines, result.stdout
    assert_one_line_error(run(config, "optimize", "nosuch"), 2, "there is no view named 'nosuch'")


def test_explain_each_class_and_unsupported_shapes(db, tmp_path):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, g int, x numeric(8,2), d date); "
               "CREATE TABLE u (id int PRIMARY KEY, t_id int, y int); CREATE TABLE nolog (id int PRIMARY KEY)")
    views = {
        "simple": ("SELECT id, x * 2 AS x2 FROM t WHERE g > 0", True, "primary key"),
        "joined": ("SELECT t.id, u.y FROM t JOIN u ON u.t_id = t.id", True, "key map"),
        "agg": ("SELECT g, min(x), max(x) FROM t GROUP BY g HAVING count(*) > 1", True, "MIN and MAX stay exact"),
        "outer": ("SELECT t.id, u.y FROM t LEFT JOIN u ON u.t_id = t.id", True, "(the root, present in every row)"),
        "semi": ("SELECT id FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.t_id = t.id)", True,
                 "rows of public.u count for the rows their subquery's condition ties them to"),
        "cte": ("WITH s AS (SELECT g, sum(x) AS sx FROM t GROUP BY g) SELECT g, sx FROM s", True, "groups"),
        "recursive": ("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
                      "SELECT t.id FROM t JOIN r ON r.n = t.g", False, "recursive CTEs"),
        "full": ("SELECT t.id, u.y FROM t FULL JOIN u ON u.t_id = t.id", True,
                 "the rows of public.u without a partner"),
        "full_agg": ("SELECT u.y, count(t.id) FROM t FULL JOIN u ON u.t_id = t.id GROUP BY u.y", True,
                     "either part of the FULL JOIN"),
        "full_total": ("SELECT count(t.id) AS n FROM t FULL JOIN u ON u.t_id = t.id", False,
                       "a global aggregate over a FULL JOIN is not incrementally maintainable"),
        "windowed": ("SELECT id, rank() OVER (ORDER BY x) AS r FROM t", False,
                     "window functions without a PARTITION BY that they all share"),
        "partitioned": ("SELECT id, rank() OVER (PARTITION BY g ORDER BY x, id) AS r FROM t", True,
                        "of changed rows, before and after the change, are recomputed whole"),
        "limited": ("SELECT t.* FROM t JOIN u ON u.t_id = t.id ORDER BY y LIMIT 10", False,
                    "a top-N view (ORDER BY … LIMIT) orders by its output columns"),
        "clock": ("SELECT id FROM t WHERE d > now()", False, "non-deterministic function"),
        "unlogged": ("SELECT t.id FROM t JOIN nolog n ON n.id = t.id", False,
                     "table public.nolog has no materialized view log"),
    }
    config = write_config(tmp_path, db.dsn, ["t", "u"], [{"name": n, "query": q} for n, (q, _, _) in views.items()])
    # apply refuses the view over the unlogged table; explain still explains it
    assert_one_line_error(run(config, "apply"), 2, "table public.nolog has no materialized view log")
    # Each view's verdict through the API the command prints (one process, not one per view); the
    # command itself below, as JSON and as text.
    with Project(load_config(config)) as project:
        explained = {name: project.explain(name).to_json() for name in views}
    assert json.loads(run(config, "explain", "agg", "--json").stdout) == json.loads(json.dumps(explained["agg"]))
    for name, (_, fast, reason) in views.items():
        caps = {c["name"]: c for c in explained[name]["capabilities"]}
        assert caps["REFRESH_COMPLETE"]["possible"] is True
        for cap in ("REFRESH_FAST", "REFRESH_FAST_AFTER_INSERT", "REFRESH_FAST_AFTER_ANY_DML"):
            assert caps[cap]["possible"] is fast, (name, cap)
        assert reason in caps["REFRESH_FAST"]["reason"] + caps["REFRESH_FAST_AFTER_ANY_DML"]["reason"], (name, caps)
    assert explained["agg"]["class"] == "aggregate"
    human = run(config, "explain", "full_total")
    assert human.returncode == 0 and "REFRESH_FAST" in human.stdout and "over a FULL JOIN" in human.stdout


def test_drop_views_and_logs(db, tmp_path):  # a Spark of its own: Connect cannot delete a view's data
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t VALUES (1, 1)")
    config = write_config(tmp_path, db.dsn, ["t"], [{"name": "v1", "query": "SELECT * FROM t"},
                                                    {"name": "v2", "query": "SELECT id FROM t"}])
    # Started from a process that used Spark Connect (a notebook's kernel): pyspark's mark of a
    # Connect process, inherited, must not stop the command's own Spark from starting.
    applied = run(config, "apply", quiet=False, SPARK_CONNECT_MODE_ENABLED="1")  # progress as plain lines
    assert applied.returncode == 0, applied.stderr
    # Views are built concurrently: progress counts them in the order they finish.
    built = re.findall(r"… building ([12])/2: (v[12]) \(complete\)", applied.stderr)
    assert sorted(n for n, _ in built) == ["1", "2"] and sorted(v for _, v in built) == ["v1", "v2"], applied.stderr
    assert_one_line_error(run(config, "drop", "--log", "t"), 2, "views v1, v2 depend on the log of public.t",
                          "--cascade")
    result = run(config, "drop", "v1", "--delete-data")
    assert result.returncode == 0 and "view v1 dropped" in result.stdout
    assert not (tmp_path / "wh" / "v1").exists() and (tmp_path / "wh" / "v2").exists()
    result = run(config, "drop", "--log", "public.t", "--cascade")
    assert result.returncode == 0, result.stderr
    assert "view v2 dropped" in result.stdout and "log on public.t dropped" in result.stdout
    assert db.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 't'::regclass")[0][0] == 0
    assert db.execute("SELECT count(*) FROM mvlog.logs")[0][0] == 0
    assert db.execute("SELECT count(*) FROM pg_tables "
                      "WHERE schemaname = 'mvlog' AND tablename LIKE 'mlog$%'")[0][0] == 0
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE 'mlog$%'")[0][0] == 0
    db.execute("INSERT INTO t VALUES (2, 2)")  # writes work without the log
    assert_one_line_error(run(config, "drop", "nope"), 2, "view nope is not registered")


def test_a_failed_refresh_exits_1_with_one_line(db, tmp_path, connect_engine):
    db.execute("CREATE TABLE t (id int PRIMARY KEY, a int); INSERT INTO t VALUES (1, 1)")
    config = write_config(tmp_path, db.dsn, ["t"], [{"name": "v", "refresh": "fast", "query": "SELECT * FROM t"}],
                          remote=connect_engine.remote)
    assert run(config, "apply").returncode == 0
    db.execute("TRUNCATE t")
    assert_one_line_error(run(config, "refresh"), 1,
                          "refresh of view v failed: view v cannot be fast-refreshed: table public.t was truncated",
                          "run 'mvlog refresh --complete v'")
    assert run(config, "refresh", "--complete", "v").returncode == 0


def test_debug_prints_a_failed_refresh_s_traceback_and_its_cause(tmp_path, monkeypatch, capsys):
    """--debug: each failed view's traceback, with the error mvlog's sentence was raised from, then the line."""
    from mvlog.commands.cli import main
    from mvlog.errors import SourceError
    from mvlog.pipeline.results import RefreshResult
    from mvlog.project import Project

    def failing_refresh(self, *args, **kwargs):
        try:
            try:
                raise ValueError("the driver's own words")
            except ValueError:
                raise SourceError("reading from PostgreSQL failed") from None
        except SourceError as exc:
            return [RefreshResult.failed("v", exc, 0.0)]

    monkeypatch.setattr(Project, "refresh", failing_refresh)
    config = write_config(tmp_path, "postgresql://u@127.0.0.1:1/db", ["t"], [{"name": "v", "query": "SELECT * FROM t"}])
    assert main(["-q", "-c", str(config), "refresh"]) == 1
    plain = capsys.readouterr().err
    assert "Traceback" not in plain and plain.strip() == ("Error: refresh of view v failed: "
                                                          "reading from PostgreSQL failed")
    assert main(["-q", "-c", str(config), "--debug", "refresh"]) == 1
    debug = capsys.readouterr().err
    assert "Traceback" in debug and "the driver's own words" in debug and "reported by mvlog as" in debug, debug
    assert debug.strip().splitlines()[-1] == "Error: refresh of view v failed: reading from PostgreSQL failed"

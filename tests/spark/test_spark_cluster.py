"""Nothing relies on local mode: `mvlog apply`, `mvlog engine` and `mvlog refresh` against a real
standalone Spark cluster.

A master and one worker are started from the pyspark installation (``bin/spark-class``) on
free ports of 127.0.0.1, with their logs and the worker's work directory under a temporary
directory. The CLI runs in a subprocess with ``spark.master: spark://127.0.0.1:<port>`` (the
refresh on ``mvlog engine``, whose Spark runs on the cluster); the
executors get the Delta and PostgreSQL JDBC jars through ``spark.jars.packages`` (resolved by
the driver, served to the executors), read PostgreSQL through JDBC and write the Delta tables
in a warehouse both reach (the same machine: a local absolute path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest
import yaml
from conftest import assert_view_matches
from refresh.test_refresh_faults import SCHEMA, VIEWS  # the same three views, simple, join and aggregate

from mvlog.config import load_config
from mvlog.postgres.pgtemp import free_port
from mvlog.project import Project

# deep: a deployment mode; the main tier refreshes on local[2] and over Spark Connect (test_connect_paths).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.deep]

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


class StandaloneCluster:
    """A Spark standalone master and one worker, as two child processes of this test."""

    def __init__(self, root: Path):
        self.root = root
        self.port, self.webui_port = free_port(), free_port()
        self.worker_port, self.worker_webui_port = free_port(), free_port()
        self.work_dir = root / "work"
        self.logs = root / "logs"
        self.procs: list[subprocess.Popen] = []
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.json_url = f"http://127.0.0.1:{self.webui_port}/json/"

    def _env(self) -> dict[str, str]:
        local_dirs = self.root / "local"
        local_dirs.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.logs),
            "SPARK_WORKER_DIR": str(self.work_dir),
            "SPARK_LOCAL_DIRS": str(local_dirs),  # executors' scratch space (shuffle, blocks)
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_CONF_DIR": str(self.root / "conf"),  # empty: no site defaults leak in
            "PYSPARK_PYTHON": sys.executable,
        }

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.root / "conf").mkdir(exist_ok=True)
        with open(self.logs / f"{name}.out", "ab") as out:
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=self._env(),
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.root, start_new_session=True)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.out"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def start(self, timeout: float = 120) -> None:
        master = self._spawn("master", "org.apache.spark.deploy.master.Master",
                             "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port))
        self._wait(lambda: self.state() is not None, master, "master", timeout)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        worker = self._spawn("worker", "org.apache.spark.deploy.worker.Worker", self.master_url,
                             "--host", "127.0.0.1", "--port", str(self.worker_port),
                             "--webui-port", str(self.worker_webui_port),
                             "--cores", "1", "--memory", "1g", "--work-dir", str(self.work_dir))
        self._wait(lambda: any(w.get("state") == "ALIVE" for w in (self.state() or {}).get("workers", [])),
                   worker, "worker", timeout)

    def _wait(self, ready, proc: subprocess.Popen, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the Spark {name} exited with {proc.returncode}:\n{self.log(name)}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Spark {name} was not ready after {timeout} s:\n{self.log(name)}")

    def state(self) -> dict | None:
        """The master's JSON status, or None while it is not answering."""
        try:
            return _get_json(self.json_url)
        except OSError:
            return None

    def stop(self) -> None:
        """Stop the worker, then the master: SIGTERM, then SIGKILL; only the processes started here."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
        self.procs.clear()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _mvlog(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TZ": "UTC", "PYSPARK_PYTHON": sys.executable,
           "MVLOG_SPARK_LOG": str(config.parent / "spark-driver.log"), **(env or {})}
    result = subprocess.run([sys.executable, "-m", "mvlog", "-c", str(config), *args],
                            env=env, capture_output=True, text=True, timeout=900)
    driver_log = Path(env["MVLOG_SPARK_LOG"])
    tail = driver_log.read_text(errors="replace")[-4000:] if driver_log.exists() else ""
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:], tail)
    return result


def change(db) -> None:
    """Inserts, updates (into and out of the filter, a dimension row), a primary-key update, deletes."""
    db.execute("INSERT INTO orders SELECT g, 1 + g % 20, g / 10.0, 'open' FROM generate_series(1001, 1010) g")
    db.execute("INSERT INTO customers VALUES (21, 'c21', 2)")
    db.execute("INSERT INTO orders VALUES (1011, 21, 77.70, 'open')")
    db.execute("UPDATE orders SET status = CASE status WHEN 'open' THEN 'done' ELSE 'open' END, "
               "amount = amount + 1 WHERE id % 7 = 3")
    db.execute("UPDATE customers SET region = (region + 1) % 3, name = name || '!' WHERE id IN (4, 5)")
    db.execute("UPDATE orders SET id = id + 5000 WHERE id IN (10, 11)")  # primary-key update
    db.execute("UPDATE customers SET id = 100 WHERE id = 7")  # its orders drop out of the joins
    db.execute("DELETE FROM orders WHERE id IN (12, 13, 200)")
    db.execute("DELETE FROM orders WHERE customer_id = 9")  # a whole group member set
    db.execute("DELETE FROM customers WHERE id = 9")


def change_again(db) -> None:
    """More of the same, on other keys: inserts, moves across the filter and the groups, deletes."""
    db.execute("INSERT INTO orders SELECT g, 1 + g % 20, g / 10.0, 'open' FROM generate_series(2001, 2010) g")
    db.execute("UPDATE orders SET status = 'done', amount = amount - 1 WHERE id % 11 = 5")
    db.execute("UPDATE customers SET region = (region + 2) % 3 WHERE id IN (2, 3)")
    db.execute("UPDATE orders SET id = id + 7000 WHERE id IN (20, 21)")
    db.execute("DELETE FROM orders WHERE id IN (30, 2005)")


def test_apply_and_fast_refresh_on_a_standalone_cluster(db, spark, spark_cluster, tmp_path):
    db.execute(SCHEMA)
    warehouse = tmp_path / "warehouse"
    spark_conf = {
        "spark.cores.max": "1",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "2",
        "spark.local.dir": str(tmp_path / "driver-local"),
        # The cluster listens on the loopback only: executors call the driver back there too.
        "spark.driver.host": "127.0.0.1",
        # Delta rebuilds table state in 50 tasks by default; on one executor core that is most
        # of the run time (build_session lowers it for local mode only).
        "spark.databricks.delta.snapshotPartitions": "2",
    }
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(warehouse),
        "spark": {"master": spark_cluster.master_url, "conf": spark_conf},
        "logs": [{"table": "customers"}, {"table": "orders"}], "views": VIEWS,
    }, sort_keys=False))
    apps_before = {a["id"] for a in (spark_cluster.state() or {}).get("completedapps", [])}

    started = time.monotonic()
    _mvlog(config, "-q", "apply")
    for view in VIEWS:
        assert (warehouse / view["name"] / "_delta_log").is_dir(), view["name"]

    # The fast refresh runs through `mvlog engine`: a Spark Connect server whose Spark runs on
    # the cluster (one application fewer to start than a `mvlog refresh` with a Spark of its own,
    # which runs the same refresh code as the local tests).
    engine_env = {"MVLOG_ENGINE_DIR": str(tmp_path / "engine")}
    port = free_port()
    engine = json.loads(_mvlog(config, "engine", "start", "--port", str(port), "--json", env=engine_env).stdout)
    assert engine["running"] and engine["remote"] == f"sc://127.0.0.1:{port}", engine
    try:
        assert [a["name"] for a in spark_cluster.state()["activeapps"]] == ["mvlog-engine"]
        change(db)
        change_again(db)
        refreshed = json.loads(_mvlog(config, "-q", "refresh", "--json",
                                      env={**engine_env, "SPARK_REMOTE": engine["remote"]}).stdout)
    finally:
        stopped = json.loads(_mvlog(config, "engine", "stop", "--json", env=engine_env).stdout)
    assert stopped["stopped"] and stopped["pid"] == engine["pid"]
    assert json.loads(subprocess.run([sys.executable, "-m", "mvlog", "engine", "status", "--json"],
                                     env={**os.environ, **engine_env}, capture_output=True, text=True,
                                     timeout=60).stdout) == {"running": False}
    print(f"\napply + refresh on the cluster: {time.monotonic() - started:.1f} s; refresh seconds per view: "
          + ", ".join(f"{r['view']} {r['seconds']}" for r in refreshed))
    assert [r["view"] for r in refreshed] == [v["name"] for v in VIEWS]
    assert all(r["error"] is None for r in refreshed), refreshed
    assert {r["method"] for r in refreshed} <= {"fast", "fresh"}, refreshed
    by_view = {r["view"]: r for r in refreshed}
    assert by_view["open_orders"]["rows_inserted"] >= 11 and by_view["open_orders"]["rows_deleted"] >= 3
    assert by_view["order_names"]["rows_updated"] >= 2  # the renamed customers
    assert by_view["by_region"]["rows_updated"] >= 1

    # The oracle, in this test's own local session: each Delta table equals its query in PostgreSQL.
    oracle_config = tmp_path / "oracle.yaml"
    oracle_config.write_text(yaml.safe_dump({
        "source": {"dsn": db.dsn}, "warehouse": str(warehouse),
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2"}},
        "logs": [{"table": "customers"}, {"table": "orders"}], "views": VIEWS,
    }, sort_keys=False))
    with Project(load_config(oracle_config)) as oracle:
        assert oracle.warehouse.spark is spark
        for view in VIEWS:
            assert_view_matches(oracle, view["name"])
            last = oracle.warehouse.last_commit_metadata(oracle.config.view_location(view["name"]))
            assert last and last.get("method", "fast") == "fast", (view["name"], last)
    assert db.execute("SELECT count(*) FROM mvlog.refresh_history WHERE status <> 'succeeded'")[0][0] == 0

    # The work ran on the cluster: the master completed two applications (apply; the engine,
    # which ran the refresh) that had executors, and the worker ran their executors in its work
    # directory.
    apps = [a for a in spark_cluster.state()["completedapps"] if a["id"] not in apps_before]
    assert sorted(a["name"] for a in apps) == ["mvlog", "mvlog-engine"], apps
    assert all(a["state"] == "FINISHED" for a in apps), apps
    for app in apps:
        executor_dirs = [p.parent for p in (spark_cluster.work_dir / app["id"]).glob("*/stderr")]
        assert executor_dirs, f"no executor ran for {app['id']} in {spark_cluster.work_dir}"
        assert all("CoarseGrainedExecutorBackend" in (d / "stderr").read_text(errors="replace")
                   for d in executor_dirs)
        # An executor fetches the application's jars into its directory when it runs its first
        # task: the Delta and PostgreSQL JDBC jars came from spark.jars.packages through the driver.
        fetched = {p.name for d in executor_dirs for p in d.glob("*.jar")}
        assert any("delta-spark" in name for name in fetched), (app["id"], sorted(fetched))
        assert any("postgresql" in name for name in fetched), (app["id"], sorted(fetched))

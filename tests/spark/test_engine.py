"""``mvlog engine``: state file, address, refusals (the start of a real server is covered by the
``connect_engine`` fixture of every Connect test and by the cluster test)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from mvlog.config import SparkConfig
from mvlog.errors import UsageError
from mvlog.spark import engine


@pytest.fixture
def engine_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(engine.ENGINE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    return tmp_path


def mvlog(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MVLOG_CONFIG", "SPARK_REMOTE")}
    return subprocess.run([sys.executable, "-m", "mvlog", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=cwd)


def test_status_without_an_engine_exits_3(engine_dir):
    result = mvlog("engine", "status", "--json", cwd=engine_dir)
    assert result.returncode == 3 and json.loads(result.stdout) == {"running": False}
    stopped = mvlog("engine", "stop", cwd=engine_dir)
    assert stopped.returncode == 0 and stopped.stdout.strip() == "no engine is running"


def test_a_state_file_of_a_dead_server_is_forgotten(engine_dir):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state = engine_dir / "engine.json"
    state.write_text(json.dumps({"pid": dead.pid, "host": "127.0.0.1", "port": 1, "started_at": "x",
                                 "log": "l", "master": "local[2]"}))
    assert engine.status() is None and not state.exists()


def test_the_running_engine_is_reported_with_its_url(engine_dir):
    info = engine.EngineInfo(os.getpid(), "127.0.0.1", 15123, "2026-11-23T03:27:57+00:00", "/x/engine.log", "local[2]")
    state = {k: v for k, v in info.to_json().items() if k != "remote"}
    (engine_dir / "engine.json").write_text(json.dumps(state))
    assert engine.status() == info and info.remote == "sc://127.0.0.1:15123"
    result = mvlog("engine", "status", cwd=engine_dir)
    assert result.returncode == 0
    assert "running at: sc://127.0.0.1:15123" in result.stdout and "/x/engine.log" in result.stdout


def test_the_port_comes_from_spark_remote_on_this_machine():
    assert engine.default_address(SparkConfig(remote="sc://127.0.0.1:15099")) == ("127.0.0.1", 15099)
    assert engine.default_address(SparkConfig(remote="sc://spark.example:443")) == ("127.0.0.1", 15002)
    assert engine.default_address(SparkConfig()) == ("127.0.0.1", 15002)


def test_start_refuses_a_port_in_use_and_a_connect_master(engine_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is in use"):
            engine.start(SparkConfig(), port=port)
    with pytest.raises(UsageError, match="not sc://"):
        engine.start(SparkConfig(master="sc://elsewhere:15002"))
    assert not (engine_dir / "engine.json").exists()


def test_the_server_command_carries_mvlogs_settings_and_listens_on_loopback():
    command = engine.server_command(SparkConfig(master="local[2]", conf={"spark.sql.shuffle.partitions": "3"}),
                                    "127.0.0.1", 15555)
    assert command[0].endswith("spark-submit") and command[-1].endswith("engine_driver.py")
    conf = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    assert conf["spark.plugins"] == engine.CONNECT_PLUGIN  # Spark's Connect server, in mvlog's driver
    assert conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15555"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.shuffle.partitions"] == "3" and conf["spark.scheduler.mode"] == "FAIR"
    assert "delta-spark" in command[command.index("--packages") + 1]

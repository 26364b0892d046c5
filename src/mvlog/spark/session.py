"""The SparkSession factory: Delta extension and catalog, PostgreSQL JDBC driver, YAML settings."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

from mvlog.config import SparkConfig
from mvlog.spark import engine
from mvlog.spark.remote import configured_remote, host_port, remote_address
from mvlog.spark.settings import SESSION_CONF_PREFIXES, packages_resolved_alone, session_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession


def spark_log_path() -> Path:
    """Where the Spark JVM writes its own output (Ivy resolution, JVM warnings): $MVLOG_SPARK_LOG."""
    default = Path(tempfile.gettempdir()) / f"mvlog-spark-{os.getuid()}.log"
    return Path(os.environ.get("MVLOG_SPARK_LOG") or default)


@contextlib.contextmanager
def _jvm_output_to(path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``path`` while the JVM is launched.

    The JVM inherits them for its whole life, so its chatter stays out of mvlog's
    output; Python's own stdout and stderr are restored right after the launch.
    """
    from pyspark import SparkContext

    if SparkContext._gateway is not None:  # already launched: nothing is inherited
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def remote_url(config: SparkConfig) -> str | None:
    """The Spark Connect server to use: ``spark.remote`` in mvlog.yaml, else ``$SPARK_REMOTE``,
    else the running ``mvlog engine`` (see :func:`running_engine`)."""
    return configured_remote(config) or running_engine(config)


def running_engine(config: SparkConfig) -> str | None:
    """The URL of the running ``mvlog engine`` for a configuration that sets no ``spark.master``:
    a cron job of someone who started the engine once uses it without editing mvlog.yaml. An
    explicit ``spark.master`` means a Spark of the command's own."""
    if "master" in config.model_fields_set:
        return None
    info = engine.status()
    return info.remote if info else None


# The Connect client's own loggers repeat every server error (with its JVM stack) on stderr.
CONNECT_LOGGERS = ("SQLQueryContextLogger", "pyspark.sql.connect", "py4j")


_connect_sessions: dict[str, ConnectSession] = {}  # one shared Connect session per URL in this process


def connect_session(url: str, config: SparkConfig, new: bool = False) -> SparkSession:
    """A Spark Connect session on ``url`` whose server must have Delta's SQL extension; the
    session-level settings of mvlog.yaml are applied to it. The session for ``url`` is shared
    within the process unless ``new`` asks for one of its own (own settings, own temp views).

    Typed as :class:`pyspark.sql.SparkSession`, whose API a Connect session offers too: mvlog
    speaks to both through that API only."""
    import logging
    import warnings

    from mvlog.errors import SetupError

    for name in CONNECT_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    shared = _connect_sessions.get(url)
    if shared is not None and not new and not shared.is_stopped:
        return cast("SparkSession", shared)
    with warnings.catch_warnings(), _without_ipython():
        warnings.simplefilter("ignore")  # pyspark's warning about the pandas version
        try:
            from pyspark.sql.connect.session import SparkSession as RemoteSession
        except ImportError as exc:
            raise SetupError("spark.remote needs the Spark Connect client: "
                             f"pip install 'pyspark[connect]' ({exc})") from None
    from mvlog.spark.sparksql import short_error

    where = remote_address(url)
    # The Connect client retries an unreachable server for minutes; a plain TCP connect says
    # at once whether anything listens there.
    host, port = host_port(where)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise SetupError(f"cannot reach the Spark Connect server {where}: {exc.strerror or exc} "
                         "(is it running? 'mvlog engine status')", transient=True) from None
    try:
        # create(), not getOrCreate(): that returns any earlier session, whatever its URL.
        spark = RemoteSession.builder.remote(url).create()
        _bound_retries(spark)
        current = spark.conf.getAll  # one round trip; static settings cannot be set, only matched
    except Exception as exc:
        raise SetupError(f"cannot reach the Spark Connect server {where}: {short_error(exc)}",
                         transient=True) from None
    if "DeltaSparkSessionExtension" not in (current.get("spark.sql.extensions") or ""):
        spark.stop()
        raise SetupError(f"the Spark Connect server {where} has no Delta extension "
                         "(start it with 'mvlog engine start' or with spark.sql.extensions="
                         "io.delta.sql.DeltaSparkSessionExtension)")
    settings = {k: v for k, v in session_conf(config).items() if k.startswith(SESSION_CONF_PREFIXES)}
    for key, value in settings.items():
        if current.get(key) == value:
            continue
        try:
            spark.conf.set(key, value)
        except Exception as exc:
            spark.stop()
            raise SetupError(f"the Spark Connect server {where} refuses the setting {key}: "
                             f"{short_error(exc)}") from None
    if not new:
        _connect_sessions[url] = spark
    return cast("SparkSession", spark)


@contextlib.contextmanager
def _without_ipython() -> Iterator[None]:
    """Spark Connect's client imports IPython, when it is installed, for the terminal size of a
    progress bar mvlog never shows (``pyspark.sql.connect.shell.progress``): a command's imports
    took 2.57 s with it, 2.28 s without (medians of 8 processes; BENCHMARKS.md, session 47), 19 MiB
    less. Unless IPython is loaded already (a notebook) or the client is (nothing to load), its
    import fails while the client loads — pyspark falls back to 80x25 — and works again after."""
    if "IPython" in sys.modules or "pyspark.sql.connect.session" in sys.modules:
        yield
        return
    sys.modules["IPython"] = None  # type: ignore[assignment]  # None: "import IPython" raises ImportError
    try:
        yield
    finally:
        if sys.modules.get("IPython", "") is None:
            del sys.modules["IPython"]


def _bound_retries(spark: ConnectSession) -> None:
    """Retry a failed Connect call for seconds, not the client's default ten minutes: a refresh
    that lost its server fails (transiently: the scheduler retries it) instead of hanging, and
    so does the client's cleanup at process exit."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    spark.client.set_retry_policies([DefaultPolicy(max_retries=6, initial_backoff=100, backoff_multiplier=2.0,
                                                   max_backoff=2000, max_server_retry_delay=10_000)])


def close_connect_sessions() -> None:
    """Release this process's shared Connect sessions (before their server goes away)."""
    while _connect_sessions:
        _, spark = _connect_sessions.popitem()
        with contextlib.suppress(Exception):
            spark.stop()


def new_session(spark: SparkSession, config: SparkConfig) -> SparkSession:
    """A session of its own on the same Spark as ``spark`` (own settings, temp views), for work
    that runs beside other sessions: a new session on the same server over Connect, else
    ``newSession()`` of the running SparkContext. Release it with :func:`release_session`."""
    url = remote_url(config)
    if url and is_connect(spark):
        return connect_session(url, config, new=True)
    return spark.newSession()


def release_session(session: SparkSession) -> None:
    """Release a session from :func:`new_session` (only Connect sessions hold server state;
    stopping a classic one would stop the shared SparkContext)."""
    if is_connect(session):
        session.stop()


def is_connect(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def build_session(config: SparkConfig | None = None, app_name: str = "mvlog") -> SparkSession:
    """Create (or return the running) SparkSession configured for mvlog: a Spark Connect session
    when a remote is configured, else a session of our own on ``spark.master``."""
    from pyspark.sql import SparkSession

    config = config or SparkConfig()
    url = remote_url(config)
    if url:
        return connect_session(url, config)
    builder = SparkSession.builder.master(config.master).appName(app_name)
    for key, value in session_conf(config).items():
        builder = builder.config(key, value)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with packages_resolved_alone(), _jvm_output_to(spark_log_path()):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

"""The SparkSession factory: Delta extension and catalog, PostgreSQL JDBC driver, YAML settings."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata, resources
from pathlib import Path
from urllib.parse import urlsplit

from mvlog.config import SparkConfig

POSTGRES_JDBC = "org.postgresql:postgresql:42.7.8"
SCALA_VERSION = "2.13"

# Settings every mvlog session needs; the YAML's spark.conf may override the tunables.
REQUIRED_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # PostgreSQL identifiers are case-sensitive once quoted; so are view columns.
    "spark.sql.caseSensitive": "true",
    "spark.sql.session.timeZone": "UTC",
    # mvlog's statements carry names and values from PostgreSQL: '${HOME}' is data, not a variable.
    "spark.sql.variable.substitute": "false",
    # PostgreSQL pads char(n) itself; Spark's char semantics (read-side padding, write-side length
    # checks) make Delta's SQL MERGE fail on such columns (DELTA_MERGE_RESOLVED_ATTRIBUTE_MISSING_FROM_INPUT).
    "spark.sql.legacy.charVarcharAsString": "true",
}
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "2g",
    # Column mapping lets view columns carry any PostgreSQL name (spaces, quotes, ...).
    "spark.databricks.delta.properties.defaults.columnMapping.mode": "name",
    # A MERGE that changes a few rows of a file marks them deleted instead of rewriting the file
    # (Warehouse.merge keeps clear of the one MERGE shape Delta 4.4 gets wrong with them).
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "true",
}


def delta_package() -> str:
    """Maven coordinates of the Delta jar matching the installed delta-spark and pyspark."""
    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_{SCALA_VERSION}:{metadata.version('delta-spark')}"


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


def configured_remote(config: SparkConfig) -> str | None:
    """The Spark Connect server the configuration names: ``spark.remote``, else ``$SPARK_REMOTE``."""
    return config.remote or os.environ.get("SPARK_REMOTE") or None


def running_engine(config: SparkConfig) -> str | None:
    """The URL of the running ``mvlog engine`` for a configuration that sets no ``spark.master``:
    a cron job of someone who started the engine once uses it without editing mvlog.yaml. An
    explicit ``spark.master`` means a Spark of the command's own."""
    if "master" in config.model_fields_set:
        return None
    from mvlog.spark import engine  # the engine builds on this module: import it when asked

    info = engine.status()
    return info.remote if info else None


def remote_address(url: str) -> str:
    """``sc://host:port`` of a Spark Connect URL, without its parameters (which may hold a token)."""
    return url.split(";")[0].rstrip("/")


def remote_secrets(url: str | None) -> list[str]:
    """Strings of a Spark Connect URL that must never be printed: its token and any other
    parameter value that looks like a credential (``sc://host:port/;token=…;x-api-key=…``)."""
    if not url or ";" not in url:
        return []
    secrets = []
    for param in url.split(";")[1:]:
        key, _, value = param.partition("=")
        if value and key.lower() not in ("use_ssl", "user_id", "session_id", "user_agent"):
            secrets.append(value)
    return secrets


def session_conf(config: SparkConfig) -> dict[str, str]:
    """Every Spark setting of an mvlog session (or of the engine's server): mvlog's defaults,
    the YAML's ``spark.conf``, the settings mvlog requires, Delta's and the JDBC driver's jars."""
    log4j = resources.files("mvlog") / "resources" / "log4j2.properties"
    pools = resources.files("mvlog") / "resources" / "fairscheduler.xml"
    local = config.master.startswith("local")
    # Delta rebuilds table state in 50 partitions by default, and VACUUM lists files in up to
    # 10,000 tasks: right for a cluster, pure overhead on a laptop (measured on 2 cores: a
    # 2-row MERGE 6 s -> 1.8 s; VACUUM of a 3-file table 53 s -> 6 s; one partition instead of
    # two: a 1,000-key refresh of a 1M-row view 2.7 -> 1.8 s, BENCHMARKS.md session 14).
    local_defaults = {"spark.databricks.delta.snapshotPartitions": "1",
                      "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8"} if local else {}
    # Views refreshed concurrently share the cores fairly (see resources/fairscheduler.xml).
    scheduling = {"spark.scheduler.mode": "FAIR", "spark.scheduler.allocation.file": f"file:{pools}"}
    conf = {**DEFAULT_CONF, **scheduling, **local_defaults, **config.conf, **REQUIRED_CONF}
    packages = [p for p in conf.get("spark.jars.packages", "").split(",") if p]
    conf["spark.jars.packages"] = ",".join(dict.fromkeys([delta_package(), POSTGRES_JDBC, *packages]))
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        conf[key] = f"{java_opts} {conf.get(key, '')}".strip()
    return conf


# Settings a Spark Connect session sets for itself; the rest of mvlog's settings are the server's.
SESSION_CONF_PREFIXES = ("spark.sql.", "spark.databricks.delta.")
# The Connect client's own loggers repeat every server error (with its JVM stack) on stderr.
CONNECT_LOGGERS = ("SQLQueryContextLogger", "pyspark.sql.connect", "py4j")


def _host_port(where: str) -> tuple[str, int]:
    """Host and port of ``sc://host[:port]`` (Spark Connect's default port is 15002)."""
    netloc = urlsplit(where.replace("sc://", "http://", 1)).netloc
    parsed = urlsplit(f"http://{netloc}")
    return parsed.hostname or "localhost", parsed.port or 15002


_connect_sessions: dict[str, object] = {}  # one shared Connect session per URL in this process


def connect_session(url: str, config: SparkConfig, new: bool = False):
    """A Spark Connect session on ``url`` whose server must have Delta's SQL extension; the
    session-level settings of mvlog.yaml are applied to it. The session for ``url`` is shared
    within the process unless ``new`` asks for one of its own (own settings, own temp views)."""
    import logging
    import warnings

    from mvlog.errors import SetupError

    for name in CONNECT_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    shared = _connect_sessions.get(url)
    if shared is not None and not new and not shared.is_stopped:
        return shared
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's warning about the pandas version
        try:
            from pyspark.sql.connect.session import SparkSession as RemoteSession
        except ImportError as exc:
            raise SetupError(f"spark.remote needs the Spark Connect client: pip install 'pyspark[connect]' ({exc})") from None
    from mvlog.spark.sparksql import short_error

    where = remote_address(url)
    # The Connect client retries an unreachable server for minutes; a plain TCP connect says
    # at once whether anything listens there.
    host, port = _host_port(where)
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
            raise SetupError(f"the Spark Connect server {where} refuses the setting {key}: {short_error(exc)}") from None
    if not new:
        _connect_sessions[url] = spark
    return spark


def _bound_retries(spark) -> None:
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


def new_session(spark, config: SparkConfig):
    """A session of its own on the same Spark as ``spark`` (own settings, temp views), for work
    that runs beside other sessions: a new session on the same server over Connect, else
    ``newSession()`` of the running SparkContext. Release it with :func:`release_session`."""
    url = remote_url(config)
    if url and is_connect(spark):
        return connect_session(url, config, new=True)
    return spark.newSession()


def release_session(session) -> None:
    """Release a session from :func:`new_session` (only Connect sessions hold server state;
    stopping a classic one would stop the shared SparkContext)."""
    if is_connect(session):
        session.stop()


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def build_session(config: SparkConfig | None = None, app_name: str = "mvlog"):
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
    with _jvm_output_to(spark_log_path()):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

"""mvlog's Spark settings: what every session needs, its defaults, and the jars it loads
(Delta's, matching the installed delta-spark and pyspark, and the PostgreSQL JDBC driver).
Shared by the session factory and the engine's server command."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata, resources
from pathlib import Path

from mvlog.config import Config, SparkConfig

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
}


def delta_package() -> str:
    """Maven coordinates of the Delta jar matching the installed delta-spark and pyspark."""
    import pyspark  # here, not at the top: the version only, without loading pyspark for the rest

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_{SCALA_VERSION}:{metadata.version('delta-spark')}"


def session_conf(config: SparkConfig) -> dict[str, str]:
    """Every Spark setting of an mvlog session (or of the engine's server): mvlog's defaults,
    the YAML's ``spark.conf``, the settings mvlog requires, Delta's and the JDBC driver's jars."""
    log4j = resources.files("mvlog") / "resources" / "log4j2.properties"
    pools = resources.files("mvlog") / "resources" / "fairscheduler.xml"
    local = config.master.startswith("local")
    # Delta rebuilds table state in 50 partitions by default, and VACUUM lists files in up to
    # 10,000 tasks: right for a cluster, pure overhead on a laptop (measured on 2 cores: a
    # 2-row MERGE 6 s -> 1.8 s; VACUUM of a 3-file table 53 s -> 6 s; one partition instead of
    # two: a 1,000-key refresh of a 1M-row view 2.7 -> 1.8 s, docs/benchmarks-history.md session 14).
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


# How long a JVM launch waits for another process's launch to finish resolving the packages.
RESOLUTION_WAIT_SECONDS = 300


@contextlib.contextmanager
def packages_resolved_alone(wait: float = RESOLUTION_WAIT_SECONDS) -> Iterator[None]:
    """Hold, for the block, this user's lock on launching a Spark JVM that resolves
    ``spark.jars.packages``. Ivy's cache takes no lock of its own: two JVMs downloading the same
    jar at once (the first run on a new machine: a scheduler and a command, or two test workers)
    saw each other's half-written file and one failed to start ("Downloaded file size (0) doesn't
    match expected Content Length"). Past ``wait`` the launch goes ahead without the lock (a
    launch that hangs elsewhere must not stop every other)."""
    path = Path(tempfile.gettempdir()) / f"mvlog-spark-launch-{os.getuid()}.lock"
    with open(path, "a") as lock:
        locked = _lock_within(lock.fileno(), wait)
        try:
            yield
        finally:
            if locked:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _lock_within(fd: int, wait: float) -> bool:
    """An exclusive lock on ``fd`` taken within ``wait`` seconds; False if it was not."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)


# Settings a Spark Connect session sets for itself; the rest of mvlog's settings are the server's.
SESSION_CONF_PREFIXES = ("spark.sql.", "spark.databricks.delta.")


# Hadoop's connectors by URI scheme: released with Hadoop itself, so their version is the Hadoop of
# the installed pyspark (a connector of another Hadoop fails with missing classes).
HADOOP_CONNECTORS = {"s3a": "hadoop-aws", "abfs": "hadoop-azure", "abfss": "hadoop-azure"}


def hadoop_version() -> str:
    """The Hadoop client version the installed pyspark ships (``hadoop-client-api-<v>.jar``)."""
    import pyspark  # here, not at the top: its location only

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        found = re.fullmatch(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar", jar.name)
        if found:
            return found.group(1)
    raise RuntimeError(f"no hadoop-client-api jar in {jars}: is pyspark installed whole?")


def storage_packages(uris: list[str]) -> list[str]:
    """Maven coordinates of the Hadoop connectors the schemes of ``uris`` need (``s3a://``:
    hadoop-aws; ``abfs(s)://``: hadoop-azure), matching pyspark's Hadoop; none for local paths,
    ``hdfs://`` (in pyspark's Hadoop client) or schemes whose connector is not Hadoop's (``gs://``)."""
    schemes = {uri.split("://", 1)[0].lower() for uri in uris if "://" in uri}
    artifacts = sorted({HADOOP_CONNECTORS[s] for s in schemes if s in HADOOP_CONNECTORS})
    if not artifacts:
        return []
    version = hadoop_version()
    return [f"org.apache.hadoop:{artifact}:{version}" for artifact in artifacts]


# s3a's input stream for processes that live for days (the engine, the scheduler): since Hadoop
# 3.4.3/3.5.0 the default is "analytics", whose store (analyticsaccelerator-s3 1.3.1) keeps an entry
# for every object a filesystem ever read until the filesystem closes, and a cached filesystem
# lives as long as the process: the heap grows with every Delta file read (HADOOP-20058).
S3A_LONG_LIVED = {"spark.hadoop.fs.s3a.input.stream.type": "classic"}


def with_storage(config: SparkConfig, uris: list[str]) -> tuple[SparkConfig, list[str]]:
    """``config`` with the connectors ``uris`` need added to ``spark.jars.packages`` (unless a
    package of that artifact is there already: the user's version wins) and, for s3a, the
    settings of :data:`S3A_LONG_LIVED` (unless set); and the packages added."""
    packages = [p for p in config.conf.get("spark.jars.packages", "").split(",") if p]
    present = {":".join(p.split(":")[:2]) for p in packages}
    added = [p for p in storage_packages(uris) if ":".join(p.split(":")[:2]) not in present]
    s3a = any(uri.lower().startswith("s3a://") for uri in uris)
    if not added and not s3a:
        return config, []
    conf = {**(S3A_LONG_LIVED if s3a else {}), **config.conf}
    if added:
        conf["spark.jars.packages"] = ",".join([*packages, *added])
    return config.model_copy(update={"conf": conf}), added


# Setting names whose values are credentials (s3a's access/secret/session keys, ADLS account keys
# and SAS tokens, GCS key files, passwords): never printed.
SECRET_SETTING = re.compile(r"(secret|password|token|credential|access\.key|account\.key|sas|keyfile)", re.I)


def conf_secrets(config: SparkConfig) -> list[str]:
    """The values of ``spark.conf`` settings that hold credentials."""
    return [value for key, value in config.conf.items() if value and SECRET_SETTING.search(key)]


def metastore_conf(metastore: str) -> dict[str, str]:
    """Spark settings for a Hive metastore: a ``thrift://`` URI, or a directory for Spark's embedded
    one (Derby, one Spark process at a time)."""
    conf = {"spark.sql.catalogImplementation": "hive"}
    if metastore.startswith("thrift://"):
        conf["spark.hadoop.hive.metastore.uris"] = metastore
    else:
        derby = f"jdbc:derby:;databaseName={metastore}/metastore_db;create=true"
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = derby
        conf["spark.sql.warehouse.dir"] = f"{metastore}/spark-warehouse"  # managed tables, which mvlog does not make
    return conf


def for_project(config: Config) -> tuple[SparkConfig, list[str]]:
    """The project's ``spark:`` settings with what its warehouse and catalog need: the storage
    connector (see :func:`with_storage`) and the metastore's settings (``catalog.metastore``; the
    YAML's own ``spark.conf`` wins); and a note of each addition."""
    spark, added = with_storage(config.spark, [config.warehouse_uri])
    notes = [f"adding {p} for the warehouse {config.warehouse_uri}" for p in added]
    metastore = config.metastore_uri()
    if metastore is not None:
        spark = spark.model_copy(update={"conf": {**metastore_conf(metastore), **spark.conf}})
    return spark, notes

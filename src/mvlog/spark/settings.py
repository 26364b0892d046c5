"""mvlog's Spark settings: what every session needs, its defaults, and the jars it loads
(Delta's, matching the installed delta-spark and pyspark, and the PostgreSQL JDBC driver).
Shared by the session factory and the engine's server command."""

from __future__ import annotations

from importlib import metadata, resources

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

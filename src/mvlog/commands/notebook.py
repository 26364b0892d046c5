"""Helpers for notebooks: a configured SparkSession, views as DataFrames, refresh history.

    import mvlog.commands.notebook as mvn
    spark = mvn.session()                      # $MVLOG_CONFIG, else ./mvlog.yaml
    mvn.read_view("revenue_by_nation").show()   # by name (<catalog.database>.<view>) with catalog:, else by path
    mvn.read_view("revenue_by_nation", as_of="2026-11-23 09:00+00")   # as the source was then
    mvn.history("revenue_by_nation")           # mvlog's refresh log, newest first
    mvn.delta_history("revenue_by_nation")     # the Delta commits, with mvlog's userMetadata

The configuration loaded by :func:`session` is remembered, so the other functions need
no path; passing ``config_path`` to any of them loads (and remembers) that file instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from mvlog.config import Config, load_config
from mvlog.errors import UsageError
from mvlog.model import HIDDEN_PREFIX

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_config: Config | None = None


def _load(config_path: str | None) -> Config:
    """The given configuration file, else the remembered one, else the default file."""
    global _config
    if config_path is not None or _config is None:
        _config = load_config(config_path)
    return _config


def _view_name(config: Config, name: str) -> str:
    try:
        return config.view(name).name
    except KeyError:
        known = ", ".join(v.name for v in config.views) or "none"
        raise UsageError(f"view {name!r} is not defined in the configuration (views: {known})") from None


def _spark(config_path: str | None) -> SparkSession:
    """The running SparkSession (created for the configuration if there is none)."""
    import os

    from mvlog.spark.session import build_session, remote_url
    from mvlog.spark.settings import for_project

    config = _load(config_path)
    if remote_url(config.spark):
        from pyspark import SparkContext

        if SparkContext._active_spark_context is None:
            # As pyspark's own builder does for a remote session: pyspark.sql.functions (F.col,
            # F.sum, ...) build Spark Connect expressions only when this is set.
            os.environ.setdefault("SPARK_CONNECT_MODE_ENABLED", "1")
    return build_session(for_project(config)[0])


def session(config_path: str | None = None) -> SparkSession:
    """A SparkSession configured for mvlog (Delta, JDBC driver, the YAML's ``spark:`` settings),
    or a Spark Connect session when ``spark.remote`` (or ``$SPARK_REMOTE``) names a server.

    Loads ``config_path`` (default: ``$MVLOG_CONFIG``, else ``./mvlog.yaml``) and remembers
    it for :func:`read_view`, :func:`history` and :func:`delta_history`. With ``catalog:``,
    the built views are registered as ``<database>.<view>`` in the session's catalog.
    """
    global _config
    _config = load_config(config_path)
    spark = _spark(None)
    if _config.catalog is not None:  # a catalog of the session's own starts empty: name the views
        from mvlog.spark.warehouse import Warehouse

        warehouse = Warehouse(spark, _config.warehouse_uri)
        for view in _config.views:
            if warehouse.exists(_config.view_location(view.name)):
                warehouse.register_table(_config.catalog.database, view.name, _config.view_location(view.name))
    return spark


def location(name: str, config_path: str | None = None) -> str:
    """Where the view's Delta table lives: ``<warehouse>/<name>``."""
    config = _load(config_path)
    return config.view_location(_view_name(config, name))


def read_view(name: str, config_path: str | None = None, *, as_of: datetime | str | None = None) -> DataFrame:
    """The view as a Spark DataFrame, without mvlog's internal ``_mvlog_…`` columns.

    ``as_of``: a source time (a datetime, or ISO text such as ``"2026-11-23 09:00+00"``; without a
    time zone it is read in the database's, as PostgreSQL reads one). The view is read at the
    Delta version of its newest refresh whose stamp is at or before that time — the source as of
    that stamp. For a view of a refresh group, the stamp is the newest one every view of the
    group was refreshed to, so reads of the group's views at one ``as_of`` agree with each other.
    """
    path = location(name, config_path)  # an unknown name fails here, before Spark starts
    spark = _spark(None)
    table = _config.table_name(_view_name(_config, name)) if _config else None
    if as_of is None and table is not None and spark.catalog.tableExists(table):
        df = spark.table(table)  # catalog: the view by its name
    elif as_of is None:
        df = spark.read.format("delta").load(path)
    else:
        version, _ = version_as_of(name, as_of)
        df = spark.read.format("delta").option("versionAsOf", version).load(path)
    return df.drop(*[c for c in df.columns if c.startswith(HIDDEN_PREFIX)])


def version_as_of(name: str, as_of: datetime | str, config_path: str | None = None) -> tuple[int, datetime]:
    """The Delta version :func:`read_view` reads for ``as_of``, and the source stamp it reflects."""
    from mvlog.project import Project

    config = _load(config_path)
    at = _timestamp(as_of)
    with Project(config) as project:
        return project.version_as_of(_view_name(config, name), at)


def _timestamp(value: datetime | str) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise UsageError(f"as_of {value!r} is not a timestamp (e.g. '2026-11-23 09:00:00+00:00')") from None


def history(name: str, config_path: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """mvlog's refresh history of the view, newest first, as a list of dicts.

    Keys: id, started_at, finished_at, seconds, status, method, reason, snaptime,
    keys_read, rows_inserted, rows_updated, rows_deleted, error, delta_version.
    """
    from mvlog.project import Project

    config = _load(config_path)
    with Project(config) as project:
        return [row.to_json() for row in project.history(_view_name(config, name), limit)]


def delta_history(name: str, config_path: str | None = None) -> DataFrame:
    """The Delta commit history of the view as a DataFrame (``userMetadata`` holds mvlog's snaptime)."""
    from mvlog.spark.sparksql import delta_table

    path = location(name, config_path)
    return _spark(None).sql(f"DESCRIBE HISTORY {delta_table(path)}")

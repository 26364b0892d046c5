"""mvlog.yaml: typed, strict configuration models and their loader.

The loader reports every problem as a :class:`~mvlog.errors.ConfigError` that names
the file, the line and the place in the document (``views[1].refresh``), and never
echoes a secret.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import unquote, urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mvlog.errors import ConfigError
from mvlog.model import RefreshMethod
from mvlog.timeouts import Timeouts, parse_duration
from mvlog.yamltext import expand_env, key_path, line_index

DEFAULT_CONFIG = "mvlog.yaml"
CONFIG_ENV = "MVLOG_CONFIG"
VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


CaptureKind = Literal["trigger", "logical"]
CAPTURE_KINDS: tuple[str, ...] = get_args(CaptureKind)  # the kinds, declared once (here)


URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # a location with a scheme: an object store, file://, …


def local_path(location: str) -> str | None:
    """``location``'s path on this machine's disk — a path as it is, a ``file:`` URI's path
    unquoted —; None for a location with another scheme (an object store)."""
    if location.startswith("file:"):
        return unquote(urlparse(location).path)
    return None if URI.match(location) else location

class SourceConfig(_Strict):
    dsn: str = Field(min_length=1)
    # How the logs are filled unless a log says otherwise: "trigger" (in the writer's transaction)
    # or "logical" (decoding the database's WAL through a replication slot; README "Capture").
    capture: CaptureKind = "trigger"
    # How long a refresh waits for the logical capture to reach its snapshot before it fails.
    capture_wait: float = Field(default=60.0, gt=0)
    # How long each kind of call may wait on PostgreSQL (see Timeouts).
    timeouts: Timeouts = Field(default_factory=Timeouts)


class SparkConfig(_Strict):
    master: str = "local[*]"
    # A Spark Connect server (sc://host:port) that runs every command instead of a session of
    # our own; $SPARK_REMOTE when unset (see spark.remote_url).
    remote: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("remote")
    @classmethod
    def _valid_remote(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^sc://[^/\s]+(/.*)?$", value):
            raise ValueError(f"{value!r} is not a Spark Connect URL (sc://host:port)")
        return value

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


class LogConfig(_Strict):
    """One table (``table: sales.orders``), or every table of a schema whose name matches a
    shell-style pattern (``schema: sales``, ``tables: "order_*"``; default ``*``)."""

    table: str | None = Field(default=None, min_length=1)
    schema_name: str | None = Field(default=None, alias="schema", min_length=1)
    tables: str | None = Field(default=None, min_length=1)
    capture: CaptureKind | None = None  # None: the source's

    @model_validator(mode="after")
    def _one_form(self) -> LogConfig:
        if self.table is not None and (self.schema_name is not None or self.tables is not None):
            raise ValueError("give either table, or schema with tables, not both")
        if self.table is None and self.schema_name is None:
            raise ValueError("give table (one table) or schema (with tables: a name pattern)")
        return self

    @property
    def pattern(self) -> str:
        return self.tables or "*"


class ViewConfig(_Strict):
    name: str
    query: str = Field(min_length=1)
    refresh: RefreshMethod = RefreshMethod.FORCE
    schedule: str | None = None
    # Target lag: `mvlog schedule` refreshes the view before its oldest unapplied change is older.
    freshness: timedelta | None = None
    group: str | None = None
    # Delta Change Data Feed on the view's table: downstream jobs read what each refresh changed.
    change_feed: bool = False
    # Deletion vectors on the view's table (None: the warehouse's delta.deletion_vectors).
    deletion_vectors: bool | None = None
    # Column names that need Delta column mapping allowed (None: the warehouse's delta.column_mapping).
    column_mapping: bool | None = None

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not VIEW_NAME.match(value):
            raise ValueError(
                "a view name must start with a letter or underscore and contain only "
                "letters, digits and underscores (at most 63 characters)"
            )
        return value

    @field_validator("freshness", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta | None:
        return None if value is None else parse_duration(value)

    @field_validator("schedule")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is not None:
            from croniter import croniter

            if not croniter.is_valid(value, second_at_beginning=len(value.split()) == 6):
                raise ValueError(f"{value!r} is not a valid cron expression")
        return value


class CatalogConfig(_Strict):
    """Where views are registered as tables in the Spark session catalog (Spark's own, or the Hive
    metastore ``spark.conf`` points at)."""

    database: str
    # Where the names persist: a directory for Spark's embedded Hive metastore (Derby; relative to
    # this file), or a metastore's thrift:// URI. None: the Spark session's own catalog.
    metastore: str | None = Field(default=None, min_length=1)

    @field_validator("database")
    @classmethod
    def _valid_database(cls, value: str) -> str:
        if not VIEW_NAME.match(value):
            raise ValueError("a database name must start with a letter or underscore and contain only letters, "
                             "digits and underscores")
        return value


# The Delta checkpoint intervals views' new tables take in turn (their mean: Delta's default of 10).
CHECKPOINT_INTERVALS = (8, 9, 10, 11, 12)
# Spark's setting that gives every new Delta table an interval (a user's choice wins over mvlog's).
DEFAULT_CHECKPOINT_INTERVAL_CONF = "spark.databricks.delta.properties.defaults.checkpointInterval"
REWRITE_MAX_ROWS = 300_000  # see DeltaConfig.rewrite_max_rows (docs/benchmarks-history.md session 19)


class DeltaConfig(_Strict):
    """Delta table features of every view (a view may set its own)."""

    # Cheaper MERGEs of scattered changes; Spark and polars read such tables, deltalake does not.
    deletion_vectors: bool = False
    # Column names Delta can store only under column mapping (a space, one of ,;{}()=) are refused
    # unless this says that only readers that understand it read the views: deltalake's
    # to_pandas/to_pyarrow_table read such columns as NULLs (README "Reading views without Spark").
    column_mapping: bool = False
    # A fast refresh of a view of at most this many rows (and no change feed) rewrites its table
    # instead of merging into it: cheaper below Delta's MERGE floor (docs/benchmarks-history.md). 0: always MERGE.
    rewrite_max_rows: int = Field(default=REWRITE_MAX_ROWS, ge=0)


class Config(_Strict):
    source: SourceConfig
    warehouse: str = Field(min_length=1)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    delta: DeltaConfig = Field(default_factory=DeltaConfig)
    # How many refresh units (a view, or a refresh group) one command refreshes at once.
    concurrency: int = Field(default=4, ge=1, le=64)
    # Register every view as an external Delta table <database>.<view name> (None: paths only).
    catalog: CatalogConfig | None = None
    logs: list[LogConfig] = Field(default_factory=list)
    views: list[ViewConfig] = Field(default_factory=list)
    # Where the file was read from; relative warehouse paths are resolved against it.
    base_dir: Path = Field(default=Path("."), exclude=True)

    @field_validator("logs", "views", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        """``views:`` with nothing after it (YAML null) is an empty list, as if the key were missing."""
        return [] if value is None else value

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        seen: dict[str, int] = {}
        for i, view in enumerate(self.views):
            if view.name.lower() in seen:
                raise ValueError(
                    f"views[{i}]: view name {view.name!r} is already used by views[{seen[view.name.lower()]}]"
                )
            seen[view.name.lower()] = i
        tables: dict[str, int] = {}
        for i, log in enumerate(self.logs):
            key = log.table.strip() if log.table else f"{log.schema_name}.{log.pattern}"
            if key in tables:
                raise ValueError(f"logs[{i}]: table {key!r} is already listed at logs[{tables[key]}]")
            tables[key] = i
        return self

    def view(self, name: str) -> ViewConfig:
        """The view called ``name`` (case-insensitive)."""
        for view in self.views:
            if view.name.lower() == name.lower():
                return view
        raise KeyError(name)

    @property
    def warehouse_uri(self) -> str:
        """The warehouse root as Spark should see it (local paths made absolute)."""
        if URI.match(self.warehouse):
            return self.warehouse.rstrip("/")
        path = Path(self.warehouse).expanduser()
        if not path.is_absolute():
            path = self.base_dir / path
        return str(path.resolve())

    def capture_of(self, log: LogConfig) -> CaptureKind:
        """How a ``logs:`` entry's logs are filled: its own ``capture``, else the source's."""
        return log.capture or self.source.capture

    def deletion_vectors(self, view: ViewConfig) -> bool:
        """Whether the view's table has deletion vectors: its own setting, else the warehouse's."""
        return self.delta.deletion_vectors if view.deletion_vectors is None else view.deletion_vectors

    def column_mapping(self, view: ViewConfig) -> bool:
        """Whether the view may have column names that need Delta column mapping: its own setting,
        else the warehouse's."""
        return self.delta.column_mapping if view.column_mapping is None else view.column_mapping

    def checkpoint_interval(self, view: ViewConfig) -> int | None:
        """The Delta checkpoint interval a new table of ``view`` takes: each of
        :data:`CHECKPOINT_INTERVALS` in turn, by the view's place in ``views:``, so that views
        refreshed together (their tables' versions in step) write their checkpoints in different
        refreshes; None (Delta's) when ``spark.conf`` gives new tables an interval of its own."""
        if DEFAULT_CHECKPOINT_INTERVAL_CONF in self.spark.conf:
            return None
        place = next((i for i, v in enumerate(self.views) if v.name == view.name), 0)
        return CHECKPOINT_INTERVALS[place % len(CHECKPOINT_INTERVALS)]

    def view_location(self, name: str) -> str:
        """Where a view's Delta table lives: ``<warehouse>/<view name>``."""
        return f"{self.warehouse_uri}/{name}"

    def metastore_uri(self) -> str | None:
        """``catalog.metastore`` as Spark should see it: a thrift:// URI as written, a directory made
        absolute (relative to this file); None without one."""
        if self.catalog is None or self.catalog.metastore is None:
            return None
        if self.catalog.metastore.startswith("thrift://"):
            return self.catalog.metastore
        path = Path(self.catalog.metastore).expanduser()
        return str((path if path.is_absolute() else self.base_dir / path).resolve())

    def table_name(self, name: str) -> str | None:
        """The view's name in the Spark catalog (``<database>.<view name>``); None without ``catalog:``."""
        return f"{self.catalog.database}.{name}" if self.catalog else None


def resolve_path(path: str | os.PathLike | None) -> Path:
    """The config file to use: the argument, else $MVLOG_CONFIG, else ./mvlog.yaml."""
    return Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Read, expand and validate a configuration file."""
    file = resolve_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"configuration file {file} does not exist (use -c FILE or set {CONFIG_ENV})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"configuration file {file} cannot be read: {exc.__class__.__name__}") from None
    return parse_config(text, name=str(file), base_dir=file.resolve().parent)


def parse_config(text: str, name: str = DEFAULT_CONFIG, base_dir: Path | None = None) -> Config:
    """Validate configuration text; ``name`` is used in messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark else name
        problem = getattr(exc, "problem", None) or "it is not valid YAML"
        raise ConfigError(f"{where}: malformed YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a mapping with source, warehouse, logs and views at the top level")
    source = data.get("source")
    if isinstance(source, dict) and isinstance(source.get("dsn"), str):
        line = line_index(text).get(("source", "dsn"))
        source["dsn"] = expand_env(source["dsn"], f"{name}:{line}: source.dsn" if line else f"{name}: source.dsn")
    try:
        return Config.model_validate({**data, "base_dir": base_dir or Path(".")})
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        lines = line_index(text)
        line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
        where = f"{name}:{line}" if line else name
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}"
            loc = loc[:-1]
        elif error["type"] == "missing":
            message = f"missing required key {loc[-1]!r}"
            loc = loc[:-1]
        elif error["type"] == "enum":
            message = f"must be one of {error['ctx']['expected']}"
        place = key_path(loc)
        extra = f" ({data['views'][loc[1]].get('name')})" if (
            len(loc) > 1 and loc[0] == "views" and isinstance(loc[1], int)
            and isinstance(data.get("views"), list) and loc[1] < len(data["views"])
            and isinstance(data["views"][loc[1]], dict) and data["views"][loc[1]].get("name")
        ) else ""
        raise ConfigError(f"{where}: {place}{extra}: {message}") from None

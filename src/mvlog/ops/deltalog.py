"""A Delta table's summary (version, live files, size, schema, last commit) read from its
``_delta_log`` with pyarrow alone: no JVM, and no ``deltalake``, which refuses tables with
features a view may have (deletion vectors, column mapping).

The state is the newest complete checkpoint (classic, multi-part, or V2 with its sidecars) and
the JSON commits after it, replayed in order. A file is live while an ``add`` of it is not undone
by a ``remove``; a file is identified by its path and deletion vector, as the Delta protocol says.
The protocol and the table's properties give its features (what readers need to know). Other
actions (txn, domainMetadata, cdc, ...) are skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from mvlog.config import local_path
from mvlog.errors import WarehouseError

COMMIT = re.compile(r"(\d{20})\.json")
CLASSIC = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")  # single or multi-part
V2 = re.compile(r"(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)")  # sidecars in _delta_log/_sidecars
# The fields of a checkpoint the summary needs (its add stats, often most of it, are not read).
WANTED = {"add": ("path", "size", "deletionVector"),
          "metaData": ("schemaString", "partitionColumns", "configuration"),
          "protocol": ("minReaderVersion", "readerFeatures", "writerFeatures"),
          "sidecar": ("path",)}


@dataclass(frozen=True)
class DeltaSummary:
    """What a dashboard shows of a view's Delta table."""

    version: int
    files: int
    bytes: int
    columns: list[tuple[str, str]]  # (name, Delta type as in the schemaString: "long", "decimal(12,2)", ...)
    partition_columns: list[str]
    last_commit: datetime | None  # UTC
    last_operation: str | None  # "WRITE", "MERGE", ...
    features: list[str] = field(default_factory=list)  # Delta's names: "columnMapping", "deletionVectors", ...

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-ready values (the last commit's time in ISO 8601)."""
        return {"version": self.version, "files": self.files, "bytes": self.bytes,
                "columns": [[name, kind] for name, kind in self.columns],
                "partition_columns": list(self.partition_columns),
                "last_commit": self.last_commit.isoformat() if self.last_commit else None,
                "last_operation": self.last_operation, "features": list(self.features)}


@dataclass
class _State:
    files: dict[str, dict[str | None, int]] = field(default_factory=dict)  # path -> {deletion vector id: size}
    metadata: dict[str, Any] | None = None
    protocol: dict[str, Any] | None = None
    commit_info: dict[str, Any] | None = None
    sidecars: list[str] = field(default_factory=list)

    def apply(self, action: dict[str, Any]) -> None:
        if (add := action.get("add")) is not None:
            self.files.setdefault(add["path"], {})[_dv_id(add.get("deletionVector"))] = add.get("size") or 0
        elif (remove := action.get("remove")) is not None:
            versions = self.files.get(remove["path"], {})
            versions.pop(_dv_id(remove.get("deletionVector")), None)
            if not versions:
                self.files.pop(remove["path"], None)
        elif (metadata := action.get("metaData")) is not None:
            self.metadata = metadata
        elif (protocol := action.get("protocol")) is not None:
            self.protocol = protocol
        elif (info := action.get("commitInfo")) is not None:
            self.commit_info = info
        elif (sidecar := action.get("sidecar")) is not None:
            self.sidecars.append(sidecar["path"])


def table_features(protocol: dict[str, Any] | None, metadata: dict[str, Any] | None) -> list[str]:
    """A table's features by Delta's names: those its protocol lists, and those its properties turn
    on under an older protocol (column mapping needs reader version 2, and no feature list)."""
    found = set((protocol or {}).get("readerFeatures") or ()) | set((protocol or {}).get("writerFeatures") or ())
    configuration = (metadata or {}).get("configuration") or {}
    if isinstance(configuration, list):  # a parquet checkpoint's map: (key, value) pairs
        configuration = dict(configuration)
    if str(configuration.get("delta.columnMapping.mode", "none")).lower() != "none":
        found.add("columnMapping")
    if str(configuration.get("delta.enableChangeDataFeed", "false")).lower() == "true":
        found.add("changeDataFeed")
    if str(configuration.get("delta.enableDeletionVectors", "false")).lower() == "true":
        found.add("deletionVectors")
    return sorted(found)


def _dv_id(dv: dict[str, Any] | None) -> str | None:
    """A deletion vector's unique id (storage type, path or inline data, offset); None without one."""
    if not dv:
        return None
    offset = dv.get("offset")
    return f"{dv['storageType']}{dv['pathOrInlineDv']}" + (f"@{offset}" if offset is not None else "")


def _type_name(kind: Any) -> str:
    """A schemaString type as Delta writes it: primitives as they are, nested ones compactly."""
    if isinstance(kind, str):
        return kind
    if kind.get("type") == "struct":
        return "struct<" + ",".join(f"{f['name']}:{_type_name(f['type'])}" for f in kind["fields"]) + ">"
    if kind.get("type") == "array":
        return f"array<{_type_name(kind['elementType'])}>"
    if kind.get("type") == "map":
        return f"map<{_type_name(kind['keyType'])},{_type_name(kind['valueType'])}>"
    return json.dumps(kind, separators=(",", ":"))


def _root(location: str, filesystem: Any) -> tuple[Any, str]:
    """The filesystem and the path on it of a table's ``location``."""
    local = local_path(location)
    if local is not None:
        return filesystem or pafs.LocalFileSystem(), local.rstrip("/")
    if filesystem is None:
        raise WarehouseError(f"reading {location} needs a filesystem for it (see filesystem_for)")
    return filesystem, location.split("://", 1)[1].rstrip("/")


def _read_actions(fs: Any, path: str, state: _State, checkpoint: bool = False) -> None:
    """Applies the actions of one log file: a JSON commit or V2 checkpoint, or a parquet checkpoint
    or sidecar. A checkpoint's removes are tombstones of files no longer in it: skipped."""
    if path.endswith(".json"):
        with fs.open_input_stream(path) as stream:
            lines = stream.read().decode("utf-8").splitlines()
        for line in lines:
            action = json.loads(line) if line.strip() else {}
            if not (checkpoint and "remove" in action):
                state.apply(action)
        return
    with fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        schema = parquet.schema_arrow
        columns = [f"{action}.{name}" for action, names in WANTED.items() if action in schema.names
                   for name in names if schema.field(action).type.get_field_index(name) >= 0]
        for batch in parquet.iter_batches(columns=columns):
            for row in batch.to_pylist():
                state.apply({key: value for key, value in row.items() if value is not None})


def _newest_checkpoint(names: set[str], latest: int) -> tuple[int, list[str]] | None:
    """The version and files of the newest complete checkpoint at or before ``latest``."""
    found: dict[tuple[int, int], list[str]] = {}  # (version, parts) -> file names; parts 0: a V2 checkpoint
    for name in sorted(names):
        if match := CLASSIC.fullmatch(name):
            found.setdefault((int(match[1]), int(match[3] or 1)), []).append(name)
        elif match := V2.fullmatch(name):
            found[(int(match[1]), 0)] = [name]  # one of a version's V2 checkpoints is enough
    complete = [(version, sorted(files)) for (version, parts), files in found.items()
                if len(files) == max(parts, 1) and version <= latest]
    return max(complete) if complete else None


def read_summary(location: str, filesystem: pafs.FileSystem | None = None) -> DeltaSummary | None:
    """The summary of the Delta table at ``location`` (a local path, a ``file:`` URI, or an
    ``s3a://bucket/path`` URI read through ``filesystem``, see :func:`filesystem_for`); None when
    no table is there (no ``_delta_log``, or no commit in it). Raises :class:`WarehouseError` when
    the log cannot be read or misses a commit its newest checkpoint does not cover."""
    fs, root = _root(location, filesystem)
    log = f"{root}/_delta_log"
    try:
        listed = {info.base_name: info for info in fs.get_file_info(pafs.FileSelector(log, allow_not_found=True))
                  if info.type == pafs.FileType.File}
        commits = {int(match[1]) for name in listed if (match := COMMIT.fullmatch(name))}
        checkpoint = _newest_checkpoint(set(listed), max(commits, default=-1))
        latest = max([*commits, *([checkpoint[0]] if checkpoint else [])], default=None)
        if latest is None:
            return None
        start = checkpoint[0] + 1 if checkpoint else 0
        missing = sorted(set(range(start, latest + 1)) - commits)
        if missing:
            raise WarehouseError(f"the Delta log of {location} misses commit {missing[0]} and has no checkpoint "
                                 "that covers it")
        state = _State()
        for name in checkpoint[1] if checkpoint else []:
            _read_actions(fs, f"{log}/{name}", state, checkpoint=True)
        for sidecar in state.sidecars:
            _read_actions(fs, f"{log}/_sidecars/{sidecar}", state, checkpoint=True)
        for version in range(start, latest + 1):
            state.commit_info = None  # the newest commit's is the one kept
            _read_actions(fs, f"{log}/{version:020d}.json", state)
        newest = listed.get(f"{latest:020d}.json")
        if start > latest and newest is not None:  # the newest commit is the checkpoint's: its commitInfo only
            info = _State()
            _read_actions(fs, f"{log}/{newest.base_name}", info)
            state.commit_info = info.commit_info
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise WarehouseError(f"cannot read the Delta log of {location}: {error}") from error
    commit = state.commit_info or {}
    stamp = commit.get("inCommitTimestamp") or commit.get("timestamp")
    when = datetime.fromtimestamp(stamp / 1000, UTC) if isinstance(stamp, int) else None
    if when is None and newest is not None and newest.mtime is not None:
        when = newest.mtime.astimezone(UTC)
    schema = json.loads(state.metadata["schemaString"]) if state.metadata else {"fields": []}
    return DeltaSummary(
        version=latest, files=sum(len(v) for v in state.files.values()),
        bytes=sum(size for versions in state.files.values() for size in versions.values()),
        columns=[(f["name"], _type_name(f["type"])) for f in schema["fields"]],
        partition_columns=list((state.metadata or {}).get("partitionColumns") or []),
        last_commit=when, last_operation=commit.get("operation"),
        features=table_features(state.protocol, state.metadata))


def filesystem_for(warehouse_uri: str, spark_conf: dict[str, str]) -> pafs.FileSystem | None:
    """The pyarrow filesystem that reads tables under ``warehouse_uri``: None for a local path or a
    ``file:`` URI; for ``s3a://``, an S3FileSystem set up as Hadoop's s3a is in ``spark_conf``
    (``spark.hadoop.fs.s3a.*``, per-bucket settings first); credentials not in it come from the
    environment, as for s3a's default providers."""
    if local_path(warehouse_uri) is not None:
        return None
    parsed = urlparse(warehouse_uri)
    if parsed.scheme.lower() not in ("s3a", "s3"):
        raise WarehouseError(f"mvlog reads Delta logs on local paths and s3a:// only, not {parsed.scheme}://")

    def setting(key: str) -> str | None:
        return spark_conf.get(f"spark.hadoop.fs.s3a.bucket.{parsed.netloc}.{key}") or \
            spark_conf.get(f"spark.hadoop.fs.s3a.{key}")

    options: dict[str, Any] = {"region": setting("endpoint.region") or "us-east-1"}
    access, secret = setting("access.key"), setting("secret.key")
    if access and secret:
        options.update(access_key=access, secret_key=secret, session_token=setting("session.token"))
    if endpoint := setting("endpoint"):
        address = urlparse(endpoint if "://" in endpoint else f"//{endpoint}")
        ssl = (setting("connection.ssl.enabled") or "true").lower() != "false"
        options["scheme"] = address.scheme or ("https" if ssl else "http")
        options["endpoint_override"] = address.netloc + address.path.rstrip("/")
        # s3a addresses a bucket by host name unless path.style.access; pyarrow by path with an endpoint
        options["force_virtual_addressing"] = (setting("path.style.access") or "false").lower() != "true"
    return pafs.S3FileSystem(**options)

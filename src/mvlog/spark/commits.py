"""One Spark session's Delta commits: the settings of its next commit (mvlog's metadata, the
idempotent-write transaction), the version that commit made, and Spark's errors worded once.

A leaf of the ``spark`` package: the warehouse, its history and its MERGE are built on it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from mvlog.errors import SourceError, WarehouseError, redact
from mvlog.spark.sparksql import JDBC_CONNECTION_LOST, error_class, postgres_message, short_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMIT_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
LAST_COMMIT_VERSION = "spark.databricks.delta.lastCommitVersionInSession"  # set by Delta after each commit


class DeltaSession:
    """A Spark session as mvlog writes Delta through it (see the module docstring)."""

    def __init__(self, spark: SparkSession, secrets: list[str]):
        self.spark = spark
        self.secrets = secrets

    def fail(self, what: str, exc: BaseException) -> Exception:
        """``exc`` from Spark as mvlog's error: a SourceError when PostgreSQL (through JDBC) failed,
        transient if the connection was lost; else a WarehouseError. Secrets are redacted."""
        message = redact(short_error(exc), self.secrets)
        if "PSQLException" in str(exc) or "postgresql" in message.lower() or "JDBC" in message:
            message = redact(postgres_message(exc) or message, self.secrets)
            if "invalid snapshot identifier" in message:  # mvlog holds a refresh's snapshot until it ends
                message = f"the refresh's snapshot is gone: the connection that held it was lost ({message})"
            return SourceError(f"{what}: {message}", transient=any(m in str(exc) for m in JDBC_CONNECTION_LOST))
        return WarehouseError(f"{what}: {message}")

    @contextlib.contextmanager
    def failing(self, what: str) -> Iterator[None]:
        """Spark's errors inside as mvlog's (:meth:`fail`, ``what`` failed); mvlog's own pass."""
        try:
            yield
        except (SourceError, WarehouseError):
            raise
        except Exception as exc:
            raise self.fail(what, exc) from None

    @contextlib.contextmanager
    def commit_settings(self, metadata: dict, txn: tuple[str, int] | None = None,
                        conf: dict[str, str] | None = None) -> Iterator[None]:
        """Session settings for the next Delta commit: mvlog's metadata, the idempotent-write
        transaction, operation tunables; unset afterwards."""
        settings = {COMMIT_METADATA: json.dumps({"mvlog": metadata}, default=str, sort_keys=True), **(conf or {})}
        if txn:
            settings.update({TXN_APP_ID: txn[0], TXN_VERSION: str(txn[1])})
        self.spark.conf.unset(LAST_COMMIT_VERSION)  # so that a value read after the write is its own
        for key, value in settings.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in settings:
                self.spark.conf.unset(key)

    def session_commit_version(self) -> int | None:
        """The version of the commit this session's last write made (inside ``commit_settings``);
        None if it committed nothing (its transaction was applied before). Delta records it in
        the session, so no history read is needed."""
        return int_or_none(self.spark.conf.get(LAST_COMMIT_VERSION, None))


def mvlog_metadata(user_metadata: str | None) -> dict | None:
    """mvlog's part of a commit's userMetadata; None if mvlog did not write it."""
    try:
        metadata = json.loads(user_metadata)["mvlog"] if user_metadata else None
    except (ValueError, KeyError, TypeError):
        return None
    return metadata if isinstance(metadata, dict) else None


def int_or_none(value: Any) -> int | None:
    """``value`` as an int; None stays None."""
    return None if value is None else int(value)


COMMIT_ATTEMPTS = 3  # a write that lost a commit race to another writer of the table runs again
_T = TypeVar("_T")


def until_committed(attempt: Callable[[], _T]) -> _T:
    """``attempt()``, run again (up to COMMIT_ATTEMPTS times) while it loses a commit race."""
    for _ in range(1, COMMIT_ATTEMPTS):
        try:
            return attempt()
        except Exception as exc:
            if not lost_commit_race(exc):
                raise
    return attempt()


def lost_commit_race(exc: BaseException) -> bool:
    """Another commit to the table won Delta's optimistic-concurrency check (an OPTIMIZE, or the
    MERGE of a killed client that a Spark Connect server finished). Running the write again is
    safe: it recomputes against the new version, and its transaction version makes Delta skip
    it if a commit of the same refresh landed already (a fence commits nothing but that version)."""
    condition = error_class(exc) or ""
    return (condition.startswith("DELTA_CONCURRENT") or "[DELTA_CONCURRENT_" in str(exc)
            or condition in ("DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED"))

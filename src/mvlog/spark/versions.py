"""Delta history: the commits mvlog wrote, their stamps and versions (a part of
:class:`mvlog.spark.warehouse.Warehouse`)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from mvlog.errors import WarehouseError
from mvlog.spark.commits import DeltaSession, int_or_none, mvlog_metadata, until_committed
from mvlog.spark.sparksql import delta_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OWN_COMMIT_SEARCH = 20  # newest commits searched for the one a write just made (others may follow it)


class DeltaHistory:
    """Reading a view's Delta history: which commit a write made, which version holds a stamp."""

    def __init__(self, delta: DeltaSession):
        self.delta = delta
        self.spark = delta.spark

    def _last_commit(self, location: str) -> dict:
        return self.spark.sql(f"DESCRIBE HISTORY {delta_table(location)} LIMIT 1").collect()[0].asDict()

    def own_commit(self, location: str, metadata: dict) -> dict | None:
        """The newest commit that carries ``metadata``: the one this process's write just made (or,
        when Delta skipped an already-applied transaction, the one that applied it first). An
        OPTIMIZE or another view's refresh may have committed since, so it is searched for."""
        expected = json.loads(json.dumps(metadata, default=str))
        for limit in (1, OWN_COMMIT_SEARCH):  # nearly always the newest: read one commit file, not 20
            for row in self.history(location, limit).collect():
                if mvlog_metadata(row["userMetadata"]) == expected:
                    return row.asDict()
        return None  # buried under later commits: the write stands, its version is not known

    def own_version(self, location: str, metadata: dict) -> int | None:
        """The version of :meth:`own_commit`; None if it is not known."""
        return int_or_none((self.own_commit(location, metadata) or {}).get("version"))


    def history(self, location: str, limit: int | None = None) -> DataFrame:
        """The Delta commit history of the table as a DataFrame, newest first."""
        return self.spark.sql(f"DESCRIBE HISTORY {delta_table(location)}" + (f" LIMIT {int(limit)}" if limit else ""))

    def _stamped_versions(self, location: str) -> list[tuple[int, datetime | None]]:
        """Every version in the table's history, newest first, with the stamp of the newest commit
        mvlog wrote in a refresh at or before it (OPTIMIZE and VACUUM keep the stamp before them)."""
        try:
            rows = self.history(location).select("version", "userMetadata").collect()
        except Exception as exc:
            raise self.delta.fail(f"reading the history of {location} failed", exc) from None
        if not rows:
            raise WarehouseError(f"{location} has no Delta history")
        stamped: list[tuple[int, datetime | None]] = []
        stamp = None
        for row in reversed(rows):
            written = (mvlog_metadata(row["userMetadata"]) or {}).get("snaptime")
            stamp = datetime.fromisoformat(written) if written else stamp
            stamped.append((int(row["version"]), stamp))
        return stamped[::-1]

    def mvlog_version(self, location: str) -> tuple[int, datetime | None]:
        """The table's newest version, and the stamp of the newest commit mvlog wrote in a refresh
        (None if none has one)."""
        return self._stamped_versions(location)[0]

    def version_at(self, location: str, stamp: datetime) -> int | None:
        """The newest version of the table that holds the view as of ``stamp`` (from the stamps in
        its commits); None if no version is that old."""
        return next((v for v, s in self._stamped_versions(location) if s is not None and s <= stamp), None)

    def fence(self, location: str, view: str, txn: tuple[str, int]) -> None:
        """Commit nothing but ``txn`` (an empty append carrying the idempotent-write transaction):
        a write of the same transaction id at or below its version that began before this commit
        fails at its own (Delta's conflict check on the transaction ids it read), and one that
        begins after it is skipped. A Spark Connect server finishes the operations of a client
        that died, so a refresh killed mid-write may still commit after the next refresh looked
        at the history; the fence ends that before the look. Its metadata has no stamp: the
        version keeps the stamp of the commit before it. It runs again when it loses the commit
        race to the very write it fences off: that write landed first, and the restore takes it back."""

        def attempt() -> None:
            nothing = self.spark.read.format("delta").load(location).limit(0)  # the table's own schema
            with self.delta.commit_settings({"view": view, "method": "fence"}, txn):
                nothing.write.format("delta").mode("append").save(location)

        try:
            until_committed(attempt)
        except Exception as exc:
            raise self.delta.fail(f"fencing {location} off the writes of an interrupted refresh failed", exc) from None

    def restore_to_stamp(self, location: str, view: str, stamp: datetime) -> int | None:
        """Take back the commits mvlog made after ``stamp`` (a refresh that wrote Delta and died
        before the catalog recorded it): the table is restored, in one commit, to the newest
        version that holds the view as of ``stamp``. Returns that version; None (nothing done)
        when no commit is newer than ``stamp``."""
        stamped = self._stamped_versions(location)
        newest = stamped[0][1]
        if newest is None or newest <= stamp:
            return None
        version = next((v for v, s in stamped if s is not None and s <= stamp), None)
        if version is None:
            raise WarehouseError(f"{location} holds a commit of a refresh the catalog never recorded, and no "
                                 f"version as of its last recorded stamp {stamp.isoformat()}: refresh it completely")
        metadata = {"view": view, "snaptime": stamp.isoformat(), "method": "restore"}  # it holds the view as of stamp
        try:
            with self.delta.commit_settings(metadata):
                self.spark.sql(f"RESTORE TABLE {delta_table(location)} TO VERSION AS OF {int(version)}").collect()
        except Exception as exc:
            raise self.delta.fail(f"restoring {location} to version {version} failed", exc) from None
        return version

    def read_version(self, location: str, version: int) -> DataFrame:
        """The Delta table at ``location`` as of ``version``."""
        try:
            return self.spark.read.format("delta").option("versionAsOf", int(version)).load(location)
        except Exception as exc:
            raise self.delta.fail(f"reading {location} failed", exc) from None

    def last_commit_metadata(self, location: str) -> dict | None:
        """The mvlog metadata of the newest commit, if it was written by mvlog."""
        return mvlog_metadata(self._last_commit(location)["userMetadata"])

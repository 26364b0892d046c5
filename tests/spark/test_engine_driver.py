"""The engine's driver warms the Delta state of each version committed in its JVM, once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mvlog.spark.engine_driver import warm_new_versions


class FakeSnapshot:
    def __init__(self, version: int, log: FakeLog):
        self._version, self.log = version, log

    def version(self) -> int:
        return self._version

    def allFiles(self) -> FakeSnapshot:  # noqa: N802 - Delta's name
        return self

    def count(self) -> int:
        self.log.built.append(self._version)
        return 3


class FakeLog:
    def __init__(self, path: str, version: int | None):
        self.path, self.version, self.built = path, version, []

    def unsafeVolatileSnapshot(self) -> FakeSnapshot | None:  # noqa: N802
        return None if self.version is None else FakeSnapshot(self.version, self)

    def dataPath(self) -> FakeLog:  # noqa: N802 - a Hadoop Path, whose toString() is the path
        return self

    def toString(self) -> str:  # noqa: N802
        return self.path


class FakeJvm:
    """Just what ``warm_new_versions`` reaches: Delta's table cache of the JVM."""

    def __init__(self, logs: list[FakeLog]):
        self.logs = logs
        self.org = self  # jvm.org.apache.spark.sql.delta.DeltaLog$.MODULE$.getOrCreateCache(conf)
        self.apache = self.spark = self.sql = self.delta = self
        setattr(self, "DeltaLog$", self)
        setattr(self, "MODULE$", self)

    def getOrCreateCache(self, conf: object) -> FakeJvm:  # noqa: N802
        return self

    def asMap(self) -> FakeJvm:  # noqa: N802
        return self

    def values(self) -> list[FakeLog]:
        return self.logs


def test_each_new_version_is_built_once_and_a_table_without_one_is_left_alone():
    a, b, empty = FakeLog("/w/a", 4), FakeLog("/w/b", 0), FakeLog("/w/new", None)
    jvm, warmed = FakeJvm([a, b, empty]), {}
    assert warm_new_versions(jvm, None, warmed) == ["/w/a", "/w/b"]
    assert warm_new_versions(jvm, None, warmed) == []  # nothing committed since
    a.version = 5  # a refresh committed version 5 of a
    assert warm_new_versions(jvm, None, warmed) == ["/w/a"]
    assert (a.built, b.built, empty.built) == ([4, 5], [0], [])


@pytest.mark.integration
def test_the_engine_builds_the_state_of_a_version_a_client_committed(connect_engine, tmp_path):
    """A client commits through the engine; the engine's driver builds that version's state by
    itself (its log says so), so that the next command's read finds it built."""
    from mvlog.config import SparkConfig
    from mvlog.spark.session import connect_session

    spark = connect_session(connect_engine.remote, SparkConfig(remote=connect_engine.remote), new=True)
    location = str(tmp_path / "warm_me")
    spark.range(10).write.format("delta").save(location)
    spark.range(5).write.format("delta").mode("append").save(location)
    log = Path(connect_engine.log)
    deadline = time.monotonic() + 60
    while f"warmed file:{location} version 1" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert f"warmed file:{location} version 1" in log.read_text()

"""The driver program of ``mvlog engine``: a Spark Connect server that keeps Delta state warm.

``spark-submit`` runs this file as the engine's driver. Spark's own Connect server starts inside
it as a plugin (``SparkConnectPlugin``, the same server ``SparkConnectServer`` runs), so every
client command works as with that server. Beside it, this driver builds the Delta state of each
table version committed in the engine's JVM, between commands (once the engine ran no job for
``IDLE_BEFORE_WARM`` seconds): after a refresh commits version
v+1, Delta holds v+1's snapshot without its file list, and the next command that reads the table
(the view's next refresh, minutes later) would build it first — 1.4–1.6 s of a new ``mvlog
refresh`` process on the engine (docs/benchmarks-history.md session 32). ``mvlog schedule`` does the same for
its own session (:meth:`mvlog.project.Project.warm`).

Which tables: every Delta table the engine's JVM has opened (Delta's table cache); which
version: the newest the JVM knows (the one its last commit installed), so nothing is listed on
storage and a table no command touches again costs nothing.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

WARM_INTERVAL = 0.25  # seconds between looks at the engine's jobs
# Warm only after the engine ran no Spark job for this long: between commands, not inside one
# (a refresh of two views warming the first's commit while the second writes slowed it by 1 s).
IDLE_BEFORE_WARM = 1.0
# The tables are looked at once per quiet spell after jobs ran (a commit runs jobs), and at least
# this often (jobs shorter than a look apart go unseen): each look costs a few py4j calls per
# table the JVM holds, too many to repeat every WARM_INTERVAL on an engine with hundreds.
RESCAN_EVERY = 10.0


def warm_new_versions(jvm: Any, conf: Any, warmed: dict[str, int]) -> list[str]:
    """Build the state of each cached Delta table's newest known version not built yet; the
    tables warmed. ``warmed``: table path -> the version last warmed (updated here)."""
    delta_log = getattr(getattr(jvm.org.apache.spark.sql.delta, "DeltaLog$"), "MODULE$")  # Scala's object DeltaLog
    cache = delta_log.getOrCreateCache(conf)
    done = []
    for log in list(cache.asMap().values()):
        snapshot = log.unsafeVolatileSnapshot()
        if snapshot is None:
            continue
        path, version = log.dataPath().toString(), snapshot.version()
        if version < 0 or warmed.get(path) == version:
            continue
        started = time.monotonic()
        try:
            snapshot.allFiles().count()  # builds and caches the version's state, as a read would
        except Exception as exc:  # noqa: BLE001 - an optimization: the next read meets what is wrong
            print(f"mvlog engine: warming {path} version {version} failed: {exc}", file=sys.stderr, flush=True)
        else:
            print(f"mvlog engine: warmed {path} version {version} in {time.monotonic() - started:.2f} s", flush=True)
        warmed[path] = version
        done.append(path)
    return done


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()  # the Connect server starts with it (spark.plugins)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    jvm, conf = spark._jvm, spark._jsparkSession.sessionState().conf()
    jobs = spark.sparkContext.statusTracker()
    warmed: dict[str, int] = {}
    idle_since: float | None = None
    worked, looked = False, time.monotonic()  # jobs ran since the last look at the tables; when that was
    print("mvlog engine: Spark Connect server started; warming Delta state of new versions", flush=True)
    while not stop.wait(WARM_INTERVAL):
        try:
            if jobs.getActiveJobsIds():
                idle_since, worked = None, True
                continue
            now = time.monotonic()
            idle_since = idle_since or now
            if now - idle_since >= IDLE_BEFORE_WARM and (worked or now - looked >= RESCAN_EVERY):
                warm_new_versions(jvm, conf, warmed)
                worked, looked = False, time.monotonic()
        except Exception as exc:  # noqa: BLE001 - never let warming stop the server
            print(f"mvlog engine: warming failed: {exc}", file=sys.stderr, flush=True)
            time.sleep(10 * WARM_INTERVAL)
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - the JVM got the same SIGTERM and may be gone already
        pass


if __name__ == "__main__":
    main()

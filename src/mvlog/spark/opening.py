"""The warehouse a command opens: on which Spark (a session of its own, a Spark Connect server,
the running ``mvlog engine``), and, before that Spark starts, whether a root on this machine's
disk can be written."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from mvlog.config import Config, local_path
from mvlog.errors import WarehouseError
from mvlog.spark.remote import configured_remote, remote_address
from mvlog.spark.session import build_session, remote_url
from mvlog.spark.settings import for_project
from mvlog.spark.warehouse import LOCAL_PROBE, Warehouse


def check_local_root(config: Config) -> None:
    """Before Spark starts: a warehouse on this machine's disk that a Spark of this process's own
    will write is checked with the operating system's own calls, so that a root that cannot be
    written fails in a moment rather than after a JVM's start (``Warehouse.check_writable`` checks
    again, through Hadoop, once Spark is up; object stores and a server's disk are left to it)."""
    uri = config.warehouse_uri
    local = local_path(uri)
    if not config.views or remote_url(config.spark) or local is None:
        return  # nothing to write there (as check_locations), or not this process's disk
    root = Path(local)
    probe = root / LOCAL_PROBE
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise WarehouseError(f"the warehouse {uri} is not writable: {exc.strerror or exc}") from None


def open_warehouse(config: Config, secrets: Sequence[str], progress: Callable[[str], None]) -> Warehouse:
    """The warehouse of ``config`` on the Spark it names — a session of mvlog's own, its Spark
    Connect server, or the running ``mvlog engine`` — saying which (``progress``)."""
    url = remote_url(config.spark)
    if url and not configured_remote(config.spark):
        progress(f"using the running mvlog engine at {remote_address(url)} "
                 "(set spark.master for a Spark of this command's own)")
    else:
        progress(f"connecting to Spark Connect at {remote_address(url)}" if url else "starting Spark")
    spark_config, notes = for_project(config)  # with what the warehouse and the catalog need
    for note in notes:
        progress(note)
    return Warehouse(build_session(spark_config), config.warehouse_uri, list(secrets))

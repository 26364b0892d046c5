"""Which readers read a view right (Spark, deltalake, polars, DuckDB over Arrow): from the
features of its Delta table as its log says (read without a JVM), or, before the table is
written, from the features mvlog would give it. The verdicts per feature are
:data:`mvlog.spark.features.READERS`, which ``tests/spark/test_readers.py`` checks against the
readers themselves."""

from __future__ import annotations

from mvlog.config import Config
from mvlog.errors import MvlogError
from mvlog.ops import deltalog
from mvlog.spark.features import readers

# The features of ``Compiler.table_features``' lines ("column mapping: column 'a b' …"), by Delta's names.
EXPECTED = {"column mapping": "columnMapping", "deletion vectors": "deletionVectors",
            "change data feed": "changeDataFeed"}


def view_readers(config: Config, view: str, expected: list[str]) -> tuple[str, dict[str, str]]:
    """``("table", verdicts)`` from the view's Delta table as it is, or ``("configuration",
    verdicts)`` from ``expected`` (the features mvlog would give it) when the table is not
    written yet or its log cannot be read."""
    try:
        filesystem = deltalog.filesystem_for(config.warehouse_uri, config.spark.conf)
        summary = deltalog.read_summary(config.view_location(view), filesystem)
    except (MvlogError, OSError):
        summary = None
    if summary is not None:
        return "table", readers(set(summary.features))
    return "configuration", readers({EXPECTED[name] for line in expected
                                     if (name := line.split(":")[0]) in EXPECTED})

"""The operations layer: what a running deployment asks of its views, beside refreshing them.

Owns ``mvlog verify`` (``verify``: a view against its query at one snapshot, by the row
fingerprints of ``fingerprint`` that PostgreSQL and Spark compute alike), freshness (``freshness``:
a view's lag since its oldest unapplied change, and its ``freshness:`` status), ``mvlog status``
(``status``), the scheduler's Prometheus metrics (``metrics``) and a Delta table's facts read
from its log without a JVM (``deltalog``, for the dashboard).

May import: the pipeline (:mod:`mvlog.pipeline.compile`, :mod:`mvlog.pipeline.plan`, :mod:`mvlog.pipeline.refresh`), the
layers below it (:mod:`mvlog.sql`, :mod:`mvlog.postgres`, :mod:`mvlog.spark`) and the shared
facts. Never the facade (:mod:`mvlog.project`) or the commands above it, except for type
annotations (``tests/test_layers.py`` checks).
"""

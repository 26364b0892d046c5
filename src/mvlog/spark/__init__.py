"""The Spark/Delta layer: sessions, the engine, and the Delta tables of the views.

Owns pyspark: the session factory (``session``: a SparkSession of mvlog's own or a Spark
Connect session), ``mvlog engine`` (``engine``), Spark SQL text (``sparksql``), and the
warehouse (``warehouse``: reads at a snapshot, staging, replace; ``merge``: the MERGE of a fast
refresh; ``history``: commits, versions and stamps).

May import: :mod:`mvlog.model`, :mod:`mvlog.errors`, :mod:`mvlog.config`, pyspark. Never
psycopg2: PostgreSQL is reached through the JDBC options a caller hands it
(``tests/test_layers.py`` checks).
"""

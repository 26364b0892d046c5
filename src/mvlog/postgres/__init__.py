"""The PostgreSQL layer: connections and mvlog's objects in the source database.

Owns psycopg2 (``source``: connections, transactions, catalog lookups, errors worded once),
the materialized view logs and stamping (``logs``) and what fills them (``capture``), mvlog's
catalog tables (``catalog``: the only package that names them in SQL; the registries of views
and logs, the capture's state, history and status rows), view locks (``locks``), the JDBC
options Spark reads PostgreSQL with (``jdbc``), and throwaway clusters (``pgtemp``).

May import: :mod:`mvlog.sql`, :mod:`mvlog.model`, :mod:`mvlog.errors`, :mod:`mvlog.config`,
psycopg2. Never pyspark (``tests/test_layers.py`` checks).
"""

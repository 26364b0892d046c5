"""The PostgreSQL layer: connections and mvlog's objects in the source database.

Owns psycopg2 (``source``: connections, transactions, catalog lookups, errors worded once),
the materialized view logs and stamping (``logs``), mvlog's catalog tables (``catalog``: the
only module that names them; views, history and status rows, typed in ``catalog_rows``), view
locks (``locks``), the JDBC options Spark reads PostgreSQL with (``jdbc``), and throwaway
clusters (``pgtemp``).

May import: :mod:`mvlog.sql`, :mod:`mvlog.model`, :mod:`mvlog.errors`, :mod:`mvlog.config`,
psycopg2. Never pyspark (``tests/test_layers.py`` checks).
"""

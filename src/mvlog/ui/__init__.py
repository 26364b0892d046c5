"""``mvlog ui``: a read-only dashboard of one project — the graph of logs and views, each view's
freshness, history and why, each table's log and capture — served over HTTP with a JSON API
under every page. It starts no Spark (mvlog's catalog in PostgreSQL, read in read-only sessions,
and the Delta log, read without a JVM) and ships every script and style it serves.
"""

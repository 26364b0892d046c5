"""The SQL layer: what a view query is and the SQL a refresh sends — pure, no drivers.

Its folders are the compiler's passes, in order, each importing only the ones before it
(``tests/test_layers.py`` checks):

1. ``parse/`` — a query as a tree, names, the rules of every class;
2. ``rewrite/`` — the rewrite rules, in ``normalize.RULES``' order;
3. ``analyze/`` — a query's class, the tables it reads, why it cannot be fast;
4. ``pieces/`` — the graph of pieces, and each view's or piece's shape and kind;
5. ``generate/`` — the SQL blocks of a fast refresh;
6. ``strategies/`` — a strategy per kind (``registry``: one line each), its state and statements;

and ``explain`` on top. May import: :mod:`mvlog.model`, :mod:`mvlog.errors`, sqlglot. Never
psycopg2 or pyspark, and nothing above it.
"""

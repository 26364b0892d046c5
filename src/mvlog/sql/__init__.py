"""The SQL layer: what a view query is and the SQL a refresh sends — pure, no drivers.

Owns the analysis of view queries (sqlglot: ``sqltree``, ``rewrite``, ``subqueries``,
``expansion``, ``analysis``, and ``restrictions`` for the rules of every class), view shapes
(``shape``, ``keying``; ``choice`` picks the builder and the strategy), and the SQL generated for
fast refreshes: changed keys and lineage
(``changes``), reads (``sqlgen``, ``union``), the key map's and the group table's statements
(``keymap``, ``aggdelta``), and ``explain``.

May import: :mod:`mvlog.model`, :mod:`mvlog.errors`, sqlglot. Never psycopg2 or pyspark, and
nothing above it (``tests/test_layers.py`` checks).
"""

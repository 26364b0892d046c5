"""Pass 2, rewrite: the rules a query goes through before it is classified, each a small function
from a tree to a tree, run in the order ``normalize.RULES`` declares (qualify, comma joins, CTEs
inlined, IN subqueries flattened, joins distributed over unions, derived tables merged, outputs
named, aggregates pulled up, grouping sets as unions, literals typed). Each rule's module is here:
``rewrite`` (the catalog, merging), ``fulljoin``, ``correlate``, ``decorrelate``, ``pullup``,
``unionjoin``, ``groupingsets``. ``restricted_ctes`` is a rule of the reads mvlog sends (which CTEs
PostgreSQL is told to inline), not of the compiler.
"""

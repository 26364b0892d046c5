"""Pass 3, analyze: the normalized query's class (``analysis`` for one SELECT, ``compound`` for set
operations, aggregates over a UNION ALL and windows), the tables it reads, its subqueries as
lineage (``subqueries``), and why a part of it cannot be fast; ``classes`` holds what an analysis says.
"""

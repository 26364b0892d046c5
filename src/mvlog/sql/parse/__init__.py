"""Pass 1, parse: a view query as a sqlglot tree, and what can be read off a tree without a
catalog — names as PostgreSQL folds them (``sqltree``), the rules that hold for a query of any
class (``restrictions``), the project's views a query reads (``dependencies``), PostgreSQL views
expanded to their definitions (``expansion``).
"""

"""Pass 6, strategies: one per :class:`~mvlog.sql.pieces.shape.ShapeKind`, each owning what a
refresh asks of a view of that kind — its reads, its state tables (create, update, rebuild, their
names for drop and size), every statement it sends — registered in ``registry`` (one line each).
"""

"""Pass 4, the graph of pieces: a query that does not analyse as one shape split into pieces that
do (``decompose``), and each view or piece joined with its logs into a
:class:`~mvlog.sql.pieces.shape.ViewShape` — plain data with its
:class:`~mvlog.sql.pieces.shape.ShapeKind` — by the builder of its class (``choice`` picks it,
``keying`` builds it, with ``lineage`` and ``aggplan``).
"""

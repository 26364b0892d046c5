"""Pass 5, SQL generation: the blocks a fast refresh's statements are made of, as sqlglot trees —
the changed keys and the rows they touch (``changes``), the reads (``sqlgen``, ``restricted``), the
key map's upkeep (``keymap``), an aggregate's group table and its probes (``aggdelta``, ``aggprobe``).
"""

"""mvlog's catalog: the ``mvlog`` schema's own tables, each named in SQL by one module of this
package and by no other module of mvlog (``tests/postgres/test_catalog_owner.py`` checks):

- :mod:`.views`: :class:`Catalog`, what the rest of mvlog holds: the registry of views and the
  logs each reads, the DDL on their tables, the views found unchanged, and the schema itself
  (install, upgrade, version check);
- :mod:`.history`: the refresh history, a part of :class:`Catalog`;
- :mod:`.verify_results`: what each ``mvlog verify`` found (the dashboard shows a view's last);
- :mod:`.log_registry`: the logs' registry (one row per materialized view log) and the partitions
  each log covers, for :mod:`mvlog.postgres.logs` and the capture;
- :mod:`.capture_state`: the logical capture's position and slot;
- :mod:`.rows`: the rows as typed values.

Statements are functions (or methods) on a cursor or a :class:`~mvlog.postgres.source.Source`: the
caller keeps its transactions and locks. A statement that reads another module's table asks that
module for the fragment. The package imports nothing of :mod:`mvlog.postgres.capture` (the
capture imports it). The per-table change logs and the functions of ``sql/`` are not catalog
tables: :mod:`mvlog.postgres.logs` and :mod:`mvlog.postgres.capture` own them.
"""

from __future__ import annotations

from mvlog.postgres.catalog.rows import HistoryRow, LogStatusRow, ViewRegistration, ViewState, ViewStatusRow
from mvlog.postgres.catalog.views import SCHEMA_VERSION, UNCHANGED_REASON, Catalog

__all__ = ["SCHEMA_VERSION", "UNCHANGED_REASON", "Catalog", "HistoryRow", "LogStatusRow", "ViewRegistration",
           "ViewState", "ViewStatusRow"]

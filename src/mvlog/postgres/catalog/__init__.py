"""mvlog's catalog: the ``mvlog`` schema's own tables, and the one place that names them in SQL.

:class:`Catalog` (:mod:`.views`) is what the rest of mvlog holds: the registry of views with the
schema (:mod:`.schema`) and the refresh history (:mod:`.history`) as its parts. The rows are
typed values of :mod:`.rows`.

The per-table change logs (``mvlog.mlog$…``) and the functions of ``sql/`` are not catalog
tables: :mod:`mvlog.postgres.logs` and :mod:`mvlog.postgres.capture` own them.
"""

from __future__ import annotations

from mvlog.postgres.catalog.rows import HistoryRow, LogStatusRow, ViewRegistration, ViewState, ViewStatusRow
from mvlog.postgres.catalog.schema import SCHEMA_VERSION
from mvlog.postgres.catalog.views import UNCHANGED_REASON, Catalog

__all__ = ["SCHEMA_VERSION", "UNCHANGED_REASON", "Catalog", "HistoryRow", "LogStatusRow", "ViewRegistration",
           "ViewState", "ViewStatusRow"]

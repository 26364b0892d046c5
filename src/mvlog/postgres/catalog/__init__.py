"""mvlog's catalog: the ``mvlog`` schema's own tables, and the one place that names them in SQL.

Every statement on ``mvlog.views``, ``mvlog.view_logs``, ``mvlog.logs``, ``mvlog.log_partitions``,
``mvlog.capture_state``, ``mvlog.refresh_history``, ``mvlog.ddl_log`` and ``mvlog.schema_version``
(and the function ``mvlog.unchanged_views``, which reads them) is here; every other module asks for
it (``tests/postgres/test_catalog_owner.py`` checks). The modules:

- :mod:`.views`: :class:`Catalog`, what the rest of mvlog holds: the registry of views
  (``views``, ``view_logs``, ``ddl_log``, ``unchanged_views``), with the schema (:mod:`.schema`:
  install, version check) and the refresh history (:mod:`.history`: ``refresh_history``) as
  its parts;
- :mod:`.log_registry`: the rows of ``mvlog.logs`` and ``mvlog.log_partitions``, for
  :mod:`mvlog.postgres.logs` and the capture;
- :mod:`.capture_state`: the logical capture's row of ``mvlog.capture_state``;
- :mod:`.rows`: the rows as typed values.

Statements are functions (or methods) on a cursor or a :class:`~mvlog.postgres.source.Source`: the
caller keeps its transactions and locks. The package imports nothing of
:mod:`mvlog.postgres.capture` (the capture imports it). The per-table change logs
(``mvlog.mlog$…``) and the functions of ``sql/`` are not catalog tables:
:mod:`mvlog.postgres.logs` and :mod:`mvlog.postgres.capture` own them.
"""

from __future__ import annotations

from mvlog.postgres.catalog.rows import HistoryRow, LogStatusRow, ViewRegistration, ViewState, ViewStatusRow
from mvlog.postgres.catalog.schema import SCHEMA_VERSION
from mvlog.postgres.catalog.views import UNCHANGED_REASON, Catalog

__all__ = ["SCHEMA_VERSION", "UNCHANGED_REASON", "Catalog", "HistoryRow", "LogStatusRow", "ViewRegistration",
           "ViewState", "ViewStatusRow"]

"""The verify results, and the one module that names their table in SQL: a row per view each
``mvlog verify`` compared (what ``mvlog verify --json`` gives for it, docs/json.md), and the newest
row of each view, for a dashboard's "last verified".

Results travel as that JSON (the dict of ``VerifyResult.to_json()``): this package is below the
operations and knows no ``VerifyResult``. :func:`record` runs in the caller's transaction;
:func:`last_results`, given the :class:`~mvlog.postgres.source.Source`, in one of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mvlog.postgres.source import Cursor, Source

# The result's fields, as VerifyResult.to_json() names them, in its order (beside "view").
FIELDS = ("mode", "status", "rows_compared", "pending_keys", "mismatched", "mismatches", "delta_version",
          "snaptime", "repaired", "reason", "seconds")


def record(cur: Cursor, result: dict[str, Any]) -> None:
    """Record one view's verify result (``VerifyResult.to_json()``), verified now."""
    cur.execute(
        """
        INSERT INTO mvlog.verify_history (view_name, mode, status, rows_compared, pending_keys, mismatched,
                                          mismatches, delta_version, snaptime, repaired, reason, seconds)
        VALUES (%(view)s, %(mode)s, %(status)s, %(rows_compared)s, %(pending_keys)s, %(mismatched)s,
                %(mismatches)s::jsonb, %(delta_version)s, %(snaptime)s::timestamptz, %(repaired)s, %(reason)s,
                %(seconds)s)
        """,
        {**{name: result.get(name) for name in ("view", *FIELDS)},
         "mismatches": json.dumps(result.get("mismatches") or [])},
    )


def last_results(source: Source, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The newest verify result of each of the views ``names`` that has one: its JSON (the keys of
    ``VerifyResult.to_json()``) and ``verified_at``, ISO 8601 strings both times."""
    rows = source.query(
        """
        SELECT DISTINCT ON (view_name) view_name, mode, status, rows_compared, pending_keys, mismatched,
               mismatches, delta_version, snaptime, repaired, reason, seconds, verified_at
        FROM mvlog.verify_history WHERE view_name = ANY(%s) ORDER BY view_name, id DESC
        """,
        (list(names),),
    )
    found = {}
    for view, *values, verified_at in rows:
        result: dict[str, Any] = {"view": view, **dict(zip(FIELDS, values, strict=True))}
        result["snaptime"] = result["snaptime"].isoformat() if result["snaptime"] else None
        result["verified_at"] = verified_at.isoformat()
        found[view] = result
    return found

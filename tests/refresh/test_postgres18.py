"""A fast refresh per capture kind on PostgreSQL 18 (#48, item 8): what managed services run.

The capture contract runs on 18 too (``tests/postgres/capture/test_contract.py``); this is the
end-to-end smoke: apply, writes of every kind, a fast refresh, and the Delta views equal to their
queries run in PostgreSQL 18.
"""

from __future__ import annotations

import pytest

from mvlog.postgres.capture import CAPTURE_KINDS
from tests.conftest import assert_views_match, project_maker, refresh_ok

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text, segment text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(12,2));
INSERT INTO customers SELECT g, 'c' || g, CASE WHEN g % 2 = 0 THEN 'retail' ELSE 'trade' END
FROM generate_series(1, 50) g;
INSERT INTO orders SELECT g, 1 + g % 50, g * 1.5 FROM generate_series(1, 500) g;
"""
VIEWS = [
    {"name": "order_lines", "refresh": "fast",
     "query": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id"},
    {"name": "per_segment", "refresh": "fast",
     "query": "SELECT c.segment, count(*) AS n, sum(o.amount) AS total FROM orders o "
              "JOIN customers c ON c.id = o.customer_id GROUP BY c.segment"},
]
WRITES = """
BEGIN;
UPDATE orders SET amount = amount + 1 WHERE id <= 20;
UPDATE orders SET id = id + 1000 WHERE id BETWEEN 21 AND 25;
DELETE FROM orders WHERE id BETWEEN 26 AND 30;
COMMIT;
UPDATE customers SET segment = 'trade' WHERE id = 2;
INSERT INTO orders VALUES (2000, 7, 99.99), (2001, NULL, 5);
"""


@pytest.mark.parametrize("capture", CAPTURE_KINDS)
def test_a_fast_refresh_on_postgresql_18_is_exact(db18, tmp_path, request, capture):
    assert db18.execute("SHOW server_version_num")[0][0].startswith("18")
    db18.execute(SCHEMA)
    with project_maker(db18, tmp_path, request) as make:
        project = make([{"table": t, "capture": capture} for t in ("customers", "orders")], VIEWS)
        project.apply()
        db18.execute(WRITES)
        assert {result.method for result in refresh_ok(project).values()} == {"fast"}
        assert_views_match(project, VIEWS)

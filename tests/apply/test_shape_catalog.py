"""Every shape the README's table lists as fast is fast at ``apply`` (issue #61): PostgreSQL plans
every statement mvlog would send for it (``validate`` has it EXPLAIN them, in a transaction that is
rolled back), so a shape mvlog claims never falls back to a complete refresh in silence; and a
shape it refuses is refused with its own reason, never with PostgreSQL's error about SQL mvlog
wrote. PostgreSQL only: no Spark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mvlog.config import load_config
from mvlog.errors import ConfigError
from mvlog.project import Project

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE nation (id int PRIMARY KEY, name text NOT NULL, region int);
CREATE TABLE customers (id int PRIMARY KEY, name text, nation_id int, segment text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, status text, amount numeric(10,2), priority int);
CREATE TABLE lines (order_id int, line int, part int, qty numeric(10,2), PRIMARY KEY (order_id, line));
CREATE TABLE eu_orders (id int PRIMARY KEY, region text, amount numeric(10,2));
CREATE TABLE us_orders (id int PRIMARY KEY, region text, amount numeric(10,2));
"""
TABLES = ["nation", "customers", "orders", "lines", "eu_orders", "us_orders"]

# One or more queries per row of the README's table of view classes (its first column).
FAST: dict[str, list[str]] = {
    "simple": ["SELECT id, amount * 2 AS double, upper(status) AS s FROM orders WHERE amount > 1"],
    "join": [
        "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id",
        "SELECT o.id, c.name, n.name AS nation FROM orders o, customers c, nation n "
        "WHERE c.id = o.customer_id AND n.id = c.nation_id",
        "SELECT a.id, b.id AS other FROM orders a JOIN orders b ON b.customer_id = a.customer_id",
    ],
    "join (outer)": [
        "SELECT c.id, o.id AS order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.id WHERE o.id IS NULL",
        "SELECT c.id, o.id AS order_id, n.name FROM customers c JOIN nation n ON n.id = c.nation_id "
        "RIGHT JOIN orders o ON o.customer_id = c.id",
    ],
    "aggregate": [
        "SELECT customer_id, count(*) AS n, sum(amount) AS total, avg(amount) AS mean, max(amount) AS top, "
        "count(DISTINCT status) AS statuses FROM orders GROUP BY customer_id HAVING count(*) > 1",
        "SELECT count(*) AS n, sum(amount) AS total FROM orders",
        "SELECT DISTINCT customer_id, status FROM orders",
        "SELECT amount > 50 AS big, stddev(amount) AS spread FROM orders GROUP BY amount > 50",
        "SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id "
        "HAVING sum(amount) > (SELECT avg(amount) * 2 FROM orders)",  # a parameter (TPC-H Q11)
        "SELECT c.segment, count(DISTINCT o.customer_id) AS buyers FROM orders o, customers c "
        "WHERE c.id = o.customer_id AND o.id NOT IN (SELECT o2.id FROM orders o2 WHERE o2.status = 'x') "
        "GROUP BY c.segment",
    ],
    "join (full)": ["SELECT c.id, o.id AS order_id FROM customers c FULL JOIN orders o ON o.customer_id = c.id"],
    "union": ["SELECT id, amount FROM eu_orders UNION ALL SELECT id, amount FROM us_orders"],
    "union (distinct)": ["SELECT region FROM eu_orders UNION SELECT region FROM us_orders"],
    "aggregate (over `UNION ALL`, `UNION`, `SELECT DISTINCT`)": [
        "SELECT s.customer_id, count(*) AS n FROM (SELECT DISTINCT customer_id, status FROM orders) s GROUP BY 1",
        "SELECT s.region, sum(s.amount) AS total FROM (SELECT region, amount FROM eu_orders "
        "UNION ALL SELECT region, amount FROM us_orders) s GROUP BY s.region",
    ],
    "join (subquery)": [
        "SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c WHERE c.id = o.customer_id)",
        "SELECT c.id, (SELECT max(o.amount) FROM orders o WHERE o.customer_id = c.id) AS top FROM customers c",
        "SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c JOIN nation n ON n.id = c.nation_id "
        "WHERE c.id = o.customer_id AND n.region = 1)",
        # TPC-H's shapes over comma joins (Q2, Q18, Q21): the subquery's condition names several FROM items
        "SELECT o.id, c.name FROM orders o, customers c WHERE c.id = o.customer_id AND o.amount = "
        "(SELECT max(o2.amount) FROM orders o2, customers c2 WHERE c2.id = o2.customer_id "
        "AND c2.nation_id = c.nation_id)",
        "SELECT c.name, o.id, sum(l.qty) AS qty FROM customers c, orders o, lines l WHERE o.id IN "
        "(SELECT order_id FROM lines GROUP BY order_id HAVING sum(qty) > 300) AND c.id = o.customer_id "
        "AND o.id = l.order_id GROUP BY c.name, o.id",
        "SELECT c.name, count(*) AS n FROM customers c, lines l1, orders o WHERE o.id = l1.order_id "
        "AND c.id = o.customer_id AND EXISTS (SELECT 1 FROM lines l2 WHERE l2.order_id = l1.order_id "
        "AND l2.part <> l1.part) AND NOT EXISTS (SELECT 1 FROM lines l3 WHERE l3.order_id = l1.order_id "
        "AND l3.part <> l1.part AND l3.qty > 10) GROUP BY c.name",
        # an uncorrelated scalar subquery compared with one table's rows (Q22)
        "SELECT o.id, o.amount FROM orders o WHERE o.amount > (SELECT avg(o2.amount) FROM orders o2) "
        "AND NOT EXISTS (SELECT 1 FROM lines l WHERE l.order_id = o.id)",
    ],
    "window": ["SELECT * FROM (SELECT o.id, o.customer_id, row_number() OVER (PARTITION BY customer_id "
               "ORDER BY id DESC) AS rn FROM orders o) s WHERE rn = 1"],
    "grouping sets": ["SELECT status, customer_id, sum(amount) AS total FROM orders "
                      "GROUP BY ROLLUP (status, customer_id)"],
    "aggregated derived table, joined": [
        "SELECT c.name, t.total FROM customers c JOIN (SELECT customer_id, sum(amount) AS total FROM orders "
        "GROUP BY customer_id) t ON t.customer_id = c.id WHERE t.total > 100",
    ],
    "composed": [
        "SELECT o.id, o.amount * (SELECT max(n.region) FROM nation n) AS x FROM orders o",  # a scalar aggregate
        "SELECT count(*) AS n FROM (SELECT id FROM eu_orders INTERSECT SELECT id FROM us_orders) t",
        "SELECT region FROM eu_orders EXCEPT SELECT region FROM us_orders",
        "SELECT customer_id, status, sum(amount) AS s, sum(amount) * 100 / sum(sum(amount)) OVER (PARTITION BY status) "
        "AS share FROM orders GROUP BY customer_id, status",  # a window over an aggregate
        "WITH a AS (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id), "
        "b AS (SELECT customer_id, sum(qty) AS q FROM lines l JOIN orders o ON o.id = l.order_id GROUP BY customer_id) "
        "SELECT a.customer_id, a.n, b.q FROM a JOIN b ON a.customer_id = b.customer_id",  # two aggregates joined
        "SELECT region, sum(total) AS total FROM (SELECT region, sum(amount) AS total FROM eu_orders GROUP BY region "
        "UNION ALL SELECT region, sum(amount) FROM us_orders GROUP BY region) t GROUP BY region",
        "SELECT status, customer_id, sum(amount) AS total, rank() OVER (PARTITION BY grouping(customer_id) "
        "ORDER BY sum(amount) DESC) AS r FROM orders GROUP BY ROLLUP (status, customer_id)",
        "SELECT n, count(*) AS customers FROM (SELECT c.id, count(o.id) AS n FROM customers c "
        "LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id) t GROUP BY n",
        "WITH totals AS (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) "
        "SELECT c.id, t.total FROM customers c, totals t WHERE c.id = t.customer_id "
        "AND t.total = (SELECT max(total) FROM totals)",
        "SELECT c.name FROM customers c WHERE c.id IN (SELECT o.customer_id FROM orders o WHERE o.amount > "
        "(SELECT 0.5 * sum(o2.amount) FROM orders o2 WHERE o2.customer_id = o.customer_id AND o2.status = 'open'))",
    ],
    "top-N": [
        "SELECT id, amount FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 5",
        "SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id ORDER BY 2 DESC LIMIT 3 OFFSET 1",
        "SELECT c.name, o.id, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id "
        "WHERE EXISTS (SELECT 1 FROM lines l WHERE l.order_id = o.id) ORDER BY amount FETCH FIRST 10 ROWS ONLY",
        "SELECT id FROM orders ORDER BY amount + 1, status, id LIMIT 5",  # by what is no output: hidden outputs
    ],
    "(merged)": [
        "WITH s AS (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) "
        "SELECT customer_id, total FROM s WHERE total > 5",
        "SELECT o.id, c.name FROM orders o JOIN (customers c JOIN nation n ON n.id = c.nation_id) "
        "ON c.id = o.customer_id",
    ],
}
# Shapes the README lists under "other", and what the refusal must say.
REFUSED = {
    "SELECT id FROM orders LIMIT 5": "LIMIT without ORDER BY",
    "SELECT id FROM orders ORDER BY id FETCH FIRST 5 ROWS WITH TIES": "WITH TIES",
    "SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM customers WHERE segment = 'x')": "uncorrelated subquery",
    "SELECT id FROM eu_orders INTERSECT ALL SELECT id FROM us_orders": "INTERSECT",
    "SELECT region FROM eu_orders EXCEPT ALL SELECT region FROM us_orders": "EXCEPT",
    "SELECT count(*) AS n FROM (SELECT id FROM eu_orders UNION ALL SELECT id FROM us_orders) s":
        "global aggregate over a UNION ALL",
    "SELECT id, rank() OVER (ORDER BY amount) AS r FROM orders": "PARTITION BY that they all share",
    "SELECT DISTINCT ON (customer_id) id, customer_id FROM orders ORDER BY customer_id, id": "DISTINCT ON",
    "SELECT o.id FROM orders o JOIN generate_series(1, 3) g ON g = o.priority": "functions and VALUES in FROM",
    "SELECT id, random() AS r FROM orders": "non-deterministic",
    "SELECT status, priority, count(*) AS n FROM orders GROUP BY ROLLUP (1, 2)": "GROUP BY positions",
    "SELECT o.id FROM orders o WHERE o.customer_id NOT IN (SELECT nation_id FROM customers)": "NULLs",
}


def _validate(db, tmp_path, views: list[dict]) -> None:
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({"source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
                                      "logs": [{"table": t} for t in TABLES], "views": views}))
    with Project(load_config(config)) as project:
        project.validate()


@pytest.fixture
def shop_schema(db):
    db.execute(SCHEMA)
    return db


def test_every_class_of_the_readme_s_table_has_examples_here():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    table = readme[readme.index("| class | shape | fast refresh | view key |"):]
    rows = table.splitlines()[2:]
    rows = rows[:next(i for i, row in enumerate(rows) if not row.startswith("| "))]
    classes = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    fast = [c for c in classes if c not in ("view over views", "other")]  # views over views: tests/refresh
    assert set(fast) == set(FAST), set(fast) ^ set(FAST)


@pytest.mark.parametrize("shape", sorted(FAST))
def test_every_shape_listed_as_fast_plans_its_refresh_sql_in_postgresql(shop_schema, tmp_path, shape):
    failures = []
    for i, query in enumerate(FAST[shape]):
        try:
            _validate(shop_schema, tmp_path, [{"name": f"v{i}", "refresh": "fast", "query": query}])
        except ConfigError as exc:
            failures.append(str(exc))
    assert not failures, failures


@pytest.mark.parametrize("query", sorted(REFUSED))
def test_a_refused_shape_is_named_with_its_reason(shop_schema, tmp_path, query):
    with pytest.raises(ConfigError, match=r"refresh: fast is impossible") as refused:
        _validate(shop_schema, tmp_path, [{"name": "v", "refresh": "fast", "query": query}])
    assert re.search(REFUSED[query], str(refused.value), re.IGNORECASE), str(refused.value)
    assert "PostgreSQL refused" not in str(refused.value)

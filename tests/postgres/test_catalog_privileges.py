"""Least privilege: writers need nothing from mvlog; a refresh role (refresh, verify) needs SELECT plus
mvlog_refresh."""

from __future__ import annotations

import psycopg2
import pytest
from conftest import assert_views_match

from mvlog.config import SourceConfig
from mvlog.errors import SourceError
from mvlog.postgres.source import read_sql
from mvlog.project import Project

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "open_orders", "refresh": "fast", "query": "SELECT id, amount FROM orders WHERE status = 'open'"},
    {"name": "order_names", "refresh": "fast",
     "query": "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"},
    {"name": "per_customer", "refresh": "fast",
     "query": "SELECT customer_id, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer_id"},
    # composed: two aggregates joined (its record fills temporary tables: PUBLIC's TEMPORARY right)
    {"name": "counts_and_top", "refresh": "fast",
     "query": "SELECT a.customer_id, a.n, b.top FROM (SELECT customer_id, count(*) AS n FROM orders "
              "GROUP BY customer_id) a JOIN (SELECT customer_id, max(amount) AS top FROM orders "
              "GROUP BY customer_id) b ON a.customer_id = b.customer_id"},
    # a top-N margin and a range parameter's table: state a refresh role refills, as a key map
    {"name": "biggest", "refresh": "fast", "query": "SELECT id, amount FROM orders ORDER BY amount DESC, id LIMIT 3"},
    {"name": "above_average", "refresh": "fast",
     "query": "SELECT o.id, o.amount FROM orders o WHERE o.amount > (SELECT avg(o2.amount) FROM orders o2)"},
]


def test_writer_and_refresh_roles(pg, db, make_project):
    db.execute("CREATE TABLE customers (id int PRIMARY KEY, name text); "
               "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(8,2), status text); "
               "INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 10) g; "
               "INSERT INTO orders SELECT g, 1 + g % 10, g, 'open' FROM generate_series(1, 50) g")
    writer, etl = f"writer_{db.name}", f"etl_{db.name}"
    db.execute(f'CREATE ROLE "{writer}" LOGIN PASSWORD \'w-pw\'; CREATE ROLE "{etl}" LOGIN PASSWORD \'e-pw\'')
    db.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON customers, orders TO "{writer}"')
    admin = make_project(["customers", "orders"], VIEWS)
    assert [r.error for r in admin.apply().builds] == [None] * len(VIEWS)
    db.execute(read_sql("roles.sql"))
    db.execute(f'GRANT mvlog_refresh TO "{etl}"; GRANT SELECT ON customers, orders TO "{etl}"')

    # Writers: plain DML works (the log triggers run as their owner); the logs are out of reach,
    # and a hostile search_path changes nothing.
    conn = psycopg2.connect(pg.dsn(db.name, user=writer, password="w-pw"))
    with conn.cursor() as cur:
        cur.execute("SET search_path = pg_temp, public")
        cur.execute("INSERT INTO orders VALUES (100, 3, 9.99, 'open')")
        cur.execute("UPDATE orders SET status = 'done' WHERE id = 2")
        cur.execute("UPDATE orders SET id = 200 WHERE id = 4")
        cur.execute("UPDATE customers SET name = 'renamed' WHERE id = 5")
        cur.execute("DELETE FROM orders WHERE id = 6")
    conn.commit()
    with conn.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
        cur.execute("SELECT * FROM mvlog.logs")
    conn.close()
    # Every trigger function pins its search_path.
    assert db.execute("SELECT bool_and(prosecdef), array_agg(DISTINCT proconfig[1]) "
                      "FROM pg_proc WHERE proname LIKE 'mlog$%'") == [(True, ["search_path=pg_catalog, pg_temp"])]

    # The refresh role: fast and complete refreshes, status, verify, purge; not apply.
    config = admin.config.model_copy(update={"source": SourceConfig(dsn=pg.dsn(db.name, user=etl, password="e-pw"))})
    with Project(config) as project:
        results = project.refresh()
        assert [(r.method, r.error) for r in results] == [("fast", None)] * len(VIEWS)
        assert_views_match(project, VIEWS)
        assert [r.error for r in project.refresh(complete=True)] == [None] * len(VIEWS)
        db.execute("UPDATE orders SET customer_id = 1 WHERE id = 7")
        assert [(r.method, r.error) for r in project.refresh()] == [("fast", None)] * len(VIEWS)
        assert_views_match(project, VIEWS)
        assert {v["staleness"] for v in project.status()["views"]} == {"fresh"}
        # verify, which records what it found in the catalog
        assert [(r.status, r.reason) for r in project.verify()] == [("ok", None)] * len(VIEWS)
        assert {name: r["status"] for name, r in project.catalog.last_verify([v["name"] for v in VIEWS]).items()} == {
            v["name"]: "ok" for v in VIEWS}
        # A catalog upgraded to them after roles.sql ran (version 7 to 8): the default privileges do.
        db.execute("DROP TABLE mvlog.verify_history; DELETE FROM mvlog.schema_version WHERE version >= 8")
        admin.apply()
        assert [(r.status, r.reason) for r in project.verify(["open_orders"])] == [("ok", None)]
        assert list(project.catalog.last_verify([v["name"] for v in VIEWS])) == ["open_orders"]
        project.purge()
        with pytest.raises(SourceError,
                           match=r"permission denied for database .*\(mvlog apply needs the rights of the owner"):
            project.apply()
        with pytest.raises(SourceError, match="permission denied for table orders"):
            project.source.query("UPDATE orders SET amount = 0")

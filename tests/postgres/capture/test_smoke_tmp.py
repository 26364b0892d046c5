from __future__ import annotations

import pytest
from conftest import assert_views_match, refresh_ok

pytestmark = pytest.mark.integration

VIEWS = [
    {"name": "v_items", "refresh": "fast", "query": "SELECT id, qty, label FROM items WHERE qty > 1"},
    {"name": "v_grp", "refresh": "fast", "query": "SELECT grp, count(*) AS n, sum(qty) AS q FROM items GROUP BY grp"},
]


def test_smoke(db, make_project):
    db.execute("CREATE TABLE items (id int PRIMARY KEY, grp int, qty int, label text)")
    db.execute("INSERT INTO items SELECT g, g % 3, g, 'x' || g FROM generate_series(1, 20) g")
    project = make_project([{"table": "items", "capture": "logical"}], VIEWS)
    report = project.apply()
    assert [r.error for r in report.builds] == [None, None]
    assert db.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'mvlog$%'") == [(0,)]
    db.execute("UPDATE items SET qty = qty + 1 WHERE id < 5")
    db.execute("UPDATE items SET id = 100 WHERE id = 7")
    db.execute("DELETE FROM items WHERE id = 9")
    db.execute("INSERT INTO items VALUES (50, 1, 50, 'new')")
    open_conn = db.connect()
    with open_conn.cursor() as cur:
        cur.execute("UPDATE items SET qty = 999 WHERE id = 10")  # open across the refresh
    results = refresh_ok(project)
    assert {r.method for r in results.values()} == {"fast"}
    assert_views_match(project, VIEWS)
    open_conn.commit()
    open_conn.close()
    results = refresh_ok(project)
    assert_views_match(project, VIEWS)
    db.execute("TRUNCATE items")
    db.execute("INSERT INTO items VALUES (1, 1, 5, 'a')")
    results = refresh_ok(project, complete=True)
    print({v: r.method for v, r in results.items()})
    assert_views_match(project, VIEWS)
    print(project.logs.decoding.status())

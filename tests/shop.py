"""The shop: three tables (nation, customers, orders), their seed rows, and random DML over them
for the correctness oracles of join-like views."""

from __future__ import annotations

import contextlib

import psycopg2
from conftest import assert_views_match, new_database, project_maker, refresh_ok, varied
from hypothesis import strategies as st

SCHEMA = """
CREATE TABLE nation (id integer PRIMARY KEY, name text NOT NULL, region integer);
CREATE TABLE customers (id integer PRIMARY KEY, name text, nation_id integer, segment text);
CREATE TABLE orders (
    id          integer PRIMARY KEY,
    customer_id integer,
    status      text,                -- NULL is a group of its own
    amount      numeric(10,2),
    priority    integer
);
CREATE INDEX ON orders (customer_id);
CREATE INDEX ON orders (status);
"""
TABLES = ("nation", "customers", "orders")
# The seed state again, changing only the rows that differ from it (kept in schema ``seed`` by
# build_shop): the refresh after a reset reads the keys a test changed, not every key.
_SAME = "ROW(x.*) IS NOT DISTINCT FROM ROW(s.*)"
RESET = "".join(f"DELETE FROM {t} x WHERE NOT EXISTS (SELECT FROM seed.{t} s WHERE {_SAME});" for t in TABLES) + \
    "".join(f"INSERT INTO {t} SELECT * FROM seed.{t} s WHERE NOT EXISTS (SELECT FROM {t} x WHERE {_SAME});"
            for t in TABLES)
SEED = """
INSERT INTO nation VALUES (1, 'France', 1), (2, 'Japan', 2), (3, 'Peru', 1);
INSERT INTO customers VALUES (1, 'Ada', 1, 'retail'), (2, 'Bo', 2, NULL), (3, 'Cy', 1, 'corp'), (4, 'Di', 3, 'retail');
INSERT INTO orders VALUES (1, 1, 'open', 10.00, 1), (2, 1, 'open', 5.50, 2), (3, 2, NULL, 7.25, 3),
                          (4, 3, 'shipped', NULL, 1), (5, 4, 'cancelled', 3.00, 5);
"""

nation_ids = st.integers(1, 4)
customer_ids = st.integers(1, 8)
order_ids = st.integers(1, 15)
statuses = st.sampled_from(["open", "shipped", "cancelled", None])
amounts = st.none() | st.decimals(min_value=-50, max_value=500, places=2, allow_nan=False, allow_infinity=False)
ops = st.one_of(
    st.tuples(st.just("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)"),
              st.tuples(order_ids, st.none() | customer_ids, statuses, amounts, st.none() | st.integers(0, 9))),
    st.tuples(st.just("UPDATE orders SET status = %s, amount = %s WHERE id = %s"),
              st.tuples(statuses, amounts, order_ids)),
    st.tuples(st.just("UPDATE orders SET customer_id = %s WHERE id = %s"),  # NULLing and un-NULLing too
              st.tuples(st.none() | customer_ids, order_ids)),
    st.tuples(st.just("UPDATE orders SET id = %s WHERE id = %s"), st.tuples(order_ids, order_ids)),
    st.tuples(st.just("DELETE FROM orders WHERE id = %s"), st.tuples(order_ids)),
    st.tuples(st.just("DELETE FROM orders WHERE status IS NOT DISTINCT FROM %s"), st.tuples(statuses)),
    st.tuples(st.just("INSERT INTO customers VALUES (%s, %s, %s, %s)"),
              st.tuples(customer_ids, st.sampled_from(["Ann", "Ben", None]), st.none() | nation_ids,
                        st.sampled_from(["retail", "corp", None]))),
    st.tuples(st.just("UPDATE customers SET nation_id = %s, segment = %s, name = coalesce(%s, name) WHERE id = %s"),
              st.tuples(st.none() | nation_ids, st.sampled_from(["retail", "corp", None]),
                        st.sampled_from([None, "Cat", "Dan"]), customer_ids)),
    st.tuples(st.just("UPDATE customers SET name = NULL WHERE id = %s"), st.tuples(customer_ids)),
    st.tuples(st.just("UPDATE customers SET id = %s WHERE id = %s"), st.tuples(customer_ids, customer_ids)),
    st.tuples(st.just("DELETE FROM customers WHERE id = %s"), st.tuples(customer_ids)),
    st.tuples(st.just("INSERT INTO nation VALUES (%s, %s, %s)"),
              st.tuples(nation_ids, st.sampled_from(["Chile", "Oman"]), st.integers(1, 2))),
    st.tuples(st.just("UPDATE nation SET region = %s, name = %s WHERE id = %s"),
              st.tuples(st.integers(1, 2), st.sampled_from(["Chile", "Oman", "Peru"]), nation_ids)),
    st.tuples(st.just("DELETE FROM nation WHERE id = %s"), st.tuples(nation_ids)),
)
# A transaction left open across the next refresh (committed after it): rows of its own, which the
# other statements never touch, so that it holds no lock they wait for.
held = st.tuples(st.just("hold"), st.one_of(
    st.tuples(st.just("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)"),
              st.tuples(st.integers(100, 120), st.none() | customer_ids, statuses, amounts, st.none())),
    st.tuples(st.just("INSERT INTO customers VALUES (%s, %s, %s, %s)"),
              st.tuples(st.integers(100, 120), st.just("Held"), st.none() | nation_ids, st.just("corp")))))
sequences = st.lists(st.one_of(ops, st.lists(ops, min_size=2, max_size=4), st.just("refresh"), held), min_size=3,
                     max_size=12).filter(varied)


def strategy_views(prefix: str) -> list[dict]:
    """A view of every strategy over the shop, named ``prefix`` + what it is: simple, join, aggregate
    by deltas (NULL group keys, a change feed: always a MERGE), aggregate recomputed, outer join
    (NULL-extended keys, a change feed), UNION, grouping sets, a view over a view, a window, a
    semi-join, a row against its class's average (TPC-DS q06's shape), a top-N."""
    return [
        {"name": f"{prefix}simple", "refresh": "fast",
         "query": "SELECT id, customer_id, amount FROM orders WHERE status IS DISTINCT FROM 'cancelled'"},
        {"name": f"{prefix}join", "refresh": "fast",
         "query": "SELECT o.id AS order_id, c.name, n.name AS nation FROM orders o JOIN customers c "
                  "ON c.id = o.customer_id JOIN nation n ON n.id = c.nation_id"},
        {"name": f"{prefix}by_status", "refresh": "fast", "change_feed": True,
         "query": "SELECT status, count(*) AS n, sum(amount) AS total, max(amount) AS hi FROM orders GROUP BY status"},
        {"name": f"{prefix}recomputed", "refresh": "fast",
         "query": "SELECT customer_id, string_agg(status, ',' ORDER BY status) AS statuses FROM orders "
                  "GROUP BY customer_id"},
        {"name": f"{prefix}full_then_left", "refresh": "fast", "change_feed": True,
         "query": "SELECT o.id AS order_id, o.status, c.name, n.name AS nation FROM orders o "
                  "FULL OUTER JOIN customers c ON c.id = o.customer_id AND o.status <> 'cancelled' "
                  "LEFT JOIN nation n ON n.id = c.nation_id"},
        {"name": f"{prefix}union", "refresh": "fast",
         "query": "SELECT o.status AS label, c.segment FROM orders o LEFT JOIN customers c ON c.id = o.customer_id "
                  "UNION SELECT segment, 'c:' || segment FROM customers UNION SELECT n.name, NULL FROM nation n"},
        {"name": f"{prefix}sets", "refresh": "fast",
         "query": "SELECT status, customer_id, count(*) AS n, sum(amount) AS total FROM orders "
                  "GROUP BY GROUPING SETS ((status), (customer_id), ())"},
        {"name": f"{prefix}over_view", "refresh": "fast",
         "query": f"SELECT customer_id, count(*) AS n, sum(amount) AS total FROM {prefix}simple GROUP BY customer_id"},
        {"name": f"{prefix}window", "refresh": "fast",
         "query": "SELECT id, customer_id, rank() OVER (PARTITION BY customer_id ORDER BY id) AS nth FROM orders"},
        {"name": f"{prefix}exists", "refresh": "fast",
         "query": "SELECT c.id, c.name FROM customers c "
                  "WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"},
        {"name": f"{prefix}above_average", "refresh": "fast",
         "query": "SELECT c.nation_id, count(*) AS n FROM customers c, orders o WHERE c.id = o.customer_id "
                  "AND o.amount > (SELECT avg(o2.amount) FROM orders o2 WHERE o2.status = o.status) "
                  "GROUP BY c.nation_id"},
        {"name": f"{prefix}top", "refresh": "fast",
         "query": "SELECT id, customer_id, amount FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 3"},
    ]


def build_shop(db, make_project, views: list[dict], spark_mode: str, rewrite_max_rows: int = 0):
    """The shop's tables and seed rows, and a project whose ``views`` are applied (built) over them."""
    db.execute(SCHEMA)
    db.execute(SEED)
    db.execute("CREATE SCHEMA seed;" + "".join(f"CREATE TABLE seed.{t} AS TABLE {t};" for t in TABLES))
    project = make_project(list(TABLES), views, spark_mode=spark_mode, rewrite_max_rows=rewrite_max_rows)
    builds = project.apply().builds
    assert [r.error for r in builds] == [None] * len(views), [(r.view, r.error) for r in builds]
    return project


class SharedShop:
    """A shop built once for the tests of a module (a build of every view costs more than a
    refresh): ``seeded()`` hands the project over in the seed state, refreshing it back there if a
    test before changed it; the oracles reset it themselves (``random_dml_then_refresh``)."""

    def __init__(self, project, db, views: list[dict]):
        self.project = project
        self.db = db
        self.views = views
        self.seeded_state = True

    def seeded(self):
        if not self.seeded_state:
            self.db.execute(RESET)
            refresh_ok(self.project)
        self.seeded_state = False  # the test about to get it changes it
        return self.project

    def changed(self):
        """The project for a test that takes it in any state, and changes it."""
        self.seeded_state = False
        return self.project


@contextlib.contextmanager
def shared_shop(request, pg, directory, views: list[dict], spark_mode: str, rewrite_max_rows: int = 0):
    """A :class:`SharedShop` in a database of its own on ``pg`` (files in ``directory``), for a
    module-scoped fixture."""
    with new_database(pg) as db, project_maker(db, directory, request) as make:
        yield SharedShop(build_shop(db, make, views, spark_mode, rewrite_max_rows), db, views)


# Customer c's two orders are c - 1 and c - 1 + LARGE_CUSTOMERS (customer 1's: LARGE_CUSTOMERS and twice it).
LARGE_CUSTOMERS = 20_000


def build_large_shop(db) -> None:
    """The shop's tables with 20k customers and 40k orders (two per customer), analyzed: large
    enough for PostgreSQL's planner to prefer indexes for a handful of keys, and for a sequential
    scan to show in the tables' statistics as thousands of tuples; small enough that the views'
    builds and oracles cost the suite's Spark little."""
    db.execute(SCHEMA)
    db.execute("INSERT INTO customers SELECT g, 'c' || g, 1 + g %% 3, 'retail' FROM generate_series(1, %s) g",
               (LARGE_CUSTOMERS,))
    db.execute("INSERT INTO orders SELECT g, 1 + g %% %s, 'open', g %% 100, g %% 7 FROM generate_series(1, %s) g",
               (LARGE_CUSTOMERS, 2 * LARGE_CUSTOMERS))
    db.execute("ANALYZE")


@contextlib.contextmanager
def built_over_large_shop(db, make_project, view: dict, said_by_build: str, setup: str | None = None):
    """A project of one view over the large shop (then ``setup`` run), applied (its build's
    progress lines include ``said_by_build``, and the view equals its query); yields the project
    and the lines said after the build."""
    from conftest import assert_view_matches

    from mvlog.project import Project

    build_large_shop(db)
    if setup:
        db.execute(setup)
    said: list[str] = []
    with Project(make_project(["customers", "orders"], [view]).config, progress=said.append) as project:
        project.apply()
        assert [m for m in said if said_by_build in m], said  # the build's complete read
        assert_view_matches(project, view["name"])
        said.clear()
        yield project, said


def fast_refresh_and_check(project, views: list[dict]) -> None:
    """Refresh every view fast, then the oracle for each."""
    results = refresh_ok(project)
    assert {r.method for r in results.values()} <= {"fast", "fresh"}, {v: r.method for v, r in results.items()}
    check_views(project, views)


def check_fast_views(project, views: list[dict]) -> None:
    """Every one of ``views`` can be refreshed fast (status says so) and equals its query."""
    status = {v["name"]: v for v in project.status()["views"]}
    assert {v: s["fast_refresh"] for v, s in status.items()} == {v["name"]: True for v in views}, status
    check_views(project, views)


def check_views(project, views: list[dict]) -> None:
    """The oracle for every one of ``views``."""
    assert_views_match(project, views)


def random_dml_then_refresh(shop: SharedShop, sequence, views: list[dict]) -> None:
    """From the seed state, run ``sequence`` (statements, transactions of them, "refresh"),
    refreshing fast where it says so and at the end; after each refresh every view equals its
    query in PostgreSQL. A shop still as built starts at once (no reset, whose refresh of every
    view checks nothing)."""
    project, db = shop.seeded(), shop.db
    conn, holder = db.connect(), db.connect()
    held = unseen = False  # a transaction held open; one that committed after the last refresh
    try:
        with conn.cursor() as cur, holder.cursor() as hold:
            for step in [*sequence, "refresh", "last"]:
                if step == "last" and not unseen:
                    break
                if step in ("refresh", "last"):
                    conn.commit()
                    assert {r.method for r in refresh_ok(project).values()} <= {"fast", "fresh"}
                    check_views(project, views)
                    holder.commit()  # a transaction held open across the refresh commits after it
                    held, unseen = False, held
                    continue
                if step[0] == "hold":
                    held = True
                    hold.execute("SAVEPOINT op")
                    try:
                        hold.execute(*step[1])
                    except psycopg2.errors.UniqueViolation:
                        hold.execute("ROLLBACK TO SAVEPOINT op")
                    continue
                for statement, params in (step if isinstance(step, list) else [step]):  # a list: one transaction
                    cur.execute("SAVEPOINT op")
                    try:
                        cur.execute(statement, params)
                        cur.execute("RELEASE SAVEPOINT op")
                    except psycopg2.errors.UniqueViolation:
                        cur.execute("ROLLBACK TO SAVEPOINT op")
                conn.commit()
    finally:
        conn.close()
        holder.close()

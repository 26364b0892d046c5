"""TPC-H in PostgreSQL for the benchmarks: the tables from PyPI's ``tpchgen-cli`` with their
primary keys, and changes as TPC-H's refresh functions make them (RF1 inserts new orders with their
line items, RF2 deletes as many with theirs), with updates of the dimensions.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import psycopg2

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch22"
TABLES = ("region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem")

SCHEMA = """
CREATE TABLE customer (c_custkey integer PRIMARY KEY, c_name text, c_address text, c_nationkey integer,
    c_phone text, c_acctbal numeric(15,2), c_mktsegment text, c_comment text);
CREATE TABLE orders (o_orderkey bigint PRIMARY KEY, o_custkey integer, o_orderstatus char(1),
    o_totalprice numeric(15,2), o_orderdate date, o_orderpriority text, o_clerk text, o_shippriority integer,
    o_comment text);
CREATE TABLE lineitem (l_orderkey bigint, l_partkey integer, l_suppkey integer, l_linenumber integer,
    l_quantity numeric(15,2), l_extendedprice numeric(15,2), l_discount numeric(15,2), l_tax numeric(15,2),
    l_returnflag char(1), l_linestatus char(1), l_shipdate date, l_commitdate date, l_receiptdate date,
    l_shipinstruct text, l_shipmode text, l_comment text, PRIMARY KEY (l_orderkey, l_linenumber));
"""
JOIN = ("FROM lineitem l JOIN orders o ON o.o_orderkey = l.l_orderkey "
        "JOIN customer c ON c.c_custkey = o.o_custkey")
VIEWS = [
    {"name": "line_revenue", "refresh": "fast", "query":
        "SELECT l.l_orderkey, l.l_linenumber, o.o_orderdate, o.o_orderstatus, c.c_custkey, c.c_mktsegment, "
        f"l.l_quantity, l.l_extendedprice * (1 - l.l_discount) AS revenue {JOIN}"},
    {"name": "segment_month", "refresh": "fast", "query":
        "SELECT c.c_mktsegment, date_trunc('month', o.o_orderdate) AS month, "
        f"sum(l.l_extendedprice * (1 - l.l_discount)) AS revenue, count(*) AS lines {JOIN} "
        "GROUP BY c.c_mktsegment, date_trunc('month', o.o_orderdate)"},
]
# RF1: new orders copied from random existing ones (new keys above the largest), with their lines.
RF1 = """
CREATE TEMP TABLE new_orders AS
  SELECT o_orderkey AS template, (SELECT max(o_orderkey) FROM orders) + row_number() OVER () AS o_orderkey
  FROM (SELECT o_orderkey FROM orders ORDER BY random() LIMIT %(n)s) t;
INSERT INTO orders SELECT n.o_orderkey, o.o_custkey, o.o_orderstatus, o.o_totalprice, current_date,
    o.o_orderpriority, o.o_clerk, o.o_shippriority, o.o_comment
  FROM new_orders n JOIN orders o ON o.o_orderkey = n.template;
INSERT INTO lineitem SELECT n.o_orderkey, l.l_partkey, l.l_suppkey, l.l_linenumber, l.l_quantity,
    l.l_extendedprice, l.l_discount, l.l_tax, l.l_returnflag, l.l_linestatus, l.l_shipdate, l.l_commitdate,
    l.l_receiptdate, l.l_shipinstruct, l.l_shipmode, l.l_comment
  FROM new_orders n JOIN lineitem l ON l.l_orderkey = n.template;
DROP TABLE new_orders;
"""
# RF2: random orders deleted with their lines.
RF2 = """
CREATE TEMP TABLE gone AS SELECT o_orderkey FROM orders ORDER BY random() LIMIT %(n)s;
DELETE FROM lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM gone);
DELETE FROM orders WHERE o_orderkey IN (SELECT o_orderkey FROM gone);
DROP TABLE gone;
"""
FLIPS = """
UPDATE orders SET o_orderstatus = CASE o_orderstatus WHEN 'O' THEN 'F' ELSE 'O' END
  WHERE o_orderkey IN (SELECT o_orderkey FROM orders ORDER BY random() LIMIT %(n)s);
UPDATE customer SET c_mktsegment = CASE c_mktsegment WHEN 'BUILDING' THEN 'MACHINERY' ELSE 'BUILDING' END
  WHERE c_custkey IN (SELECT c_custkey FROM customer ORDER BY random() LIMIT %(customers)s);
"""


# The 22 queries' other tables: a customer's balance and segment, parts' prices, suppliers' balances, costs.
UPDATES = """
UPDATE customer SET c_acctbal = c_acctbal + 1,
    c_mktsegment = CASE c_mktsegment WHEN 'BUILDING' THEN 'MACHINERY' ELSE 'BUILDING' END
  WHERE c_custkey IN (SELECT c_custkey FROM customer ORDER BY random() LIMIT %(n)s);
UPDATE part SET p_retailprice = p_retailprice + 1
  WHERE p_partkey IN (SELECT p_partkey FROM part ORDER BY random() LIMIT %(tenth)s);
UPDATE supplier SET s_acctbal = s_acctbal - 1
  WHERE s_suppkey IN (SELECT s_suppkey FROM supplier ORDER BY random() LIMIT %(tenth)s);
UPDATE partsupp SET ps_supplycost = ps_supplycost + 0.01
  WHERE (ps_partkey, ps_suppkey) IN (SELECT ps_partkey, ps_suppkey FROM partsupp ORDER BY random() LIMIT %(n)s);
"""


def load(dsn: str, scale: float, data: Path, tables: tuple[str, ...] = ("customer", "orders", "lineitem"),
         schema: str = SCHEMA) -> dict[str, int]:
    """Generate ``tables`` with tpchgen-cli and COPY them into ``schema``'s tables; their row counts."""
    tool = shutil.which("tpchgen-cli")
    if tool is None:
        raise RuntimeError("tpchgen-cli is not installed: pip install -e '.[bench]'")
    subprocess.run([tool, "csv", "-s", str(scale), *[a for t in tables for a in ("-T", t)], "-o", str(data)],
                   check=True, stdout=subprocess.DEVNULL)
    counts = {}
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(schema)
        for table in tables:
            with open(data / f"{table}.csv", encoding="utf-8") as f:
                cur.copy_expert(f"COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true)", f)
            cur.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cur.fetchone()[0]
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    conn.cursor().execute("VACUUM ANALYZE")
    conn.close()
    return counts


def change(dsn: str, orders: int) -> None:
    """TPC-H's RF1 and RF2 on ``orders`` orders, status flips and segment changes."""
    n = {"n": orders, "customers": max(1, orders // 3)}
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(RF1, n)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(RF2, n)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(FLIPS, n)




def change_all(dsn: str, orders: int) -> None:
    """RF1 and RF2 on ``orders`` orders, then :data:`UPDATES` (the 22 queries' tables)."""
    for script in (RF1, RF2, UPDATES):
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute(script, {"n": orders, "tenth": max(1, orders // 10)})

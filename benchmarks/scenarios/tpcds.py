"""The 99 TPC-DS queries and nine top-N forms as views (``examples/tpcds99``), every one ``refresh:
force`` (issue #73; ``--set refresh=fast``: every one fast, to see what that costs): per query the
method its fast refresh took, fast and complete seconds and the rows it read; the views fast, and
those whose fast refresh was slower than their complete one.

The 24 tables from ``tpcgen-cli`` with the specification's primary keys, the fact tables' ``*_sk``
columns indexed, a log on each. Each round changes ``fraction`` of each channel's sales: as many
orders inserted (copies of sold rows under new order numbers, a day later) and as many deleted
with their returns, a tenth as many returns added, the inventory of as many items moved, and a
hundredth as many items re-priced and re-categorised, customers moved to another address and
promotions changed. Then one ``mvlog refresh`` of all the views and one ``mvlog refresh
--complete`` (new processes on ``mvlog engine``).
"""

from __future__ import annotations

from typing import Any

import psycopg2

from benchmarks.datasets import tpcds
from benchmarks.harness import LARGE, Bench, fast_against_complete
from benchmarks.scenarios import Parameter, Scenario

SALES = {"store_sales": ("ss", "ss_ticket_number", "store_returns", "sr", "sr_ticket_number"),
         "catalog_sales": ("cs", "cs_order_number", "catalog_returns", "cr", "cr_order_number"),
         "web_sales": ("ws", "ws_order_number", "web_returns", "wr", "wr_order_number")}
DIMENSIONS = """
UPDATE item SET i_current_price = i_current_price * 1.01, i_category = CASE i_category WHEN 'Books' THEN 'Music'
    ELSE 'Books' END WHERE i_item_sk IN (SELECT i_item_sk FROM item ORDER BY random() LIMIT %(hundredth)s);
UPDATE customer SET c_current_addr_sk = (SELECT ca_address_sk FROM customer_address ORDER BY random() LIMIT 1)
    WHERE c_customer_sk IN (SELECT c_customer_sk FROM customer ORDER BY random() LIMIT %(hundredth)s);
UPDATE promotion SET p_channel_email = CASE p_channel_email WHEN 'N' THEN 'Y' ELSE 'N' END
    WHERE p_promo_sk IN (SELECT p_promo_sk FROM promotion ORDER BY random() LIMIT 1);
UPDATE inventory SET inv_quantity_on_hand = coalesce(inv_quantity_on_hand, 0) + 1
    WHERE (inv_date_sk, inv_item_sk, inv_warehouse_sk) IN
    (SELECT inv_date_sk, inv_item_sk, inv_warehouse_sk FROM inventory ORDER BY random() LIMIT %(n)s);
"""


def change(dsn: str, fraction: float, counts: dict[str, int]) -> None:
    """One round of changes (see the module)."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        for sales, (_, order, returns, _, returned) in SALES.items():
            n = max(1, round(counts[sales] * fraction))
            cur.execute(f"SELECT max({order}) FROM {sales}")  # noqa: S608 (names from this module)
            top = cur.fetchone()[0] or 0
            columns = [c for c in tpcds.with_columns_of(cur, sales)]
            moved = [f"{c} + %(top)s" if c == order else (f"{c} + 1" if c.endswith("sold_date_sk") else c)
                     for c in columns]
            cur.execute(f"INSERT INTO {sales} SELECT {', '.join(moved)} FROM {sales} "  # noqa: S608
                        f"WHERE {order} IN (SELECT DISTINCT {order} FROM {sales} ORDER BY 1 LIMIT %(n)s)",
                        {"top": top, "n": n})
            cur.execute(f"DELETE FROM {returns} WHERE {returned} IN (SELECT {order} FROM {sales} "  # noqa: S608
                        f"ORDER BY {order} DESC LIMIT %(n)s)", {"n": n})
            cur.execute(f"DELETE FROM {sales} WHERE {order} IN (SELECT DISTINCT {order} FROM {sales} "  # noqa: S608
                        f"WHERE {order} <= %(top)s ORDER BY 1 DESC LIMIT %(n)s)", {"n": n, "top": top})
        cur.execute(DIMENSIONS, {"n": max(1, round(counts["inventory"] * fraction)),
                                 "hundredth": max(1, round(counts["item"] * fraction * 10))})



def run(bench: Bench, p: dict[str, Any]) -> None:
    views = [v for v in tpcds.views() if v["name"] != "q90"]  # divides by a count that can be 0
    if p["views"]:
        views = [v for v in views if v["name"] in p["views"].split(",")]
    pg = bench.cluster(LARGE)
    pg.run_script("CREATE DATABASE tpcds")
    dsn = pg.dsn("tpcds")
    counts = tpcds.load_dsn(dsn, p["scale"])
    bench.note(f"{', '.join(f'{t} {n:,}' for t, n in counts.items() if n > 100_000)} rows; per round "
               f"{p['fraction']:.2%} of each channel's orders inserted and deleted, and the dimension changes")
    config = bench.project(dsn, tpcds.tables(), [{**v, "refresh": p["refresh"]} for v in views])
    bench.engine()
    seconds, _ = bench.mvlog(config, "apply")
    bench.measure("apply", seconds)
    queries = {v["name"] for v in views if not v["name"].endswith("_top")}
    status = fast_against_complete(bench, config, p["rounds"], lambda: change(dsn, p["fraction"], counts))
    bench.measure("queries_fast_capable", sum(1 for v in status if v["name"] in queries
                                               and v.get("fast_refresh")), "count", queries=len(queries))


SCENARIO = Scenario("tpcds", "TPC-DS's 99 queries and 9 top-N forms as views, fast against complete", {
    "scale": Parameter(1.0, 0.01, "TPC-DS scale factor"),
    "fraction": Parameter(0.001, 0.01, "orders of each channel changed per round"),
    "rounds": Parameter(1, 1, "counted rounds (one more warms the engine)"),
    "views": Parameter("", "q03,q03_top,q58", "a comma-separated subset of the views (default: all but q90)"),
    "refresh": Parameter("force", "force", "each view's refresh: (force: the cheaper predicted; fast: what a fast "
                         "refresh of every view costs)"),
}, run)

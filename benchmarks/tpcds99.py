"""The 99 TPC-DS queries and nine top-N forms as views (``examples/tpcds99``), every one ``refresh:
force``: per query the method its fast refresh took (and why), fast and complete seconds, their
ratio and the rows read from PostgreSQL (issue #73, item 4).

    pip install -e '.[bench]'          # tpcgen-cli, the TPC-DS data generator
    python benchmarks/tpcds99.py --scale 1 --fraction 0.001 --rounds 1

The 24 tables from ``tpcgen-cli`` with the specification's primary keys, the fact tables' ``*_sk``
columns indexed, a log on each. Each round changes ``--fraction`` of each channel's sales: as many
orders inserted (copies of sold rows under new order numbers, a day later) and as many deleted
with their returns, a tenth as many returns added, the inventory of as many items moved, and a
hundredth as many items re-priced and re-categorised, customers moved to another address and
promotions changed. Then one ``mvlog refresh --json`` of all the views and one ``mvlog refresh
--complete --json``, each a new process on ``mvlog engine``. The first round warms the engine and is
not counted. Seconds per view are the refresh's own (views run ``concurrency`` at a time, so they
overlap); the totals are the commands' wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import yaml

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import tpcds  # noqa: E402
from tpch import ENGINE_SPARK, SPARK, mvlog  # noqa: E402

from mvlog.config import SparkConfig  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres, free_port  # noqa: E402
from mvlog.spark import engine  # noqa: E402
from mvlog.spark.session import close_connect_sessions  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-DS scale factor")
    parser.add_argument("--fraction", type=float, default=0.001, help="orders of each channel changed per round")
    parser.add_argument("--rounds", type=int, default=1, help="counted rounds (one more warms the engine)")
    parser.add_argument("--views", default="", help="a comma-separated subset of the views (default: all)")
    args = parser.parse_args()
    views = [v for v in tpcds.views() if v["name"] != "q90"]  # divides by a count that can be 0
    if args.views:
        views = [v for v in views if v["name"] in args.views.split(",")]
    with (TempPostgres(settings={"shared_buffers": "2GB", "work_mem": "256MB", "max_wal_size": "8GB"}) as pg,
          tempfile.TemporaryDirectory() as tmp):
        tmp_path = Path(tmp)
        pg.run_script("CREATE DATABASE tpcds")
        dsn = pg.dsn("tpcds")
        started = time.perf_counter()
        counts = tpcds.load_dsn(dsn, args.scale)
        load_seconds = time.perf_counter() - started
        config = tmp_path / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": dsn}, "warehouse": str(tmp_path / "wh"), "spark": SPARK,
            "logs": [{"table": t} for t in tpcds.tables()],
            "views": [{**v, "refresh": "force"} for v in views]}, sort_keys=False))
        os.environ[engine.ENGINE_DIR_ENV] = str(tmp_path / "engine")
        os.environ.pop("SPARK_REMOTE", None)
        engine.start(SparkConfig(**ENGINE_SPARK), port=free_port())
        try:
            apply_seconds, _ = mvlog(config, "apply")
            fast: list[float] = []
            complete: list[float] = []
            per_view: dict[str, list[tuple[dict, dict]]] = {v["name"]: [] for v in views}
            for r in range(args.rounds + 1):
                change(dsn, args.fraction, counts)
                seconds, out = mvlog(config, "refresh", "--json")
                fast_results = {x["view"]: x for x in json.loads(out)}
                complete_seconds, out = mvlog(config, "refresh", "--complete", "--json")
                complete_results = {x["view"]: x for x in json.loads(out)}
                if r:
                    fast.append(seconds)
                    complete.append(complete_seconds)
                    for name in per_view:
                        per_view[name].append((fast_results[name], complete_results[name]))
        finally:
            engine.stop()
            close_connect_sessions()

    print(f"# TPC-DS SF{args.scale:g}, {len(views)} views (the 99 queries but q90, nine top-N forms): "
          f"{platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {', '.join(f'{t} {n:,}' for t, n in counts.items() if n > 100_000)} rows; load {load_seconds:.0f} s, "
          f"apply {apply_seconds:.0f} s; per round {args.fraction:.2%} of each channel's orders inserted and "
          f"deleted, and the dimension changes; a new process per command on mvlog engine; medians of {args.rounds}\n")
    f, c = statistics.median(fast), statistics.median(complete)
    print(f"all {len(views)} views: `mvlog refresh` {f:.1f} s, `mvlog refresh --complete` {c:.1f} s: {c / f:.1f}x\n")
    print("| view | method | why | fast (s) | complete (s) | complete / fast | rows read (fast) | rows (complete) |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, pairs in per_view.items():
        fs = statistics.median(p[0]["seconds"] or 0 for p in pairs)
        cs = statistics.median(p[1]["seconds"] or 0 for p in pairs)
        method = "/".join(sorted({p[0]["method"] or p[0]["status"] for p in pairs}))
        why = (pairs[-1][0].get("reason") or "")[:60].replace("|", "/")
        read = statistics.median(p[0]["keys_read"] or 0 for p in pairs)
        rows = statistics.median(p[1]["keys_read"] or 0 for p in pairs)
        ratio = f"{cs / fs:.1f}x" if fs else "–"
        print(f"| {name} | {method} | {why} | {fs:.2f} | {cs:.2f} | {ratio} | {read:,.0f} | {rows:,.0f} |")


if __name__ == "__main__":
    main()

"""The dashboard over a fleet: how long the overview takes to read, and how long a page takes
to come, server-side and in a browser.

    python benchmarks/ui.py --tables 20 --views 200 --rounds 3

``--tables`` tables ``t00…`` of 2,000 rows; ``--views`` views over them (filtered copies,
aggregates, joins of two tables, and every fifth one a view over another view), built by
``mvlog apply``, then ``--rounds`` rounds of a change to two tables and ``mvlog refresh`` (the
quiet views recorded fresh), so every view has history. Then, in this process, the dashboard
(``mvlog.ui.serve.start``) on a free port, and:

- the overview's read (``read_seconds``: status of every view and log, latest refreshes), as the
  dashboard's thread does it every 2 s — five reads;
- ``GET /``, ``GET /api/overview``, ``GET /views/<v>``, ``GET /api/views/<v>`` over HTTP, 20
  requests each (a page is drawn from the last overview read; a view's page reads its history,
  explanation and Delta log when asked);
- Chromium (Debian's, through Playwright) opening ``/``: from navigation to the load event, five
  times.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg2
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from tpch import mvlog  # noqa: E402

from mvlog.config import load_config  # noqa: E402
from mvlog.postgres.pgtemp import TempPostgres  # noqa: E402
from mvlog.project import Project  # noqa: E402
from mvlog.ui import serve  # noqa: E402
from mvlog.ui.data import read_overview  # noqa: E402

ROWS = 2000


def views_of(tables: int, count: int) -> list[dict]:
    views: list[dict] = []
    for i in range(count):
        t, nxt = f"t{i % tables:02d}", f"t{(i + 1) % tables:02d}"
        kind = i % 5
        if kind == 4 and views:
            base = views[i - 1]["name"]
            views.append({"name": f"v{i:03d}_over", "query": f"SELECT count(*) AS n FROM {base}"})
            continue
        query = [f"SELECT id, g, b FROM {t} WHERE a % {2 + i % 7} = 0",
                 f"SELECT g, count(*) AS n, sum(b) AS total FROM {t} GROUP BY g",
                 f"SELECT x.id, x.b, y.b AS next_b FROM {t} x JOIN {nxt} y ON y.id = x.id WHERE x.g < {10 + i % 50}",
                 f"SELECT id, a FROM {t} WHERE g = {i % 100}"][kind]
        views.append({"name": f"v{i:03d}", "query": query, "freshness": "10m"})
    return views


def timed(url: str, times: int) -> list[float]:
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=120) as response:
            response.read()
        seconds.append(time.perf_counter() - started)
    return seconds


def browser_loads(url: str, times: int) -> list[float] | str:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        loads = []
        for _ in range(times):
            page.goto(url, wait_until="load")
            loads.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
        browser.close()
    return loads


def row(what: str, seconds: list[float]) -> str:
    return (f"| {what} | {len(seconds)} | {min(seconds) * 1000:.0f} | {statistics.median(seconds) * 1000:.0f} | "
            f"{max(seconds) * 1000:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--views", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mvlog-ui-bench-"))
    with TempPostgres() as pg:
        dsn = pg.dsn()
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            for i in range(args.tables):
                cur.execute(f"CREATE TABLE t{i:02d} (id int PRIMARY KEY, g int NOT NULL, a int, b numeric(12,2))")
                cur.execute(f"INSERT INTO t{i:02d} SELECT n, n % 100, (n * 7) % 1000, (n % 997) * 1.25 "
                            f"FROM generate_series(1, {ROWS}) AS n")
        config = work / "mvlog.yaml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": dsn}, "warehouse": str(work / "wh"),
            "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2"}},
            "logs": [{"schema": "public"}], "views": views_of(args.tables, args.views), "concurrency": 2}))
        apply_seconds, _ = mvlog(config, "apply")
        print(f"apply (build {args.views} views): {apply_seconds:.0f} s", file=sys.stderr)
        for r in range(args.rounds):
            with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
                for i in (r % args.tables, (r + 7) % args.tables):
                    cur.execute(f"UPDATE t{i:02d} SET b = b + 1 WHERE id % 50 = {r}")
            mvlog(config, "refresh")
        project = Project(load_config(config), read_only=True)
        reads = []
        for _ in range(5):
            started = time.perf_counter()
            overview = read_overview(project)
            reads.append(time.perf_counter() - started)
        server = serve.start(load_config(config), "127.0.0.1", 0)
        url = serve.address(server)
        first = timed(url, 1)  # waits for the dashboard's first overview read
        view = overview["views"][0]["name"]
        rows = [row("overview read (every view's status, latest refreshes)", reads),
                row("GET / (the graph and the list)", timed(url, 20)),
                row("GET /api/overview", timed(url + "api/overview", 20)),
                row(f"GET /views/{view}", timed(url + f"views/{view}", 20)),
                row(f"GET /api/views/{view}", timed(url + f"api/views/{view}", 20))]
        loads = browser_loads(url, 5)
        if isinstance(loads, list):
            rows.append(row("Chromium: / from navigation to load", loads))
        server.shutdown()
        project.close()
    print(f"\n{len(overview['views'])} views, {len(overview['logs'])} tables; {args.rounds} refresh rounds; "
          f"first page after start {first[0]:.1f} s; {platform.node()}, {platform.processor() or platform.machine()}\n")
    print("| what | n | min ms | median ms | max ms |\n|---|---|---|---|---|")
    print("\n".join(rows))
    if not isinstance(loads, list):
        print(f"\n(browser: {loads})")


if __name__ == "__main__":
    main()

"""``mvlog ui`` in a real browser (Debian's Chromium, driven by Playwright): a project with a
chain of views, a failing view, a view never built, a logically captured table and a view behind
its freshness target, looked at as a person would — every view in the graph in the right state
and colour, a click to a view's page, one chart point per refresh, the failing view's error in
full, no secret anywhere, no error in the browser's console. Writes the README's screenshots."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import project_maker

from mvlog.ui import serve
from mvlog.ui.states import STATES

pytestmark = pytest.mark.integration

# The README's screenshots are written where it shows them with MVLOG_SCREENSHOTS=1, else beside
# the test's other files (a run does not change tracked files).
README_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
PASSWORD = "pg-secret-4711"  # the test cluster's (tests/conftest.py): it must appear nowhere
SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text, segment text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int, status text, amount numeric(10,2));
CREATE TABLE events (id int PRIMARY KEY, kind text);
CREATE TABLE audit (id int PRIMARY KEY, note text);
INSERT INTO customers VALUES (1, 'Ada', 'retail'), (2, 'Bo', 'corp'), (3, 'Cy', 'retail');
INSERT INTO orders VALUES (1, 1, 'open', 10), (2, 1, 'open', 5.5), (3, 2, 'shipped', 7), (4, 3, 'open', 2);
INSERT INTO events VALUES (1, 'click'), (2, 'view');
INSERT INTO audit VALUES (1, 'created');
"""
VIEWS = [
    {"name": "open_orders", "query": "SELECT id, customer_id, amount FROM orders WHERE status = 'open'"},
    {"name": "spend_by_customer",
     "query": "SELECT c.id, c.name, c.segment, sum(o.amount) AS spent, count(*) AS n "
              "FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.id, c.name, c.segment"},
    {"name": "spend_by_segment",
     "query": "SELECT segment, sum(spent) AS spent FROM spend_by_customer GROUP BY segment"},
    {"name": "event_kinds", "query": "SELECT kind, count(*) AS n FROM events GROUP BY kind", "freshness": "1s"},
    {"name": "audit_notes", "query": "SELECT id, note FROM audit", "refresh": "fast"},
    {"name": "retail_customers", "query": "SELECT id, name FROM customers WHERE segment = 'retail'"},
]
CATALOG_NOW = ("SELECT (SELECT count(*) FROM mvlog.refresh_history), (SELECT count(*) FROM mvlog.verify_history), "
               "(SELECT max(last_refresh_at) FROM mvlog.views), (SELECT count(*) FROM mvlog.ddl_log)")
EXPECTED = {"open_orders": "fresh", "spend_by_customer": "fresh", "spend_by_segment": "fresh",
            "event_kinds": "behind", "audit_notes": "failing", "retail_customers": "never_built"}


def chromium() -> str:
    """Debian's Chromium, installed when missing (as PostgreSQL is, tests/conftest.py)."""
    found = shutil.which("chromium")
    if found is None and shutil.which("apt-get"):
        for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
            subprocess.run(command, check=False, capture_output=True, timeout=900)
        found = shutil.which("chromium")
    if found is None:
        pytest.fail("Chromium is not installed and could not be installed (apt-get install chromium)")
    return found


@pytest.fixture(scope="module")
def dashboard(pg, tmp_path_factory, request):
    """The dashboard served over the project above (refreshed, verified, one refresh failing)."""
    from conftest import new_database

    with new_database(pg) as db, project_maker(db, tmp_path_factory.mktemp("ui"), request) as make:
        db.execute(SCHEMA)
        logs = ["customers", {"table": "orders", "capture": "logical"}, "events", "audit"]
        project, holder = make(logs, VIEWS), make(logs, VIEWS)
        with holder.catalog.lock_views(["retail_customers"]):  # as a scheduler would: its build is skipped
            skipped = {r.view: r.status for r in project.apply().builds}
        assert skipped["retail_customers"] == "skipped" and skipped["open_orders"] == "succeeded"
        for amount in (1, 2, 3):  # more refreshes of open_orders: its charts get a point for each
            db.execute(f"INSERT INTO orders VALUES ({10 + amount}, 1, 'open', {amount})")
            project.refresh(["open_orders"])
        project.verify(["open_orders"])
        db.execute("TRUNCATE audit")  # a fast view's refresh refuses a truncated table: it fails
        failed = project.refresh(["audit_notes"])
        assert failed[0].status == "failed" and failed[0].error
        db.execute("INSERT INTO events VALUES (3, 'click')")  # not refreshed: behind its 1 s target
        time.sleep(1.5)
        records: list[str] = []
        handler = _Collect(records)
        logging.getLogger("mvlog.ui").addHandler(handler)
        logging.getLogger("mvlog.ui").setLevel(logging.INFO)
        server = serve.start(project.config, "127.0.0.1", 0, interval=0.5)
        try:
            yield {"url": serve.address(server), "project": project, "db": db, "error": failed[0].error,
                   "log": records}
        finally:
            server.shutdown()
            logging.getLogger("mvlog.ui").removeHandler(handler)


class _Collect(logging.Handler):
    def __init__(self, records: list[str]):
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium(), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    """A page that records every console error and uncaught exception (the test fails on any)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    requests: list[str] = []
    opened.on("request", lambda request: requests.append(request.url))
    yield opened
    assert not errors, errors
    foreign = [u for u in requests if not u.startswith(("http://127.0.0.1:", "data:"))]
    assert not foreign, foreign  # nothing fetched from elsewhere
    context.close()


def api(dashboard, path: str):
    with urllib.request.urlopen(dashboard["url"] + "api/" + path) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    return README_IMAGES if os.environ.get("MVLOG_SCREENSHOTS") == "1" else tmp_path_factory.mktemp("screenshots")


def test_every_view_is_in_the_graph_in_its_state_and_colour(dashboard, page, screenshots):
    page.goto(dashboard["url"])
    nodes = page.locator("svg#graph a.node.view")
    assert sorted(nodes.evaluate_all("ns => ns.map(n => n.dataset.name)")) == sorted(EXPECTED)
    for name, state in EXPECTED.items():
        node = page.locator(f'svg#graph a.node.view[data-name="{name}"]')
        assert node.get_attribute("data-state") == state, name
        assert node.locator("rect").get_attribute("fill") == STATES[state].colour, name
        assert STATES[state].label in node.locator("text.detail").text_content(), name
    tables = page.locator("svg#graph a.node.table")
    captures = dict(zip(tables.evaluate_all("ns => ns.map(n => n.dataset.name)"),
                        tables.evaluate_all("ns => ns.map(n => n.dataset.capture)")))
    assert captures == {"public.customers": "trigger", "public.orders": "logical", "public.events": "trigger",
                        "public.audit": "trigger"}
    # the chain: spend_by_segment reads spend_by_customer, which reads the two tables
    edges = set(zip(page.locator("svg#graph path.edge").evaluate_all("es => es.map(e => e.dataset.from)"),
                    page.locator("svg#graph path.edge").evaluate_all("es => es.map(e => e.dataset.to)")))
    assert ("view:spend_by_customer", "view:spend_by_segment") in edges
    assert {("table:public.orders", "view:spend_by_customer"),
            ("table:public.customers", "view:spend_by_customer")} <= edges
    page.screenshot(path=str(screenshots / "dashboard-graph.png"), full_page=True)
    assert (screenshots / "dashboard-graph.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_click_reaches_the_view_s_page_with_one_chart_point_per_refresh(dashboard, page, screenshots):
    page.goto(dashboard["url"])
    page.locator('svg#graph a.node.view[data-name="open_orders"]').click()
    page.wait_for_url("**/views/open_orders")
    assert page.locator("h1").text_content().startswith("open_orders")
    history = api(dashboard, "views/open_orders")["history"]
    timed = [r for r in history if r["seconds"] is not None]
    assert len(timed) >= 4  # the first build and three refreshes
    charts = page.locator("figure.chart")
    assert charts.count() == 2
    assert charts.nth(0).locator("circle.point").count() == len(timed)
    assert page.locator("table#history tbody tr:not(.error-row)").count() == len(history)
    assert "fast" in page.locator("table#history").text_content()
    delta = page.locator("#delta").text_content()
    assert f"version {history[0]['delta_version']}" in delta  # the Delta log, read without Spark
    columns = page.locator("table#columns").text_content()
    assert columns.count("amount") == 1 and "decimal(10,2)" in columns and "_mvlog_" not in columns
    readers = page.locator("table#readers").text_content()  # from its table's features: none a reader lacks
    assert "deltalake to_pyarrow_table / to_pandasreads it" in readers and "refuses" not in readers
    verify = page.locator("#verify").text_content()
    assert verify.startswith("ok (full")
    page.screenshot(path=str(screenshots / "dashboard-view.png"), full_page=True)
    assert (screenshots / "dashboard-view.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_failing_view_s_error_is_shown_in_full(dashboard, page):
    page.goto(dashboard["url"] + "views/audit_notes")
    assert page.locator("#state").get_attribute("data-state") == "failing"
    shown = page.locator("pre.refresh-error").first.text_content()
    assert shown == dashboard["error"]
    assert "truncated" in shown


def test_a_table_page_shows_its_log_its_capture_and_its_readers(dashboard, page):
    page.goto(dashboard["url"])
    page.locator('svg#graph a.node.table[data-name="public.orders"]').click()
    page.wait_for_url("**/tables/public.orders")
    capture = page.locator("#capture").text_content()
    slot = api(dashboard, "tables/public.orders")["captures"][0]
    assert slot["slot"] in capture and slot["written_lsn"] in capture
    readers = page.locator("a[href^='/views/']").evaluate_all("ls => ls.map(l => l.textContent)")
    assert set(readers) >= {"open_orders", "spend_by_customer"}
    page.goto(dashboard["url"] + "tables/public.events")
    assert page.locator("#pending").text_content().startswith("1 ")  # the row inserted after the refresh


def test_the_page_reloads_on_its_own(dashboard, page):
    page.goto(dashboard["url"])
    before = page.locator("#as-of").text_content()
    deadline = time.monotonic() + 15  # (Playwright's wait_for_function evaluates a string: the page's CSP refuses it)
    while page.locator("#as-of").text_content() == before and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert page.locator("#as-of").text_content() != before


def test_the_api_carries_the_status_and_history_fields(dashboard):
    project = dashboard["project"]
    overview = api(dashboard, "overview")
    status = project.status()
    by_name = {v["name"]: v for v in overview["views"]}
    for view in status["views"]:
        shown = by_name[view["name"]]
        assert set(view) <= set(shown)
        assert {k: shown[k] for k in ("class", "refresh", "base_tables", "upstreams", "last_method")} == \
               {k: view[k] for k in ("class", "refresh", "base_tables", "upstreams", "last_method")}
    history = [row.to_json() for row in project.history("open_orders", 50)]
    assert api(dashboard, "views/open_orders")["history"] == json.loads(json.dumps(history, default=str))
    with pytest.raises(urllib.error.HTTPError) as missing:
        api(dashboard, "views/no_such_view")
    assert missing.value.code == 404


def test_no_secret_in_any_page_the_api_or_the_log_and_nothing_written(dashboard, page):
    db = dashboard["db"]
    before = db.execute(CATALOG_NOW)
    for path in ("", "views/open_orders", "views/audit_notes", "views/spend_by_segment", "tables/public.orders",
                 "tables/public.audit", "api/overview", "api/views/audit_notes", "api/tables/public.orders"):
        page.goto(dashboard["url"] + path)
        assert PASSWORD not in page.content(), path
    assert all(PASSWORD not in line for line in dashboard["log"])
    assert db.execute(CATALOG_NOW) == before
    request = urllib.request.Request(dashboard["url"], method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 405

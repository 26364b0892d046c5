"""Logs by pattern: `logs: [{schema: sales, tables: "order_*"}]` logs every matching table with a
primary key, says which it skipped and why, and a matching table created later gets its log at the
next `apply`."""

from __future__ import annotations

import pytest
from conftest import assert_view_matches, refresh_ok

from mvlog.commands.cli import main

pytestmark = pytest.mark.integration

SETUP = """
CREATE SCHEMA sales;
CREATE TABLE sales.order_head (id int PRIMARY KEY, customer text);
CREATE TABLE sales.order_line (order_id int REFERENCES sales.order_head, n int, qty int, PRIMARY KEY (order_id, n));
CREATE TABLE sales.order_scratch (note text);                  -- no primary key: skipped
CREATE TABLE sales.customer (id int PRIMARY KEY, name text);   -- does not match
INSERT INTO sales.order_head SELECT g, 'c' || (g % 3) FROM generate_series(1, 20) g;
INSERT INTO sales.order_line SELECT g, k, g * k FROM generate_series(1, 20) g, generate_series(1, 3) k;
"""
VIEWS = [{"name": "qty_by_customer", "refresh": "fast",
          "query": "SELECT h.customer, sum(l.qty) AS qty FROM sales.order_head h "
                   "JOIN sales.order_line l ON l.order_id = h.id GROUP BY h.customer"}]


def logged(db) -> set[str]:
    return {f"{s}.{t}" for s, t in db.execute("SELECT table_schema, table_name FROM mvlog.logs")}


def test_logs_by_pattern(db, make_project, tmp_path, capsys):
    db.execute(SETUP)
    project = make_project([{"schema": "sales", "tables": "order_*"}], VIEWS)
    report = project.apply()
    assert sorted(report.logs_created) == ["sales.order_head", "sales.order_line"]
    assert report.logs_skipped == ["sales.order_scratch: it has no primary key"]
    assert logged(db) == {"sales.order_head", "sales.order_line"}
    db.execute("UPDATE sales.order_line SET qty = qty + 5 WHERE order_id <= 4")
    assert refresh_ok(project)["qty_by_customer"].method == "fast"
    assert_view_matches(project, "qty_by_customer")

    # A matching table created later is logged by the next apply; the others stay as they are.
    db.execute("CREATE TABLE sales.order_note (id int PRIMARY KEY, body text)")
    again = project.apply()
    assert again.logs_created == ["sales.order_note"]
    assert sorted(again.logs_unchanged) == ["sales.order_head", "sales.order_line"]
    assert logged(db) == {"sales.order_head", "sales.order_line", "sales.order_note"}
    db.execute("INSERT INTO sales.order_note VALUES (1, 'x')")
    ((log,),) = db.execute("SELECT log_name FROM mvlog.logs WHERE table_name = 'order_note'")
    assert db.execute(f'SELECT id, "dmltype$$" FROM mvlog."{log}"') == [(1, "I")]


def test_pattern_errors_name_the_entry(db, tmp_path, capsys):
    import yaml

    db.execute(SETUP)
    config = tmp_path / "mvlog.yaml"
    for logs, message in (
        ([{"schema": "nowhere", "tables": "x*"}], "logs[0]: schema nowhere does not exist"),
        ([{"schema": "mvlog"}], "logs[0]: schema mvlog holds mvlog's own tables"),
        ([{"schema": "sales", "table": "sales.customer"}], "logs[0]: give either table, or schema with tables"),
    ):
        config.write_text(yaml.safe_dump({"source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
                                          "logs": logs, "views": []}))
        assert main(["-q", "-c", str(config), "apply"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    config.write_text(yaml.safe_dump({"source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
                                      "logs": [{"schema": "sales", "tables": "nothing_*"}], "views": []}))
    assert main(["-q", "-c", str(config), "apply"]) == 0
    assert "not logged: sales.nothing_*: no table matches (yet)" in capsys.readouterr().out

"""The 99 TPC-DS queries and nine top-N forms (``examples/tpcds99``) as views: which mvlog
refreshes fast — PostgreSQL plans every statement of their fast refresh at ``validate`` — and,
for the others, that the refusal names the piece and its reason (issue #73). PostgreSQL only: the
oracle of these views over generated data and random DML is tests/refresh/test_refresh_tpcds.py."""

from __future__ import annotations

import re

import pytest
import yaml

from benchmarks.datasets import tpcds
from mvlog.config import load_config
from mvlog.project import Project

pytestmark = pytest.mark.integration

# Not fast yet, and what the refusal must say (the README's list of complete-only TPC-DS queries):
# none since q36's top-N form, ordered by an expression over its rows, is kept.
COMPLETE: dict[str, str] = {}


def test_the_example_has_the_99_queries_and_nine_top_n_forms():
    names = [v["name"] for v in tpcds.views()]
    assert sorted(n for n in names if not n.endswith("_top")) == [f"q{i:02d}" for i in range(1, 100)]
    assert sorted(n for n in names if n.endswith("_top")) == [
        f"q{i:02d}_top" for i in (3, 7, 19, 27, 36, 42, 52, 55, 67)]


def test_every_query_is_fast_but_those_listed_and_their_refusals_name_the_reason(db, tmp_path):
    db.execute((tpcds.EXAMPLE / "schema.sql").read_text())
    config = tmp_path / "mvlog.yaml"
    config.write_text(yaml.safe_dump({"source": {"dsn": db.dsn}, "warehouse": str(tmp_path / "wh"),
                                      "logs": [{"table": t} for t in tpcds.tables()],
                                      "views": [{**v, "refresh": "force"} for v in tpcds.views()]}))
    with Project(load_config(config)) as project:
        warnings = project.validate().warnings
    complete = {re.match(r"view (\w+) will", w).group(1): w for w in warnings}
    assert set(complete) == set(COMPLETE), {name: w[:300] for name, w in complete.items()}
    for name, reason in COMPLETE.items():
        assert re.search(reason, complete[name]), complete[name]
        assert "PostgreSQL refused" not in complete[name], complete[name]

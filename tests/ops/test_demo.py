"""The README's first command: `mvlog demo` runs the whole loop and shows before and after."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_mvlog_demo(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mvlog", "demo", "--warehouse", str(tmp_path / "wh")],
                            capture_output=True, text=True, timeout=900, env={**os.environ, "TZ": "UTC"})
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for step in ("1. Starting a throwaway PostgreSQL", "2. mvlog apply", "3. Changing the data",
                 "4. mvlog refresh", "5. mvlog status"):
        assert step in out
    assert "before: open_orders (500 rows" in out and "after: open_orders (498 rows" in out
    # the fast refresh of open_orders: 10 changed keys, 4 rows in, 6 out (see examples/shop/changes.sql)
    row = next(ln.replace("│", " ").split() for ln in out.splitlines()
               if ln.strip().startswith("open_orders") and " fast " in ln)
    assert row[1:7] == ["fast", "10", "4", "0", "6", "498"]  # method, keys, inserted, updated, deleted, rows
    assert "open_orders: fresh, 498 rows, last fast" in out
    assert "Traceback" not in result.stderr
    assert (tmp_path / "wh" / "open_orders" / "_delta_log").is_dir()

"""The README's first command: `mvlog demo` runs the whole loop and shows before and after."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from mvlog.postgres.pgtemp import SUPERUSER, find_bin_dir

pytestmark = pytest.mark.integration


def test_mvlog_demo(tmp_path):
    """The demo (kept: --keep) shows before and after, and ends with the command that opens its
    dashboard; that command serves the demo's views."""
    result = subprocess.run([sys.executable, "-m", "mvlog", "demo", "--keep", "--warehouse", str(tmp_path / "wh")],
                            capture_output=True, text=True, timeout=900, env={**os.environ, "TZ": "UTC"})
    kept = re.search(r"\(data in (\S+)\)", result.stdout)
    try:
        assert result.returncode == 0, result.stderr[-3000:]
        out = result.stdout
        for step in ("1. Starting a throwaway PostgreSQL", "2. mvlog apply", "3. Changing the data",
                     "4. mvlog refresh", "5. mvlog status", "6. The dashboard"):
            assert step in out
        assert "before: open_orders (500 rows" in out and "after: open_orders (498 rows" in out
        # the fast refresh of open_orders: 10 changed keys, 4 rows in, 6 out (see examples/shop/changes.sql)
        row = next(ln.replace("│", " ").split() for ln in out.splitlines()
                   if ln.strip().startswith("open_orders") and " fast " in ln)
        assert row[1:7] == ["fast", "10", "4", "0", "6", "498"]  # method, keys, inserted, updated, deleted, rows
        assert "open_orders: fresh, 498 rows, last fast" in out
        assert "Traceback" not in result.stderr
        assert (tmp_path / "wh" / "open_orders" / "_delta_log").is_dir()
        command = re.search(r"6\. The dashboard: mvlog -c (\S+) ui", out)
        assert command is not None, out[-2000:]
        states = dashboard_states(command.group(1))
        assert "open_orders" in states and set(states.values()) == {"fresh"}, states
    finally:
        if kept is not None:
            stop_kept_cluster(Path(kept.group(1)))


def dashboard_states(config: str) -> dict[str, str]:
    """Each view's state on the dashboard ``mvlog -c config ui`` serves (on a free port)."""
    server = subprocess.Popen([sys.executable, "-m", "mvlog", "-c", config, "ui", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 120)
        assert ready, "mvlog ui printed nothing in 120 s"
        line = server.stdout.readline()
        address = re.search(r"serving (http://\S+)", line)
        assert address is not None, (line, server.stderr.read() if server.poll() is not None else "")
        with urllib.request.urlopen(address.group(1) + "api/overview", timeout=120) as response:
            overview = json.loads(response.read())
        return {v["name"]: v["state"] for v in overview["views"]}
    finally:
        server.terminate()
        server.wait(timeout=30)


def stop_kept_cluster(root: Path) -> None:
    """Stop the cluster the demo kept, as pgtemp runs its binaries (the same directory and user)."""
    command = [str(find_bin_dir(install=False) / "pg_ctl"), "-D", str(root / "data"), "stop", "-m", "immediate"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", SUPERUSER, "--", *command]
    stopped = subprocess.run(command, capture_output=True, text=True, check=False)
    assert stopped.returncode == 0, stopped.stderr
    shutil.rmtree(root, ignore_errors=True)

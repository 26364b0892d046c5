"""One-shot commands against a PostgreSQL that does not answer (a proxy that stopped forwarding,
every socket left open) end with one sentence and exit 1 within their bound (the connect bound:
10 s by default, 3 s here), never a hang; the password never shows."""

from __future__ import annotations

import time

import pytest
import yaml
from stallproxy import StallProxy
from test_cli import assert_one_line_error, run, write_config

pytestmark = pytest.mark.integration

CONNECT_BOUND = 3.0  # source.timeouts.connect


@pytest.mark.parametrize("command", [["status"], ["refresh"], ["apply"]])
def test_a_one_shot_command_against_a_silent_server_fails_within_its_bound(pg, tmp_path, command):
    with StallProxy("127.0.0.1", pg.port) as proxy:
        proxy.stall()
        dsn = proxy.dsn({"user": "postgres", "password": pg.password, "dbname": "postgres"})
        config = write_config(tmp_path, dsn, ["t"], [{"name": "v", "query": "SELECT id FROM t"}],
                              remote="sc://127.0.0.1:1")  # never reached: PostgreSQL is asked first
        document = yaml.safe_load(config.read_text())
        document["source"]["timeouts"] = {"connect": f"{CONNECT_BOUND:g}s"}
        config.write_text(yaml.safe_dump(document))
        started = time.monotonic()
        result = run(config, *command, timeout=60)
        took = time.monotonic() - started
    assert_one_line_error(result, 1, "cannot connect to PostgreSQL",
                          f"timeout expired (no answer within {CONNECT_BOUND:g} s, source.timeouts.connect)")
    assert took < CONNECT_BOUND + 8, took  # the bound, and a Python process's start

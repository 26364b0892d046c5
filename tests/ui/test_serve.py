"""``mvlog ui`` on bad ground: a port in use, a database that does not answer (no browser)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from mvlog.config import parse_config
from mvlog.postgres.pgtemp import free_port
from mvlog.ui import serve

SECRET = "s3cr3t-pw-99"


def config_on_closed_port():
    return parse_config(f"source: {{dsn: 'postgresql://ann:{SECRET}@127.0.0.1:{free_port()}/x'}}\n"
                        "warehouse: /tmp/nowhere\n")


def test_a_database_that_does_not_answer_is_one_sentence_on_the_page_without_its_password():
    server = serve.start(config_on_closed_port(), "127.0.0.1", 0, interval=0.2)
    try:
        url = serve.address(server)
        with urllib.request.urlopen(url + "api/overview", timeout=30) as response:
            overview = json.loads(response.read())
        assert overview["views"] == [] and "cannot connect to PostgreSQL" in overview["error"]
        since = overview["error_since"]  # the first failed read, kept while the reads fail
        time.sleep(0.5)
        with urllib.request.urlopen(url + "api/overview", timeout=30) as response:
            assert json.loads(response.read())["error_since"] == since
        with urllib.request.urlopen(url, timeout=30) as response:
            page = response.read().decode()
        assert 'id="overview-error"' in page and "cannot connect to PostgreSQL" in page
        assert f"(failing since {since[:19].replace('T', ' ')} UTC)" in page
        assert SECRET not in page and SECRET not in json.dumps(overview)
    finally:
        server.shutdown()


def test_a_port_in_use_is_one_sentence_and_exit_2(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    (tmp_path / "mvlog.yaml").write_text(f"source: {{dsn: 'postgresql://ann:{SECRET}@127.0.0.1:1/x'}}\n"
                                         "warehouse: ./wh\n")
    command = [sys.executable, "-m", "mvlog", "-c", str(tmp_path / "mvlog.yaml"), "ui", "--port", str(port)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    busy.close()
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"Error: cannot serve the dashboard on 127.0.0.1:{port}: ")
    assert "Traceback" not in done.stderr and SECRET not in done.stderr + done.stdout


def test_a_request_for_another_host_name_is_refused_on_loopback():
    """A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) cannot read the API."""
    server = serve.start(config_on_closed_port(), "127.0.0.1", 0, interval=0.2)
    try:
        url = serve.address(server) + "api/overview"
        foreign = urllib.request.Request(url, headers={"Host": "attacker.example:80"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(foreign, timeout=30)
        assert refused.value.code == 403
        for name in ("localhost", "127.0.0.1"):
            port = server.server_address[1]
            own = urllib.request.Request(url, headers={"Host": f"{name}:{port}"})
            with urllib.request.urlopen(own, timeout=30) as response:
                assert response.status == 200
    finally:
        server.shutdown()

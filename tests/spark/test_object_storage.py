"""A warehouse on object storage: ``s3a://`` against a real S3 API on the loopback (``moto``'s
server), reached through Hadoop's own s3a client, which mvlog adds to Spark by itself.

The commands run as users run them, as ``mvlog`` processes: on an ``mvlog engine`` started for
the s3a configuration (which lives as long as a scheduler does), and ``drop --delete-data`` on a
Spark of its own. Credentials come from the environment (``AWS_ACCESS_KEY_ID``, …), never from a
command line, and never appear in any output."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import SUBPROCESS_SPARK, TEST_SPARK, assert_views_match, engine_running
from schedulers import two_schedulers_and_a_sigkill
from shop import SCHEMA, SEED

from mvlog.config import SparkConfig, load_config
from mvlog.project import Project

pytestmark = pytest.mark.integration

BUCKET = "lake"
SECRET = "s3-secret-" + uuid.uuid4().hex[:8]
VIEWS = [
    {"name": "s3_simple", "refresh": "fast", "query": "SELECT id, status, amount FROM orders WHERE amount > 1"},
    {"name": "s3_join", "refresh": "fast",
     "query": "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id"},
    {"name": "s3_sums", "refresh": "fast",
     "query": "SELECT status, count(*) AS n, sum(amount) AS total, max(amount) AS top FROM orders GROUP BY status"},
]


@pytest.fixture(scope="module")
def s3():
    """An S3 API on a free loopback port with the bucket ``lake``; the AWS credentials of the
    environment point at it (as a user's would at theirs)."""
    import boto3
    from moto.server import ThreadedMotoServer

    from mvlog.postgres.pgtemp import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    os.environ.update({"AWS_ACCESS_KEY_ID": "mvlog-test", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1"})
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield endpoint, client
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def s3_conf(endpoint: str) -> dict[str, str]:
    return {"spark.hadoop.fs.s3a.endpoint": endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false", "spark.hadoop.fs.s3a.endpoint.region": "us-east-1"}


@pytest.fixture(scope="module")
def s3_engine(s3, tmp_path_factory):
    """An ``mvlog engine`` for the s3a warehouse, started as ``mvlog engine start`` starts it: with
    the connector jars ``with_storage`` adds."""
    from mvlog.spark.settings import with_storage

    # The test engine's settings (TEST_SPARK: no whole-stage code generation); not SUBPROCESS_SPARK's
    # C1-only JIT, whose small code cache a long-lived engine fills ("Out of space in CodeCache").
    config, added = with_storage(SparkConfig(master=TEST_SPARK["master"],
                                             conf={**TEST_SPARK["conf"], **s3_conf(s3[0])}), [f"s3a://{BUCKET}"])
    assert [p.split(":")[1] for p in added] == ["hadoop-aws"]
    assert config.conf["spark.hadoop.fs.s3a.input.stream.type"] == "classic"  # for a process that lives long
    with engine_running(config, tmp_path_factory.mktemp("s3-engine")) as info:
        yield info


def write_config(path, dsn: str, warehouse: str, spark: dict, views: list[dict] = VIEWS) -> None:
    path.write_text(yaml.safe_dump({"source": {"dsn": dsn}, "warehouse": warehouse, "spark": spark,
                                    "logs": [{"table": t} for t in ("nation", "customers", "orders")],
                                    "views": views}))


def mvlog(config, *args: str, expect: int = 0, engine=None) -> str:
    """``mvlog -c config args…``'s output, its exit code checked; on a failure on ``engine`` (an
    EngineInfo), the server's last error is in the message too (a flaky one is diagnosable from CI's log)."""
    done = subprocess.run([sys.executable, "-m", "mvlog", "-c", str(config), *args], capture_output=True, text=True,
                          timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == expect, (args, done.returncode, output[-3000:], engine and last_error(engine.log))
    assert SECRET not in output
    return output


def last_error(log: str) -> str:
    """The engine log from its last ERROR line on (its stack trace), at most 60 lines."""
    lines = Path(log).read_text(errors="replace").splitlines()
    errors = [i for i, line in enumerate(lines) if " ERROR " in line]
    return "\n".join(lines[errors[-1]:errors[-1] + 60]) if errors else "(no ERROR in the engine's log)"


def objects(client, prefix: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def applied_and_refreshed(db, tmp_path, s3, s3_engine):
    """An s3a warehouse built by ``apply`` and fast-refreshed once (checked by the oracle): its
    config file and the objects' prefix."""
    endpoint, client = s3
    db.execute(SCHEMA)
    db.execute(SEED)
    prefix = f"mvlog-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "mvlog.yaml"
    write_config(config, db.dsn, f"s3a://{BUCKET}/{prefix}", {"remote": s3_engine.remote, "conf": s3_conf(endpoint)})
    mvlog(config, "apply", engine=s3_engine)
    assert any(k.startswith(f"{prefix}/s3_simple/_delta_log/") for k in objects(client, prefix))
    db.execute("INSERT INTO orders VALUES (6, 2, 'open', 99.95, 1); UPDATE orders SET amount = 2 WHERE id = 5; "
               "UPDATE orders SET id = 16 WHERE id = 2; DELETE FROM orders WHERE id = 1; "
               "UPDATE customers SET name = 'Bea' WHERE id = 2")
    refreshed = mvlog(config, "refresh", "--json", engine=s3_engine)
    assert refreshed.count('"method": "fast"') == len(VIEWS), refreshed
    with Project(load_config(config)) as project:
        assert_views_match(project, VIEWS)
    return config, prefix


def test_a_warehouse_on_s3_applies_refreshes_and_drops_its_data(db, tmp_path, s3, s3_engine):
    endpoint, client = s3
    config, prefix = applied_and_refreshed(db, tmp_path, s3, s3_engine)
    # drop --delete-data needs a Spark of its own (Spark Connect has no command to delete a table).
    own = tmp_path / "own.yaml"
    write_config(own, db.dsn, f"s3a://{BUCKET}/{prefix}",
                 {**SUBPROCESS_SPARK, "conf": {**SUBPROCESS_SPARK["conf"], **s3_conf(endpoint)}})
    dropped = mvlog(own, "drop", "s3_simple", "--delete-data")
    assert "hadoop-aws" in dropped  # said when mvlog added the connector
    assert not objects(client, f"{prefix}/s3_simple/")
    assert objects(client, f"{prefix}/s3_join/")


@pytest.mark.deep  # the main tier: test_verify and test_cli's optimize, on a local warehouse
def test_a_warehouse_on_s3_verifies_repairs_and_optimizes(db, tmp_path, s3, s3_engine):
    config, _ = applied_and_refreshed(db, tmp_path, s3, s3_engine)
    # verify finds the damage below, and nothing once repaired (a verify before the damage would
    # only repeat the oracle's check)
    with Project(load_config(config)) as project:
        table = project.config.view_location("s3_join")
        project.warehouse.spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 3").collect()  # behind mvlog's back
    assert "s3_join" in mvlog(config, "verify", "--full", expect=1, engine=s3_engine)
    mvlog(config, "verify", "--full", "--repair", engine=s3_engine)
    mvlog(config, "verify", "--full", engine=s3_engine)
    optimized = mvlog(config, "optimize", "--vacuum", engine=s3_engine)
    assert all(v["name"] in optimized for v in VIEWS), optimized
    with Project(load_config(config)) as project:
        assert_views_match(project, VIEWS)


@pytest.mark.deep  # the main tier: test_schedule_ha (the same schedulers on a local warehouse)
def test_two_schedulers_on_s3_never_commit_to_one_table_at_once_and_survive_a_sigkill(db, tmp_path, s3,
                                                                                       s3_engine):
    """Delta on S3 has one writer per table only if its writers take turns: mvlog's per-view lock
    makes them; the schedulers, which live for days, refresh many times on the s3a engine."""
    warehouse = f"s3a://{BUCKET}/ha-{uuid.uuid4().hex[:8]}"
    two_schedulers_and_a_sigkill(db, tmp_path, warehouse, {"remote": s3_engine.remote, "conf": s3_conf(s3[0])})

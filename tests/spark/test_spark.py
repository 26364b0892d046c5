"""The Spark session factory: Spark Connect URLs, their secrets, an unreachable server."""

from __future__ import annotations

import socket

import pytest

from mvlog.config import SparkConfig
from mvlog.errors import SetupError
from mvlog.spark.remote import host_port, remote_secrets
from mvlog.spark.session import build_session, remote_url
from mvlog.spark.settings import session_conf


def test_remote_url_comes_from_the_yaml_else_spark_remote(monkeypatch, tmp_path):
    from mvlog.spark import engine

    monkeypatch.setenv(engine.ENGINE_DIR_ENV, str(tmp_path))  # no engine runs here
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert remote_url(SparkConfig()) is None
    monkeypatch.setenv("SPARK_REMOTE", "sc://env-host:1")
    assert remote_url(SparkConfig()) == "sc://env-host:1"
    assert remote_url(SparkConfig(remote="sc://yaml-host:2")) == "sc://yaml-host:2"


def test_a_config_without_master_or_remote_uses_the_running_engine_and_says_so(monkeypatch, tmp_path):
    import json
    import os

    import mvlog.spark.opening
    from mvlog.config import load_config
    from mvlog.project import Project
    from mvlog.spark import engine

    monkeypatch.setenv(engine.ENGINE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    (tmp_path / "engine.json").write_text(json.dumps({  # a live process stands in for the server
        "pid": os.getpid(), "host": "127.0.0.1", "port": 15999, "started_at": "2026-11-25T00:00:00+00:00",
        "log": str(tmp_path / "engine.log"), "master": "local[2]"}))
    assert remote_url(SparkConfig()) == "sc://127.0.0.1:15999"
    assert remote_url(SparkConfig(conf={"spark.sql.shuffle.partitions": "2"})) == "sc://127.0.0.1:15999"
    assert remote_url(SparkConfig(master="local[*]")) is None  # an explicit master wins
    assert remote_url(SparkConfig(remote="sc://yaml-host:2")) == "sc://yaml-host:2"

    (tmp_path / "mvlog.yaml").write_text("source: {dsn: 'host=127.0.0.1 port=1 dbname=x'}\nwarehouse: ./wh\n")
    opened = []
    monkeypatch.setattr(mvlog.spark.opening, "build_session",
                        lambda config: opened.append(remote_url(config)) or object())
    lines: list[str] = []
    _ = Project(load_config(tmp_path / "mvlog.yaml"), progress=lines.append).warehouse
    assert opened == ["sc://127.0.0.1:15999"]
    assert lines[0].startswith("using the running mvlog engine at sc://127.0.0.1:15999"), lines
    (tmp_path / "engine.json").unlink()
    assert remote_url(SparkConfig()) is None


@pytest.mark.parametrize(("url", "address"), [
    ("sc://127.0.0.1:15099", ("127.0.0.1", 15099)),
    ("sc://engine", ("engine", 15002)),
    ("sc://[::1]:99", ("::1", 99)),
])
def test_host_and_port_of_a_connect_url(url, address):
    assert host_port(url) == address


def test_connect_url_secrets_are_its_credential_values():
    url = "sc://h:443/;use_ssl=true;token=abc123;x-api-key=k9;user_id=ann"
    assert remote_secrets(url) == ["abc123", "k9"]
    assert remote_secrets("sc://h:443") == [] and remote_secrets(None) == []


def test_session_settings_include_the_jars_and_required_delta_settings():
    conf = session_conf(SparkConfig(conf={"spark.jars.packages": "org.example:extra:1.0",
                                          "spark.sql.extensions": "something.Else"}))
    packages = conf["spark.jars.packages"].split(",")
    assert packages[0].startswith("io.delta:delta-spark_") and "org.example:extra:1.0" in packages
    assert any(p.startswith("org.postgresql:postgresql:") for p in packages)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"  # required wins


@pytest.mark.timeout(120)  # the Connect client alone would retry for minutes
def test_an_unreachable_connect_server_fails_at_once_and_transiently():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SetupError) as info:
        build_session(SparkConfig(remote=f"sc://127.0.0.1:{port}/;token=s3cret"))
    assert info.value.transient
    assert str(info.value).startswith(f"cannot reach the Spark Connect server sc://127.0.0.1:{port}:")
    assert "s3cret" not in str(info.value)


def test_object_storage_gets_hadoop_s_own_connector_and_a_user_s_version_wins():
    from mvlog.spark.settings import hadoop_version, storage_packages, with_storage

    version = hadoop_version()
    assert version.count(".") == 2
    assert storage_packages(["s3a://lake/mvlog", "/tmp/x", "hdfs://nn/x", "gs://b/x"]) == [
        f"org.apache.hadoop:hadoop-aws:{version}"]
    assert storage_packages(["abfss://c@acct.dfs.core.windows.net/x"]) == [f"org.apache.hadoop:hadoop-azure:{version}"]
    config, added = with_storage(SparkConfig(conf={"spark.jars.packages": "org.example:extra:1.0"}), ["s3a://lake"])
    assert added == [f"org.apache.hadoop:hadoop-aws:{version}"]
    assert config.conf["spark.jars.packages"] == f"org.example:extra:1.0,org.apache.hadoop:hadoop-aws:{version}"
    assert config.conf["spark.hadoop.fs.s3a.input.stream.type"] == "classic"  # long-lived processes
    mine = SparkConfig(conf={"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.4.1",
                             "spark.hadoop.fs.s3a.input.stream.type": "prefetch"})
    assert with_storage(mine, ["s3a://lake"]) == (mine, [])
    assert with_storage(SparkConfig(), ["/local/warehouse"]) == (SparkConfig(), [])


def test_credentials_in_spark_settings_are_secrets():
    from mvlog.spark.settings import conf_secrets

    config = SparkConfig(conf={"spark.hadoop.fs.s3a.secret.key": "S3CR3T", "spark.hadoop.fs.s3a.access.key": "AKIA1",
                               "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "azkey",
                               "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
                               "spark.sql.shuffle.partitions": "8"})
    assert sorted(conf_secrets(config)) == ["AKIA1", "S3CR3T", "azkey"]


def test_a_metastore_makes_the_catalog_hive_s_and_the_yaml_s_settings_win(tmp_path):
    from mvlog.config import parse_config
    from mvlog.spark.settings import for_project

    base = "source: {dsn: 'host=h dbname=x'}\nwarehouse: ./wh\n"
    spark, notes = for_project(parse_config(base + "catalog: {database: mv, metastore: /srv/meta}\n"))
    assert spark.conf["spark.sql.catalogImplementation"] == "hive" and notes == []
    assert spark.conf["spark.hadoop.javax.jdo.option.ConnectionURL"] == \
        "jdbc:derby:;databaseName=/srv/meta/metastore_db;create=true"
    spark, _ = for_project(parse_config(base + "catalog: {database: mv, metastore: 'thrift://hms:9083'}\n"
                                        "spark: {conf: {spark.sql.warehouse.dir: /mine}}\n"))
    assert spark.conf["spark.hadoop.hive.metastore.uris"] == "thrift://hms:9083"
    assert spark.conf["spark.sql.warehouse.dir"] == "/mine"
    spark, _ = for_project(parse_config(base + "catalog: {database: mv}\n"))
    assert "spark.sql.catalogImplementation" not in spark.conf


def _lock_holder(tmp_path, seconds: float):
    """A process that holds the launch lock for ``seconds`` once it printed "held", and writes
    ``released`` in ``tmp_path`` as it lets go."""
    import os
    import subprocess
    import sys

    code = ("import time\nfrom mvlog.spark.settings import packages_resolved_alone\n"
            f"with packages_resolved_alone():\n    print('held', flush=True)\n    time.sleep({seconds})\n"
            f"    open({str(tmp_path / 'released')!r}, 'w').close()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_spark_launches_resolve_their_packages_one_at_a_time(tmp_path, monkeypatch):
    """Two JVMs downloading the same jar into Ivy's cache at once: one read the other's empty file
    and failed to start (the first run on a new machine). A launch waits for another's lock, and
    goes ahead without it past the bound."""
    import time

    from mvlog.spark.settings import packages_resolved_alone

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    holder = _lock_holder(tmp_path, 2)
    with packages_resolved_alone():
        assert (tmp_path / "released").exists(), "taken while another launch held it"
    assert holder.wait(10) == 0
    holder = _lock_holder(tmp_path, 60)
    try:
        started = time.monotonic()
        with packages_resolved_alone(wait=0.5):
            assert time.monotonic() - started < 5  # past the bound: not stuck behind a hung launch
    finally:
        holder.kill()
        holder.wait(10)

"""How Spark reaches PostgreSQL: the JDBC URL and properties derived from mvlog's DSN (pure)."""

from __future__ import annotations

import pytest

from mvlog.errors import ConfigError
from mvlog.postgres.jdbc import JdbcSource


def test_a_uri_and_a_key_value_dsn_become_the_same_jdbc_source():
    uri = JdbcSource.from_dsn("postgresql://app:s3cret@db.example:6543/shop?sslmode=require")
    kv = JdbcSource.from_dsn("host=db.example port=6543 dbname=shop user=app password=s3cret sslmode=require")
    assert uri == kv and uri.url.startswith("jdbc:postgresql://db.example:6543/shop?ApplicationName=mvlog-spark&")
    assert (uri.properties["user"], uri.properties["password"], uri.properties["sslmode"]) == \
        ("app", "s3cret", "require")
    assert "s3cret" not in repr(uri)


def test_several_hosts_and_ipv6():
    source = JdbcSource.from_dsn("host=a,::1 port=1,2 dbname=d")
    assert source.url.partition("?")[0] == "jdbc:postgresql://a:1,[::1]:2/d"


@pytest.mark.parametrize("dsn", ["postgresql://app:pw@/postgres", "dbname=shop user=app", "host=/var/run/postgresql"])
def test_a_dsn_without_a_tcp_host_is_a_configuration_error(dsn, monkeypatch):
    monkeypatch.delenv("PGHOST", raising=False)
    with pytest.raises(ConfigError, match="source.dsn must name a TCP host for Spark's JDBC reads") as error:
        JdbcSource.from_dsn(dsn)
    assert "pw" not in str(error.value)


def test_pghost_and_pgport_fill_in_as_for_libpq(monkeypatch):
    monkeypatch.setenv("PGHOST", "db.internal")
    monkeypatch.setenv("PGPORT", "5433")
    assert JdbcSource.from_dsn("dbname=shop").url.partition("?")[0] == "jdbc:postgresql://db.internal:5433/shop"

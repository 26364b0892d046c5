"""The PostgreSQL adapter without a server: secrets in DSNs, errors that say whether they are transient."""

from __future__ import annotations

import psycopg2
import pytest
from apply.test_config import VALID

from mvlog.config import parse_config
from mvlog.errors import ConfigError, SourceError
from mvlog.postgres.pgtemp import free_port
from mvlog.postgres.source import Source, dsn_password, dsn_secrets


@pytest.mark.parametrize(
    ("dsn", "password"),
    [
        ("postgresql://u:pa%40ss@h/db", "pa@ss"),
        ("postgresql://u@h/db", None),
        ("host=h user=u password=secret dbname=d", "secret"),
        ("host=h password='it\\'s x' dbname=d", "it's x"),
        ("host=h dbname=d", None),
    ],
)
def test_dsn_password(dsn, password):
    assert dsn_password(dsn) == password


def test_the_secrets_of_a_configuration_are_its_dsn_password():
    assert dsn_secrets(parse_config(VALID).source.dsn) == ["s3cret"]
    assert dsn_secrets("postgresql://app@db/shop") == []


def test_an_unreachable_server_is_a_transient_error_without_the_password():
    source = Source(f"postgresql://app:hunter2@127.0.0.1:{free_port()}/shop", ["hunter2"])
    with pytest.raises(SourceError, match="^cannot connect to PostgreSQL: ") as failure:
        source.connect()
    assert failure.value.transient and "hunter2" not in str(failure.value)


def test_an_unparsable_dsn_is_a_configuration_error():
    with pytest.raises(ConfigError, match="source.dsn is not a valid PostgreSQL connection string"):
        Source("postgresql://[bad").connect()


def test_a_failed_statement_is_not_transient_a_lost_connection_is():
    source = Source("postgresql://app@h/db")
    assert not source.error(psycopg2.errors.UndefinedTable("relation \"x\" does not exist")).transient
    assert source.error(psycopg2.OperationalError("server closed the connection unexpectedly")).transient
    assert str(source.error(psycopg2.errors.SyntaxError("ERROR:  syntax error at end of input\n"))) == \
        "PostgreSQL: syntax error at end of input"

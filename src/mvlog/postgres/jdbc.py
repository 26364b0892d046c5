"""How Spark reaches PostgreSQL: the JDBC URL and properties derived from mvlog's DSN."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

from psycopg2.extensions import parse_dsn

from mvlog.errors import ConfigError
from mvlog.timeouts import Timeouts


def jdbc_properties(timeouts: Timeouts) -> dict[str, str]:
    """The PostgreSQL JDBC driver's properties for ``timeouts``: Spark's reads are a refresh's
    reads, which PostgreSQL may compute for long before the first row (the long bound)."""
    return {"connectTimeout": str(max(1, math.ceil(timeouts.connect))),
            "loginTimeout": str(max(1, math.ceil(timeouts.connect))),
            "socketTimeout": str(max(1, math.ceil(timeouts.long_statement))), "tcpKeepAlive": "true"}


def jdbc_read_settings(timeouts: Timeouts) -> tuple[str, ...]:
    """``SET LOCAL`` statements for a refresh's JDBC read, run in its snapshot's transaction. The
    read fetches its rows in batches inside that transaction; a client silent in it for longer
    than the statement bound has gone (a Spark task cancelled as its path stalled: its goodbye
    never arrives), and the server ends the session then, its locks with it (a key map's, which the
    next refresh truncates): this process cannot reap an executor's sessions as
    :func:`~mvlog.postgres.abandoning.reap` does its own. In the transaction, not the driver's
    ``options`` (PgBouncer refuses those).

    And no parallel plans: the driver fetches the rows in batches (a non-zero fetch count), and
    PostgreSQL runs such a plan without its workers, so a plan costed for three processes runs on
    one — TPC-H SF 1's fast read took 2.1 s so, 1.0 s planned serially (BENCHMARKS.md, session 47).
    PostgreSQL's documentation advises this setting for such clients ("When Can Parallel Query Be
    Used?")."""
    return (f"SET LOCAL idle_in_transaction_session_timeout = {max(1000, int(timeouts.statement * 1000))}",
            "SET LOCAL max_parallel_workers_per_gather = 0")


@dataclass(frozen=True)
class JdbcSource:
    """How Spark reaches PostgreSQL: a JDBC URL plus connection properties."""

    url: str
    properties: dict[str, str] = field(repr=False)
    read_settings: tuple[str, ...] = ()  # SET LOCAL statements of a read at a snapshot (jdbc_read_settings)

    @classmethod
    def from_dsn(cls, dsn: str, timeouts: Timeouts | None = None) -> JdbcSource:
        """Spark's way to the database of ``dsn``: its host, database and credentials, and the
        driver's bounds of ``timeouts`` (``source.timeouts``: connecting, logging in, a silent socket)."""
        try:
            params = parse_dsn(dsn)
        except Exception:
            raise ConfigError("source.dsn is not a valid PostgreSQL connection string") from None
        # libpq falls back to $PGHOST, then to a Unix socket, which JDBC cannot use.
        host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or ""
        if not host or host.startswith("/"):
            raise ConfigError("source.dsn must name a TCP host for Spark's JDBC reads "
                              "(postgresql://user@HOST:port/db or host=HOST), not a Unix socket"
                              + (" directory" if host else ""))
        hosts = host.split(",")
        ports = (params.get("port") or os.environ.get("PGPORT") or "5432").split(",")
        netloc = ",".join(f"[{h}]:{ports[min(i, len(ports) - 1)]}" if ":" in h
                          else f"{h}:{ports[min(i, len(ports) - 1)]}"
                          for i, h in enumerate(hosts))
        dbname = params.get("dbname") or params.get("user") or "postgres"
        properties = {"driver": "org.postgresql.Driver"}
        for key, prop in (("user", "user"), ("password", "password"), ("sslmode", "sslmode"),
                          ("sslrootcert", "sslrootcert"), ("sslcert", "sslcert"), ("sslkey", "sslkey")):
            if params.get(key):
                properties[prop] = params[key]
        # The driver's camelCase properties (its name in pg_stat_activity, its bounds) go in the URL:
        # as a reader's options they are lost over Spark Connect (its reads ran as "PostgreSQL JDBC
        # Driver", unbounded), while the URL reaches the driver as written. No secret goes there.
        bounds = timeouts or Timeouts()
        driver = {"ApplicationName": "mvlog-spark", **jdbc_properties(bounds)}
        return cls(f"jdbc:postgresql://{netloc}/{quote(dbname, safe='')}?{urlencode(driver)}", properties,
                   jdbc_read_settings(bounds))

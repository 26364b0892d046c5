"""Durations as mvlog.yaml writes them (``30s``, ``10m``, ``1h30m``) and ``source.timeouts``: how
long mvlog waits on PostgreSQL before it gives a connection up (a part of :mod:`mvlog.config`
that the PostgreSQL layer reads)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

_DURATION = re.compile(r"(\d+)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> timedelta:
    """``30s``, ``10m``, ``2h``, ``1d`` or a sum of them (``1h30m``); a bare number is seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=value)
    text = str(value).strip().lower().replace(" ", "")
    text = text + "s" if text.isdigit() else text
    parts = _DURATION.findall(text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text or all(int(n) == 0 for n, _ in parts):
        raise ValueError(f"{value!r} is not a duration (e.g. 30s, 10m, 2h, 1d, 1h30m)")
    return timedelta(seconds=sum(int(n) * _UNIT_SECONDS[u] for n, u in parts))


def _seconds(value: Any) -> float:
    return parse_duration(value).total_seconds()


class Timeouts(BaseModel):
    """How long mvlog waits on PostgreSQL before it gives a connection up (``source.timeouts``; a
    duration each: ``10s``, ``2m``, ``1h``). A connection that stops answering without closing (a
    network partition, a NAT or proxy that forgot it, a server stuck on I/O) is abandoned at its
    bound, never waited on for ever (:mod:`mvlog.postgres.deadlines`; README "When PostgreSQL
    stops answering")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Opening a connection: TCP connect and login (libpq connect_timeout; JDBC connectTimeout, loginTimeout).
    connect: float = 10.0
    # A peer that stops acknowledging (TCP keepalives and tcp_user_timeout), and the refresh's
    # heartbeat: the view-lock session is asked every third of this and must answer within it.
    keepalive: float = 30.0
    # A short call: the catalog, a stamp, a lock, a key-map step, status, metrics, the dashboard
    # (past it, a call the server is still computing gets it again, up to long_statement).
    statement: float = 60.0
    # A call that may run long by what it is: a refresh's reads through Spark's JDBC (the longest
    # PostgreSQL may stay silent while it computes them), a complete refresh's key-map rebuild, a
    # purge; and the longest any call the server is still computing may take.
    long_statement: float = 1800.0
    # The replication stream of the logical capture: silent (no data, no keepalive) for longer and
    # it is closed and opened again from the recorded position.
    stream: float = 30.0

    @field_validator("connect", "keepalive", "statement", "long_statement", "stream", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return _seconds(value)

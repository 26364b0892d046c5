"""Spark Connect URLs: the server a configuration names, its address, its secrets.

A leaf of the ``spark`` package: the session factory and the engine both read it.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from mvlog.config import SparkConfig


def configured_remote(config: SparkConfig) -> str | None:
    """The Spark Connect server the configuration names: ``spark.remote``, else ``$SPARK_REMOTE``."""
    return config.remote or os.environ.get("SPARK_REMOTE") or None


def remote_address(url: str) -> str:
    """``sc://host:port`` of a Spark Connect URL, without its parameters (which may hold a token)."""
    return url.split(";")[0].rstrip("/")


def remote_secrets(url: str | None) -> list[str]:
    """Strings of a Spark Connect URL that must never be printed: its token and any other
    parameter value that looks like a credential (``sc://host:port/;token=…;x-api-key=…``)."""
    if not url or ";" not in url:
        return []
    secrets = []
    for param in url.split(";")[1:]:
        key, _, value = param.partition("=")
        if value and key.lower() not in ("use_ssl", "user_id", "session_id", "user_agent"):
            secrets.append(value)
    return secrets


def host_port(where: str) -> tuple[str, int]:
    """Host and port of ``sc://host[:port]`` (Spark Connect's default port is 15002)."""
    netloc = urlsplit(where.replace("sc://", "http://", 1)).netloc
    parsed = urlsplit(f"http://{netloc}")
    return parsed.hostname or "localhost", parsed.port or 15002

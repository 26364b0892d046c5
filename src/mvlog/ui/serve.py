"""Starting the dashboard over a project's configuration: ``mvlog ui`` in the foreground,
``mvlog schedule --ui`` on threads beside the scheduler."""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from mvlog.config import Config
from mvlog.errors import UsageError
from mvlog.project import Project
from mvlog.ui.data import Dashboard
from mvlog.ui.server import serve_in_thread

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def start(config: Config, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, interval: float = 2.0) -> WSGIServer:
    """Serve the dashboard of ``config`` on ``host``:``port`` from daemon threads, over read-only
    PostgreSQL sessions of its own; returns the server (``shutdown()`` stops it)."""
    dashboard = Dashboard(lambda: Project(config, read_only=True), interval)
    try:
        return serve_in_thread(dashboard, host, port)
    except OSError as exc:
        raise UsageError(f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}") from None


def address(server: WSGIServer) -> str:
    """The URL a browser opens the dashboard at."""
    host, port = server.server_address[:2]
    shown = host if isinstance(host, str) and host not in ("0.0.0.0", "") else "127.0.0.1"
    return f"http://{shown}:{port}/"

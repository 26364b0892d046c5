"""The dashboard's HTTP side: a WSGI application (pages from Jinja2 templates, the JSON API under
``/api/``, the static files the package ships) and a threaded server from the standard library.

Routes: ``/`` (the graph), ``/views/<name>``, ``/tables/<schema.table>``; each with its JSON under
``/api`` (``/api/overview``, ``/api/views/<name>``, ``/api/tables/<name>``); ``/static/<file>``.
Only GET and HEAD; nothing is written anywhere.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import threading
from collections.abc import Callable, Iterable
from importlib import resources
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from jinja2 import Environment, PackageLoader, select_autoescape

from mvlog.model import HIDDEN_PREFIX
from mvlog.ui.data import Dashboard
from mvlog.ui.states import STATES

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
log = logging.getLogger("mvlog.ui")
RELOAD_SECONDS = 5
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class App:
    """The WSGI application over one :class:`Dashboard`."""

    def __init__(self, dashboard: Dashboard, loopback_only: bool = True):
        self.dashboard = dashboard
        self.loopback_only = loopback_only
        self.templates = Environment(loader=PackageLoader("mvlog.ui", "templates"),
                                     autoescape=select_autoescape(["html"]))
        self.templates.globals.update(states=STATES, reload_seconds=RELOAD_SECONDS, hidden_prefix=HIDDEN_PREFIX)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        # WSGI hands the path decoded, as latin-1 text: its bytes again, read as UTF-8
        path = (environ.get("PATH_INFO") or "/").encode("latin-1").decode("utf-8", "replace")
        if method not in ("GET", "HEAD"):
            return _respond(start_response, "405 Method Not Allowed", "text/plain", b"read-only\n",
                            [("Allow", "GET, HEAD")])
        if not self._host_allowed(environ):  # a page elsewhere that named this address (DNS rebinding)
            return _respond(start_response, "403 Forbidden", "text/plain", b"this dashboard answers on loopback\n")
        try:
            status, kind, body = self.route(path)
        except Exception as exc:  # noqa: BLE001 — one clear line to the browser, the detail to the log
            log.exception("the dashboard failed on %r", path)
            status, kind, body = "500 Internal Server Error", "text/plain", f"{type(exc).__name__}\n".encode()
        return _respond(start_response, status, kind, body, head=method == "HEAD")

    def _host_allowed(self, environ: dict[str, Any]) -> bool:
        """A server bound to loopback answers requests for a loopback name only; one bound to other
        interfaces, every request (its operator chose to expose it)."""
        if not self.loopback_only:
            return True
        host = environ.get("HTTP_HOST", "")
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:].split("]", 1)[0]
        return name in LOOPBACK

    def route(self, path: str) -> tuple[str, str, bytes]:
        """(HTTP status, content type, body) of ``path``."""
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        if path == "/favicon.ico":  # what a browser asks for on a page without a <link rel="icon">: the JSON
            return self._static("favicon.svg")
        api = path.startswith("/api/")
        page = path.removeprefix("/api") if api else path
        name = page.split("/", 2)[2] if page.count("/") >= 2 else ""
        if page in ("/", "/overview"):
            data = self.dashboard.overview()
            return self._reply(api, data, "graph.html", layout=self.dashboard.layout(data))
        if page.startswith("/views/") and name:
            found = self.dashboard.view(name)
            if found is not None:
                return self._reply(api, found, "view.html", charts=Dashboard.charts(found))
            return _not_found(api, f"no view {name} in this project")
        if page.startswith("/tables/") and name:
            found = self.dashboard.table(name)
            if found is not None:
                return self._reply(api, found, "table.html")
            return _not_found(api, f"no logged table {name} in this project")
        return _not_found(api, f"nothing at {path}")

    def _reply(self, api: bool, data: dict[str, Any], template: str, **extra: Any) -> tuple[str, str, bytes]:
        if api:
            return "200 OK", "application/json", json.dumps(data, default=str, indent=1).encode()
        html = self.templates.get_template(template).render(data=data, project=self.dashboard.config, **extra)
        return "200 OK", "text/html; charset=utf-8", html.encode()

    @staticmethod
    def _static(name: str) -> tuple[str, str, bytes]:
        if name == "states.css":  # the states' colours, from the one table of them
            css = "".join(f".state-{s.name} {{ background: {s.colour}; }}\n" for s in STATES.values())
            return "200 OK", "text/css", css.encode()
        if "/" in name or name.startswith("."):
            return _not_found(False, "no such file")
        file = resources.files("mvlog.ui").joinpath("static", name)
        if not file.is_file():
            return _not_found(False, "no such file")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return "200 OK", kind, file.read_bytes()


def _not_found(api: bool, message: str) -> tuple[str, str, bytes]:
    if api:
        return "404 Not Found", "application/json", json.dumps({"error": message}).encode()
    return "404 Not Found", "text/plain; charset=utf-8", f"{message}\n".encode()


def _respond(start_response: StartResponse, status: str, kind: str, body: bytes,
             headers: list[tuple[str, str]] | None = None, head: bool = False) -> list[bytes]:
    start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
                            ("Content-Security-Policy", "default-src 'self'"), *(headers or [])])
    return [] if head else [body]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    dashboard: Dashboard | None = None

    def shutdown(self) -> None:
        """Stop serving, and stop the dashboard's reads."""
        super().shutdown()
        self.server_close()
        if self.dashboard is not None:
            self.dashboard.stop()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
        log.info("%s %s", self.address_string(), format % args)


def server(dashboard: Dashboard, host: str, port: int) -> WSGIServer:
    """A server of the dashboard bound to ``host``:``port`` (port 0: a free one), not yet serving."""
    return make_server(host, port, App(dashboard, loopback_only=host in LOOPBACK), server_class=_ThreadingServer,
                       handler_class=_QuietHandler)


def serve_in_thread(dashboard: Dashboard, host: str, port: int) -> WSGIServer:
    """Start the dashboard's overview reads and serve it from a daemon thread; returns the server
    (``server_address`` tells the port; ``shutdown()`` stops it)."""
    httpd = server(dashboard, host, port)
    if isinstance(httpd, _ThreadingServer):
        httpd.dashboard = dashboard
    dashboard.start()
    threading.Thread(target=httpd.serve_forever, name="mvlog-ui", daemon=True).start()
    return httpd

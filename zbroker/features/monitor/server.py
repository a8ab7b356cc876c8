"""The monitor's HTTP server: its own threads (stdlib ``ThreadingHTTPServer``), reading
only the snapshot the loop publishes (:class:`~.feature.MonitorHub`).

Paths: ``/`` the network map page, ``/metrics`` (Prometheus), ``/healthz``, and JSON
under ``/api/``: ``status``, ``links``, ``routes``, ``peers``, ``queues``, ``durables``
(what ``zbroker status|routes|peers --json`` print, from the same replies) and ``graph``
(the map's nodes and edges).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any

from .graph import graph
from .metrics import CONTENT_TYPE, MetricsRenderer
from .snapshot import Snapshot

if TYPE_CHECKING:
    from .feature import MonitorHub

__all__ = ["MonitorServer"]

log = logging.getLogger("zbroker.monitor")


def _status_part(key: str) -> Callable[[Snapshot], Any]:
    return lambda snap: snap.doc("status").get(key, [])


#: /api/NAME -> the document, from a snapshot
API: dict[str, Callable[[Snapshot], Any]] = {
    "status": lambda snap: snap.doc("status"),
    "links": _status_part("links"),
    "routes": lambda snap: snap.doc("routes"),
    "peers": lambda snap: snap.doc("peers"),
    # the queues feature's section of the status (queue groups and shared durables)
    "queues": _status_part("queues"),
    "durables": _status_part("durables"),
    "graph": graph,
}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        hub = self.server.hub
        try:
            if path == "/":
                self._send(200, "text/html; charset=utf-8", self.server.page)
            elif path == "/metrics":
                self._send(200, CONTENT_TYPE, self.server.metrics.render())
            elif path == "/healthz":
                healthy, why = hub.health()
                body = {"healthy": healthy, "reason": why}
                self._json(200 if healthy else 503, body)
            elif path.startswith("/api/") and path[5:] in API:
                snap = hub.current()
                if snap is None:
                    self._json(503, {"error": "the node has published no snapshot yet"})
                else:
                    self._json(200, API[path[5:]](snap))
            else:
                self._json(404, {"error": f"no such path {path!r}", "paths": _paths()})
        except Exception:  # a bug: answer 500, keep serving
            log.exception("monitor: error serving %s", path)
            self._json(500, {"error": "internal error (logged)"})

    def _json(self, code: int, body: Any) -> None:
        self._send(code, "application/json", json.dumps(body).encode())

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("monitor: %s " + format, self.address_string(), *args)


def _paths() -> list[str]:
    return ["/", "/metrics", "/healthz", *(f"/api/{name}" for name in API)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: MonitorHub
    metrics: MetricsRenderer
    page: bytes


class _Server6(_Server):
    address_family = socket.AF_INET6


class MonitorServer:
    """Binds at construction (a taken port fails the node's start), serves in a thread
    from :meth:`start` until :meth:`close`."""

    def __init__(self, host: str, port: int, hub: MonitorHub) -> None:
        cls = _Server6 if ":" in host else _Server
        self._server = cls((host, port), _Handler)
        self._server.hub = hub
        self._server.metrics = MetricsRenderer(hub.current)
        self._server.page = resources.files(__package__).joinpath("map.html").read_bytes()
        self._thread: threading.Thread | None = None
        bound_host, bound_port = self._server.server_address[:2]
        shown = str(bound_host if isinstance(bound_host, str) else bound_host.decode())
        shown = f"[{shown}]" if ":" in shown else shown
        self.url = f"http://{shown}:{bound_port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.25,), name="zbroker-monitor", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5.0)
            self._thread = None
        self._server.server_close()

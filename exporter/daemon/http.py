"""The HTTP endpoints: /metrics renders the latest results; /healthz, /readyz."""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from exporter.daemon import Daemon

log = logging.getLogger(__name__)


class Handler(BaseHTTPRequestHandler):
    daemon_ref: Daemon  # set on the subclass built per server

    def do_GET(self) -> None:
        d = self.daemon_ref
        path = self.path.split("?", 1)[0]
        if path == d.config.web.telemetry_path:
            self._reply(200, generate_latest(d.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            healthy, why = d.health()
            self._reply(200 if healthy else 503, f"{why}\n".encode())
        elif path == "/readyz":
            if d.store.ready:
                self._reply(200, b"ready\n")
            else:
                self._reply(503, b"not ready: no complete collection cycle yet\n")
        elif path == "/":
            body = (f"<html><head><title>kafka-txn-exporter</title></head><body>"
                    f"<h1>kafka-txn-exporter</h1><p><a href='{d.config.web.telemetry_path}'>"
                    f"Metrics</a> <a href='/healthz'>healthz</a> <a href='/readyz'>readyz</a>"
                    f"</p></body></html>")
            self._reply(200, body.encode(), "text/html; charset=utf-8")
        else:
            self._reply(404, b"not found\n")

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
               ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: %s", format % args)

"""Binding the HTTP endpoint: IPv4 and IPv6 listen addresses, and a clear error when the
address cannot be used."""

from __future__ import annotations

import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporter.config import WebConfig


class ListenError(OSError):
    """The listen address cannot be bound (in use, not local, not permitted). One line."""


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def bind_http_server(web: WebConfig, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A threading HTTP server bound to ``web.listen_address`` (``:PORT``, ``HOST:PORT``,
    ``[IPV6]:PORT``); not yet serving. Raises :class:`ListenError`."""
    host, port = web.host_port
    server_class = _Server6 if web.is_ipv6 else ThreadingHTTPServer
    try:
        server = server_class((host, port), handler)
    except OSError as e:
        raise ListenError(e.errno, listen_error_text(web, e)) from None
    server.daemon_threads = True
    return server


def listen_error_text(web: WebConfig, error: OSError) -> str:
    reason = error.strerror or str(error)
    return f"cannot listen on {web.listen_address} (web.listen_address): {reason}"

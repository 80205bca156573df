"""The HTTP endpoints: ``/metrics`` (prometheus_client's own WSGI exposition: gzip,
OpenMetrics negotiation, ``name[]`` filtering), ``/healthz``, ``/readyz``, a landing page.

The server is built for a scrape endpoint on a network that may be hostile:

* one thread accepts and reads requests for every connection, without blocking: a
  connection must deliver its TLS handshake and complete request head within
  ``read_timeout`` of being accepted, or it is closed (idle and half-sent requests cannot
  hold a thread);
* complete requests go to a bounded pool of ``workers`` threads; at most ``max_pending``
  connections wait for their request head, more are refused (closed at once), and up to
  :data:`QUEUED_REQUESTS` complete requests wait for a worker; past that a request is
  answered 503 (tests/faults: 200 concurrent scrapers for 10 s are all answered 200);
* one request per connection (``Connection: close``); GET and HEAD only;
* TLS (optionally verified client certificates) and basic auth from the web config file
  (:mod:`exporter.daemon.web`). ``/healthz`` and ``/readyz`` never ask for basic auth
  (Kubernetes probes cannot send it) but are served over TLS like the rest.
"""

from __future__ import annotations

import contextlib
import io
import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, make_wsgi_app

from exporter.daemon.web import BasicAuth, WebSettings

log = logging.getLogger(__name__)

#: Complete requests that may wait for a worker before more are answered 503.
QUEUED_REQUESTS = 256

#: (healthy, why): what /healthz and /readyz answer.
Probe = Callable[[], tuple[bool, str]]
#: An API endpoint: the query string in, (status, headers, body) out. Served behind basic
#: auth like /metrics, from published state only.
Api = Callable[[str], tuple[int, list[tuple[str, str]], bytes]]

MAX_HEAD_BYTES = 16 * 1024
_HEAD_END = b"\r\n\r\n"


@dataclass
class _Pending:
    """A connection still delivering its TLS handshake or request head."""

    sock: socket.socket
    address: Any
    deadline: float
    handshaking: bool = False
    head: bytearray = field(default_factory=bytearray)


class MetricsServer:
    """Serves the endpoints of one exporter process; :meth:`start` binds, :meth:`stop` ends."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str,
        port: int,
        telemetry_path: str = "/metrics",
        health: Probe,
        ready: Probe,
        settings: WebSettings | None = None,
        read_timeout_s: float = 5.0,
        workers: int = 4,
        max_pending: int = 1024,
        api: Mapping[str, Api] | None = None,
    ) -> None:
        self.settings = settings or WebSettings()
        self.api = dict(api or {})
        self.telemetry_path = telemetry_path
        self.health = health
        self.ready = ready
        self.read_timeout_s = read_timeout_s
        self.workers = workers
        self.max_pending = max_pending
        self._app = make_wsgi_app(registry)
        self._auth = BasicAuth(self.settings.users)
        self._ssl = self.settings.tls.context() if self.settings.tls else None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._pending: dict[int, _Pending] = {}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="http-worker")
        # Complete requests wait their turn (a scrape takes milliseconds): a burst of a few
        # hundred concurrent scrapers is served, late, rather than refused; only past that
        # is the excess answered 503, so that memory stays bounded.
        self._in_flight = threading.BoundedSemaphore(workers + QUEUED_REQUESTS)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused = 0
        self.timed_out = 0

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def prepare(self, settings: WebSettings) -> Callable[[], None]:
        """What makes the server serve with ``settings`` (a reload): the users and the TLS
        material are loaded now (ssl.SSLError, OSError when they cannot be) and put in place,
        whole, by the function returned, for the requests and connections from then on."""
        auth = BasicAuth(settings.users)
        context = settings.tls.context() if settings.tls else None

        def install() -> None:
            self._auth, self._ssl, self.settings = auth, context, settings

        return install

    @property
    def scheme(self) -> str:
        return "https" if self._ssl else "http"

    def start(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="http-accept", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, close every waiting connection, let requests in flight finish."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._listener.close()
        self._selector.close()

    # -- the accepting thread --------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                events = self._selector.select(timeout=0.2)
            except OSError:  # a socket closed under us
                events = []
            for key, _ in events:
                if key.data is None:
                    self._accept()
                else:
                    self._advance(key.data)
            self._expire(time.monotonic())
        for pending in list(self._pending.values()):
            self._drop(pending)

    def _accept(self) -> None:
        for _ in range(64):  # drain the backlog a little at a time
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("http: accept failed: %s", e)
                return
            if len(self._pending) >= self.max_pending:
                self.refused += 1
                sock.close()
                continue
            sock.setblocking(False)
            pending = _Pending(sock, address, time.monotonic() + self.read_timeout_s)
            if self._ssl is not None:
                try:
                    pending.sock = self._ssl.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                except (ssl.SSLError, OSError):
                    sock.close()
                    continue
                pending.handshaking = True
            self._pending[pending.sock.fileno()] = pending
            self._selector.register(pending.sock, selectors.EVENT_READ, pending)

    def _advance(self, pending: _Pending) -> None:
        sock = pending.sock
        try:
            if pending.handshaking:
                assert isinstance(sock, ssl.SSLSocket)
                sock.do_handshake()
                pending.handshaking = False
                self._selector.modify(sock, selectors.EVENT_READ, pending)
            while True:
                chunk = sock.recv(8192)
                if not chunk:
                    self._drop(pending)
                    return
                pending.head += chunk
                if _HEAD_END in pending.head:
                    self._dispatch(pending)
                    return
                if len(pending.head) > MAX_HEAD_BYTES:
                    self._drop(
                        pending,
                        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                        b"Connection: close\r\nContent-Length: 0\r\n\r\n",
                    )
                    return
        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            return
        except ssl.SSLWantWriteError:
            self._selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, pending)
            return
        except (ssl.SSLError, OSError) as e:
            log.debug("http: dropping %s: %s", pending.address, e)
            self._drop(pending)

    def _expire(self, now: float) -> None:
        for pending in [p for p in self._pending.values() if p.deadline <= now]:
            self.timed_out += 1
            self._drop(pending)

    def _forget(self, pending: _Pending) -> None:
        self._pending.pop(pending.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(pending.sock)

    def _drop(self, pending: _Pending, reply: bytes = b"") -> None:
        self._forget(pending)
        with contextlib.suppress(OSError, ValueError):
            if reply and not pending.handshaking:
                pending.sock.send(reply)
        with contextlib.suppress(OSError):
            pending.sock.close()

    def _dispatch(self, pending: _Pending) -> None:
        self._forget(pending)
        if not self._in_flight.acquire(blocking=False):
            self._drop(
                pending,
                b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                b"Content-Length: 0\r\nRetry-After: 1\r\n\r\n",
            )
            return
        try:
            self._pool.submit(self._serve, pending)
        except RuntimeError:  # shutting down
            self._in_flight.release()
            self._drop(pending)

    # -- a worker ---------------------------------------------------------------------------

    def _serve(self, pending: _Pending) -> None:
        try:
            pending.sock.setblocking(True)
            pending.sock.settimeout(self.read_timeout_s)
            _Handler(pending.sock, pending.address, self, bytes(pending.head))
        except Exception:
            log.debug("http: request from %s failed", pending.address, exc_info=True)
        finally:
            with contextlib.suppress(OSError):
                pending.sock.close()
            self._in_flight.release()

    def respond(self, handler: _Handler, head_only: bool) -> None:
        """Route one parsed request and write the answer."""
        url = urlsplit(handler.path)
        path = url.path
        if path in ("/healthz", "/readyz"):
            ok, why = (self.health if path == "/healthz" else self.ready)()
            handler.reply(
                200 if ok else 503,
                [("Content-Type", "text/plain; charset=utf-8")],
                f"{why}\n".encode(),
                head_only,
            )
            return
        if not self._auth.check(handler.headers.get("Authorization")):
            handler.reply(
                401,
                [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("WWW-Authenticate", 'Basic realm="kafka-txn-exporter"'),
                ],
                b"Unauthorized\n",
                head_only,
            )
            return
        if path == self.telemetry_path:
            status, headers, body = self._metrics(handler, url.query)
            handler.reply(status, headers, body, head_only)
        elif path in self.api:
            status, headers, body = self.api[path](url.query)
            handler.reply(status, headers, body, head_only)
        elif path == "/":
            page = (
                f"<html><head><title>kafka-txn-exporter</title></head><body>"
                f"<h1>kafka-txn-exporter</h1><p><a href='{self.telemetry_path}'>Metrics</a> "
                + "".join(f"<a href='{p}'>{p}</a> " for p in self.api)
                + "<a href='/healthz'>healthz</a> <a href='/readyz'>readyz</a></p>"
                "</body></html>"
            )
            handler.reply(200, [("Content-Type", "text/html; charset=utf-8")], page.encode(), head_only)
        else:
            handler.reply(404, [("Content-Type", "text/plain; charset=utf-8")], b"not found\n", head_only)

    def _metrics(self, handler: _Handler, query: str
                 ) -> tuple[int, list[tuple[str, str]], bytes]:  # fmt: skip
        """prometheus_client's WSGI app, called as a WSGI server would (HEAD as GET)."""
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": self.telemetry_path,
            "QUERY_STRING": query,
            "SERVER_PROTOCOL": handler.request_version,
            "wsgi.input": io.BytesIO(),
            "wsgi.url_scheme": self.scheme,
        }
        for name, env in (("Accept", "HTTP_ACCEPT"), ("Accept-Encoding", "HTTP_ACCEPT_ENCODING")):
            value = handler.headers.get(name)
            if value is not None:
                environ[env] = value
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]],
                           exc_info: Any = None) -> Callable[[bytes], None]:  # fmt: skip
            started["status"], started["headers"] = status, headers
            return lambda _data: None

        chunks: Iterable[bytes] = self._app(environ, start_response)
        body = b"".join(chunks)
        return int(str(started["status"]).split(" ", 1)[0]), list(started["headers"]), body

    @property
    def extra_headers(self) -> Mapping[str, str]:
        return self.settings.headers


class _Handler(BaseHTTPRequestHandler):
    """Parses the request head the accepting thread already read; answers through
    :meth:`MetricsServer.respond`."""

    server_version = "kafka-txn-exporter"
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        """The ``Server`` header: the product alone, not the Python version under it."""
        return self.server_version

    def __init__(self, sock: socket.socket, address: Any, owner: MetricsServer,
                 head: bytes) -> None:  # fmt: skip
        self._head = head
        self.owner = owner
        super().__init__(sock, address, owner)  # type: ignore[arg-type]

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BytesIO(self._head)
        self.wfile = self.connection.makefile("wb", buffering=0)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.close()

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()

    def do_GET(self) -> None:
        self.owner.respond(self, head_only=False)

    def do_HEAD(self) -> None:
        self.owner.respond(self, head_only=True)

    def reply(self, status: int, headers: list[tuple[str, str]], body: bytes,
              head_only: bool) -> None:  # fmt: skip
        self.send_response(status)
        for name, value in [*headers, *self.owner.extra_headers.items()]:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None
                   ) -> None:  # fmt: skip
        # Methods other than GET/HEAD (501 in http.server) are 405 here.
        if code == 501:
            code, message = 405, "Method Not Allowed"
        super().send_error(code, message, explain)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: %s", format % args)

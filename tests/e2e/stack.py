"""The monitoring stack of the end-to-end tests, as plain helpers (no fixtures here).

* :class:`ManagedProcess`: a real ``prometheus`` or ``prometheus-alertmanager`` process with
  its output in a log file; :meth:`ManagedProcess.stop` terminates, then kills, and always
  reaps it.
* :class:`PagerDutyStandIn`: a local stand-in for PagerDuty's Events API v2 (and for the
  ticket webhook) that records every JSON body POSTed to it.
* config rendering: the generated alert rules with short ``for:`` durations, the example
  Alertmanager routing with short group timers and local endpoints, a Prometheus config.
* :func:`wait_until`: every wait is bounded and fails with a diagnostic dump.

Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypeVar

import yaml

from alerts.alertmanager import render_example
from alerts.generate import render as render_rules_text
from alerts.rules import Thresholds, thresholds_from_mapping

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
#: The Prometheus job that scrapes the daemon; KafkaTxnExporterDown matches it by regex.
SCRAPE_JOB = "kafka-txn-exporter"
#: PagerDuty Events API v2's path, kept on the stand-in so the url looks like the real one.
PAGERDUTY_PATH = "/v2/enqueue"
TICKETS_PATH = "/tickets"
LOG_TAIL_LINES = 40

# No proxy for loopback: urllib would otherwise honour http_proxy for 127.0.0.1.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StackError(RuntimeError):
    """A process of the stack did not start or answered unexpectedly; carries its log tail."""


def require_binary(*names: str) -> str:
    """The first of ``names`` found on PATH; a clear error naming the Debian package if none."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise StackError(
        f"none of {', '.join(names)} is on PATH: install the Debian packages "
        "prometheus and prometheus-alertmanager (.ci/setup.sh does)"
    )


def child_env() -> dict[str, str]:
    """The environment for the stack's processes: no proxy settings (loopback only)."""
    return {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}


# -- HTTP -----------------------------------------------------------------------------------


def http_get(url: str, *, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """Status and body of a GET; HTTP errors are returned, connection errors raised."""
    try:
        with _OPENER.open(url, timeout=timeout_s) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as e:
        return int(e.code), bytes(e.read())


def get_json(url: str, *, timeout_s: float = 5.0) -> Any:
    status, body = http_get(url, timeout_s=timeout_s)
    if status != 200:
        raise StackError(f"GET {url}: HTTP {status}: {body[:500]!r}")
    return json.loads(body)


def describe_json(url: str) -> str:
    """The JSON at ``url``, pretty-printed, or why it could not be read (for failure dumps)."""
    try:
        return json.dumps(get_json(url), indent=1, sort_keys=True)
    except (OSError, StackError, ValueError) as e:
        return f"<cannot read {url}: {e}>"


# -- waiting --------------------------------------------------------------------------------


def wait_until(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    diagnostics: Callable[[], str],
    interval_s: float = 0.5,
) -> T:
    """Call ``check`` until it returns something other than None, at most ``timeout_s``.

    On timeout, fails with ``what`` and the ``diagnostics`` dump. Exceptions of ``check``
    propagate (a broken stack is not something to wait out).
    """
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        result = check()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n\n{diagnostics()}")
        time.sleep(interval_s)


# -- processes ------------------------------------------------------------------------------


class ManagedProcess:
    """One child process with stdout and stderr in ``log_path``; always reaped by stop()."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._log: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._log = self.log_path.open("wb")
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=child_env(),
            )
        except OSError:
            self._log.close()
            self._log = None
            raise

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def exit_code(self) -> int | None:
        """None while running (or never started)."""
        return self._proc.poll() if self._proc is not None else None

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"<no log at {self.log_path}: {e}>"
        return "\n".join(text.splitlines()[-lines:])

    def describe(self) -> str:
        code = self.exit_code()
        state = "running" if code is None else f"exited with {code}"
        return (
            f"--- {self.name} (pid {self.pid}, {state}), last {LOG_TAIL_LINES} lines of "
            f"{self.log_path}:\n{self.tail()}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait, SIGKILL if needed, and reap. Safe to call twice."""
        proc = self._proc
        try:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=timeout_s)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def wait_ready(self, url: str, *, timeout_s: float = 30.0) -> None:
        """Poll ``url`` until HTTP 200; fail early, with the log, if the process exits."""
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while True:
            if self.exit_code() is not None:
                raise StackError(f"{self.name} exited during start-up\n{self.describe()}")
            try:
                status, body = http_get(url, timeout_s=2.0)
                if status == 200:
                    return
                last = f"HTTP {status}: {body[:200]!r}"
            except OSError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise StackError(
                    f"{self.name} not ready at {url} after {timeout_s:.0f} s ({last})\n{self.describe()}"
                )
            time.sleep(0.2)


def run_check(argv: Sequence[str], what: str) -> None:
    """Run a checker (promtool, amtool) on a rendered file; fail with its output."""
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=60, env=child_env(), check=False
    )
    if done.returncode != 0:
        raise StackError(f"{what} is invalid ({' '.join(argv)}):\n{done.stdout}{done.stderr}")


# -- the PagerDuty Events API v2 stand-in ----------------------------------------------------


@dataclass(frozen=True)
class Received:
    """One POST the stand-in received: its path, when, and its JSON body."""

    path: str
    at: float
    body: dict[str, Any]


class _StandInHandler(BaseHTTPRequestHandler):
    stand_in: PagerDutyStandIn  # set on the per-server subclass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            self._reply(400, {"status": "invalid event", "message": "body is not JSON"})
            return
        if not isinstance(body, dict):
            self._reply(400, {"status": "invalid event", "message": "body is not an object"})
            return
        path = self.path.split("?", 1)[0]
        self.stand_in.record(Received(path=path, at=time.time(), body=body))
        if path == PAGERDUTY_PATH:
            # What PagerDuty answers to an accepted event.
            self._reply(
                202, {"status": "success", "message": "Event processed", "dedup_key": body.get("dedup_key")}
            )
        else:
            self._reply(200, {"status": "ok"})

    def _reply(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # keep the test output clean
        pass


class PagerDutyStandIn:
    """An HTTP server on 127.0.0.1 that records the Events API v2 events (and the ticket
    webhook's notifications) that Alertmanager sends."""

    def __init__(self) -> None:
        handler = type("Handler", (_StandInHandler,), {"stand_in": self})
        self._server = ThreadingHTTPServer((LOOPBACK, 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="pagerduty-stand-in", daemon=True
        )
        self._lock = threading.Lock()
        self._received: list[Received] = []

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    @property
    def pagerduty_url(self) -> str:
        return self.base_url + PAGERDUTY_PATH

    @property
    def tickets_url(self) -> str:
        return self.base_url + TICKETS_PATH

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def record(self, received: Received) -> None:
        with self._lock:
            self._received.append(received)

    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def pagerduty_events(self) -> list[dict[str, Any]]:
        return [r.body for r in self.received() if r.path == PAGERDUTY_PATH]

    def describe(self) -> str:
        lines = [f"--- stand-in at {self.base_url} received {len(self.received())} POST(s):"]
        for r in self.received():
            lines.append(
                f"{r.path} at {time.strftime('%H:%M:%S', time.localtime(r.at))}: "
                + json.dumps(r.body, sort_keys=True)
            )
        return "\n".join(lines)


# -- rendered configuration ------------------------------------------------------------------


def short_thresholds(for_: str) -> Thresholds:
    """The default thresholds with every ``*_for`` duration set to ``for_``."""
    return thresholds_from_mapping({f.name: for_ for f in fields(Thresholds) if f.name.endswith("_for")})


def render_rules(thresholds: Thresholds) -> str:
    """The rule file exactly as ``python -m alerts.generate --thresholds`` writes it."""
    return render_rules_text(thresholds)


def _shorten_route(route: dict[str, Any], timers: Mapping[str, str]) -> None:
    for key, value in timers.items():
        route[key] = value
    for child in route.get("routes") or []:
        # A child without its own timers inherits the parent's (already shortened).
        for key, value in timers.items():
            if key in child:
                child[key] = value
        for grandchild in child.get("routes") or []:
            _shorten_route(grandchild, timers)


def alertmanager_config(
    *,
    pagerduty_url: str,
    routing_key_file: Path,
    tickets_url: str,
    group_wait: str = "1s",
    group_interval: str = "2s",
    repeat_interval: str = "1h",
) -> str:
    """The example routing (``render_example``) with local endpoints and short group timers."""
    text = render_example(
        pagerduty_url=pagerduty_url, routing_key_file=routing_key_file, ticket_webhook_url=tickets_url
    )
    config: Any = yaml.safe_load(text)
    _shorten_route(
        config["route"],
        {"group_wait": group_wait, "group_interval": group_interval, "repeat_interval": repeat_interval},
    )
    return str(yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=1_000_000))


def prometheus_config(
    *,
    exporter_target: str,
    alertmanager_target: str,
    rule_file: Path,
    scrape_configs: Sequence[Mapping[str, Any]] = (),
    external_labels: Mapping[str, str] | None = None,
) -> str:
    """A Prometheus config: the exporter scraped as ``SCRAPE_JOB`` unless ``scrape_configs``
    are given (e.g. shaped like a ServiceMonitor's), alerts to ``alertmanager_target``."""
    global_config: dict[str, Any] = {
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "evaluation_interval": "1s",
    }
    if external_labels:
        global_config["external_labels"] = dict(external_labels)
    config = {
        "global": global_config,
        "rule_files": [str(rule_file)],
        "alerting": {
            "alertmanagers": [{"api_version": "v2", "static_configs": [{"targets": [alertmanager_target]}]}]
        },
        "scrape_configs": [dict(c) for c in scrape_configs]
        or [{"job_name": SCRAPE_JOB, "static_configs": [{"targets": [exporter_target]}]}],
    }
    return str(yaml.safe_dump(config, sort_keys=False, default_flow_style=False))


# -- the servers -------------------------------------------------------------------------------


@dataclass
class Server:
    """A started Prometheus or Alertmanager: its process and its base url."""

    process: ManagedProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


def start_alertmanager(directory: Path, config_text: str, port: int) -> Server:
    binary = require_binary("prometheus-alertmanager", "alertmanager")
    config = directory / "alertmanager.yml"
    config.write_text(config_text)
    run_check([require_binary("amtool"), "check-config", str(config)], "the test's Alertmanager config")
    storage = directory / "data"
    storage.mkdir()
    process = ManagedProcess(
        "alertmanager",
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={storage}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--cluster.listen-address=",  # no gossip: a single, isolated instance
            "--log.level=debug",
        ],
        directory / "alertmanager.log",
    )
    return _start_ready(process, port)


def _start_ready(process: ManagedProcess, port: int) -> Server:
    """Start a Prometheus-family server and wait for its /-/ready (stopped on failure)."""
    server = Server(process, port)
    process.start()
    try:
        process.wait_ready(f"{server.url}/-/ready")
    except BaseException:
        process.stop()
        raise
    return server


def start_prometheus(directory: Path, config_text: str, rules_text: str, port: int) -> Server:
    binary = require_binary("prometheus")
    rules = directory / "kafka-txn-exporter.rules.yml"
    rules.write_text(rules_text)
    config = directory / "prometheus.yml"
    config.write_text(config_text)
    run_check(
        [require_binary("promtool"), "check", "config", str(config)], "the test's Prometheus config or rules"
    )
    storage = directory / "data"
    storage.mkdir()
    process = ManagedProcess(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={storage}",
            f"--web.listen-address={LOOPBACK}:{port}",
            # Firing alerts are re-sent at this pace (default 1m); resolutions go out at once.
            "--rules.alert.resend-delay=1s",
            "--log.level=info",
        ],
        directory / "prometheus.log",
    )
    return _start_ready(process, port)


def query(prometheus: Server, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector; raises on an API error (e.g. a PromQL syntax error)."""
    answer = get_json(f"{prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if answer.get("status") != "success":
        raise StackError(f"query {expr!r} failed: {answer}")
    result = answer["data"]["result"]
    if not isinstance(result, list):  # a scalar or string result
        return [{"value": result}]
    return result


# -- the daemon under test ---------------------------------------------------------------------


@contextlib.contextmanager
def running(daemon: Any, drain_s: float) -> Iterator[Any]:
    """``daemon`` started on its schedule; at exit stopped, and the cycle ``stop()`` abandons
    waited for (at most ``drain_s``), so Spark and Kafka are not pulled from under it."""
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
        drained = daemon.wait_idle(drain_s)
        assert drained, f"a collection cycle was still running {drain_s:.0f} s after stop()"

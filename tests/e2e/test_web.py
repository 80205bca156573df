"""The metrics endpoint against real clients: a real Prometheus scrapes it over TLS with a
client certificate and basic auth; unauthenticated requests get 401; idle and half-sent
connections are closed after the read timeout and never hold a thread.

No Kafka and no Spark: the server (exporter.daemon.http.MetricsServer) serves a registry
with one exporter gauge, exactly as the daemon wires it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge

from exporter import cli
from exporter.daemon import Daemon, PipelineRunner
from exporter.daemon.http import MetricsServer
from exporter.daemon.web import WebSettings, load_web_config
from testbed.broker import free_port
from tests.e2e.stack import LOOPBACK, Server, describe_json, query, start_prometheus, wait_until

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.e2e]

USER = "prometheus"
PASSWORD = "scrape-secret-0"
SCRAPE_JOB = "kte-tls"
#: Idle connections opened by the slow-client test (the issue's acceptance number).
IDLE_CONNECTIONS = 500
READ_TIMEOUT_S = 1.0
#: Upper bound of the wait for every idle connection to be closed.
IDLE_CLOSE_BOUND_S = 10.0


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, f"openssl {' '.join(args)}:\n{done.stderr}"


def make_pki(directory: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl CLI)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj",
             "/CN=kte-test-ca", cwd=directory)  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                      ("client", "extendedKeyUsage=clientAuth")):  # fmt: skip
        (directory / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=kte-{name}",
                 cwd=directory)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile",
                 f"{name}.ext", cwd=directory)  # fmt: skip
    return Pki(ca=directory / "ca.crt", server_cert=directory / "server.crt",
               server_key=directory / "server.key", client_cert=directory / "client.crt",
               client_key=directory / "client.key")  # fmt: skip


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Gauge("kafka_txn_exporter_up", "test gauge", ["kafka_cluster"], registry=reg).labels(
        "e2e").set(1)  # fmt: skip
    return reg


@contextlib.contextmanager
def serving(settings: WebSettings, **kwargs: float) -> Iterator[MetricsServer]:
    server = MetricsServer(registry(), host=LOOPBACK, port=0, health=lambda: (True, "ok"),
                           ready=lambda: (True, "ready"), settings=settings,
                           **kwargs)  # type: ignore[arg-type]  # fmt: skip
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def secured(tmp_path: Path, pki: Pki) -> Iterator[MetricsServer]:
    """TLS with verified client certificates and basic auth, from a real web config file."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    web_config = tmp_path / "web-config.yml"
    web_config.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key),
                              "client_auth_type": "RequireAndVerifyClientCert",
                              "client_ca_file": str(pki.ca)},
        "basic_auth_users": {USER: hashed},
    }))  # fmt: skip
    with serving(load_web_config(web_config)) as server:
        yield server


def client_context(pki: Pki, *, with_cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if with_cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return ctx


def fetch(url: str, ctx: ssl.SSLContext, auth: tuple[str, str] | None = None
          ) -> tuple[int, bytes]:  # fmt: skip
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=ctx))  # fmt: skip
    try:
        with opener.open(request, timeout=10) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as e:
        return int(e.code), bytes(e.read())


# -- TLS and basic auth ------------------------------------------------------------------------


def test_unauthenticated_or_wrong_password_gets_401_probes_stay_open(
    secured: MetricsServer, pki: Pki
) -> None:
    base = f"https://{LOOPBACK}:{secured.port}"
    ctx = client_context(pki)
    assert fetch(f"{base}/metrics", ctx)[0] == 401
    assert fetch(f"{base}/metrics", ctx, (USER, "wrong"))[0] == 401
    assert fetch(f"{base}/metrics", ctx, ("nobody", PASSWORD))[0] == 401
    assert fetch(f"{base}/", ctx)[0] == 401
    status, body = fetch(f"{base}/metrics", ctx, (USER, PASSWORD))
    assert status == 200 and b'kafka_txn_exporter_up{kafka_cluster="e2e"} 1.0' in body
    # Kubernetes probes cannot send credentials: health endpoints never ask for them.
    assert fetch(f"{base}/healthz", ctx) == (200, b"ok\n")
    assert fetch(f"{base}/readyz", ctx) == (200, b"ready\n")


def test_a_client_without_certificate_or_plain_http_gets_nothing(secured: MetricsServer, pki: Pki) -> None:
    base = f"https://{LOOPBACK}:{secured.port}"
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        fetch(f"{base}/healthz", client_context(pki, with_cert=False))
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            f"http://{LOOPBACK}:{secured.port}/healthz", timeout=5).read()  # fmt: skip


@pytest.mark.timeout(120)
def test_real_prometheus_scrapes_over_tls_with_client_cert_and_basic_auth(
    tmp_path: Path, secured: MetricsServer, pki: Pki
) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    password_file = directory / "password"
    password_file.write_text(PASSWORD)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{
            "job_name": SCRAPE_JOB,
            "scheme": "https",
            "tls_config": {"ca_file": str(pki.ca), "cert_file": str(pki.client_cert),
                           "key_file": str(pki.client_key)},
            "basic_auth": {"username": USER, "password_file": str(password_file)},
            "static_configs": [{"targets": [f"{LOOPBACK}:{secured.port}"]}],
        }],
    }  # fmt: skip
    prometheus: Server = start_prometheus(directory, yaml.safe_dump(config), "groups: []\n",
                                          free_port())  # fmt: skip
    try:
        scraped = wait_until(
            lambda: query(prometheus, f'kafka_txn_exporter_up{{job="{SCRAPE_JOB}"}}') or None,
            timeout_s=60, what="a successful TLS + basic auth scrape",
            diagnostics=lambda: describe_json(prometheus.url + "/api/v1/targets")
            + "\n" + prometheus.process.describe())  # fmt: skip
        assert scraped[0]["metric"]["kafka_cluster"] == "e2e"
        (up,) = query(prometheus, f'up{{job="{SCRAPE_JOB}"}}')
        assert up["value"][1] == "1"
    finally:
        prometheus.process.stop()


# -- slow and idle clients -------------------------------------------------------------------


def _open_idle(port: int, count: int, *, half_sent: bool) -> list[socket.socket]:
    sockets = []
    for i in range(count):
        s = socket.create_connection((LOOPBACK, port), timeout=5)
        if half_sent and i % 2:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        sockets.append(s)
    return sockets


def _closed_by_server(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


@pytest.mark.timeout(120)
def test_idle_and_half_sent_connections_are_closed_and_hold_no_thread() -> None:
    with serving(WebSettings(), read_timeout_s=READ_TIMEOUT_S, workers=4) as server:
        url = f"http://{LOOPBACK}:{server.port}/metrics"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        assert opener.open(url, timeout=5).status == 200  # the pool has started a worker
        baseline = threading.active_count()
        started = time.monotonic()
        sockets = _open_idle(server.port, IDLE_CONNECTIONS, half_sent=True)
        try:
            peak = threading.active_count()
            # While they idle, a real scrape is still answered at once.
            assert opener.open(url, timeout=5).status == 200
            open_sockets = wait_until(
                lambda: None if any(not _closed_by_server(s) for s in sockets) else True,
                timeout_s=IDLE_CLOSE_BOUND_S,
                interval_s=0.2,
                what=f"the server to close {IDLE_CONNECTIONS} idle connections",
                diagnostics=lambda: f"timed out: {server.timed_out}, refused: {server.refused}",
            )
            assert open_sockets
            elapsed = time.monotonic() - started
        finally:
            for s in sockets:
                s.close()
        print(
            f"{IDLE_CONNECTIONS} idle connections closed after {elapsed:.1f} s "
            f"(read timeout {READ_TIMEOUT_S} s); threads: baseline {baseline}, peak {peak}"
        )
        assert server.timed_out >= IDLE_CONNECTIONS
        assert peak <= baseline + server.workers
        wait_until(
            lambda: True if threading.active_count() <= baseline else None,
            timeout_s=10,
            what="threads back to the baseline",
            diagnostics=lambda: str([t.name for t in threading.enumerate()]),
        )


# -- SIGHUP: the web config is reloaded with the rest (issue 39) ------------------------------


class _NoSpark(PipelineRunner):
    def begin_start(self) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _unverified() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def served_certificate(port: int) -> bytes:
    with socket.create_connection((LOOPBACK, port), timeout=10) as raw, _unverified().wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _users(password: str) -> dict[str, str]:
    return {USER: bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}


def test_after_sighup_a_revoked_password_gets_401_and_the_rotated_certificate_is_served(
    tmp_path: Path,
) -> None:
    old, new = make_pki(tmp_path / "old"), make_pki(tmp_path / "new")
    live = tmp_path / "live"  # the paths the web config names, rotated in place as a Secret is
    live.mkdir()
    cert, key = live / "tls.crt", live / "tls.key"
    cert.write_bytes(old.server_cert.read_bytes())
    key.write_bytes(old.server_key.read_bytes())
    web = tmp_path / "web.yml"
    tls = {"cert_file": str(cert), "key_file": str(key)}
    web.write_text(yaml.safe_dump({"tls_server_config": tls, "basic_auth_users": _users(PASSWORD)}))
    config_file = tmp_path / "config.yml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "a", "bootstrap_servers": "127.0.0.1:1", "interval": "1h"}],
                "web": {"listen_address": f"{LOOPBACK}:{free_port()}", "config_file": str(web)},
            }
        )
    )
    args = argparse.Namespace(
        config_file=str(config_file), listen_address=None, log_level=None, web_config_file=None
    )
    config = cli._load(args)
    daemon = Daemon(config, registry=registry(), pipeline=_NoSpark(config.spark, config.pipeline))
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    daemon.start()
    try:
        url = f"https://{LOOPBACK}:{daemon.port}/metrics"
        assert served_certificate(daemon.port) == ssl.PEM_cert_to_DER_cert(old.server_cert.read_text())
        assert fetch(url, _unverified(), (USER, PASSWORD))[0] == 200

        cert.write_bytes(new.server_cert.read_bytes())  # the certificate rotated
        key.write_bytes(new.server_key.read_bytes())
        web.write_text(yaml.safe_dump({"tls_server_config": tls, "basic_auth_users": _users("rotated-pw-1")}))
        signals = cli.SignalStop()
        os.kill(os.getpid(), signal.SIGHUP)
        assert signals.wait(poll_s=0.01) is False, "SIGHUP asks for a reload"
        cli._reload(args, daemon)

        assert served_certificate(daemon.port) == ssl.PEM_cert_to_DER_cert(new.server_cert.read_text())
        assert fetch(url, _unverified(), (USER, PASSWORD))[0] == 401, "the revoked password"
        assert fetch(url, _unverified(), (USER, "rotated-pw-1"))[0] == 200
        assert fetch(f"https://{LOOPBACK}:{daemon.port}/healthz", _unverified())[0] == 200
    finally:
        daemon.stop()
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_the_server_header_names_the_product_not_the_python_version() -> None:
    with serving(WebSettings()) as server:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{LOOPBACK}:{server.port}/healthz", timeout=5) as response:
            assert response.headers["Server"] == "kafka-txn-exporter"

"""Faults on the exporter's side (issue 13, faults 9-12): another cluster unreachable, a scrape
storm, an idle-socket flood, and signals. Bounded in count and time; no timed assertions."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from testbed.broker import KafkaCluster, free_port
from tests.faults.conftest import DaemonFactory
from tests.faults.support import cycles, http_get, samples, until

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.spark,
]

STORM_CLIENTS = 200
STORM_SECONDS = 10.0
IDLE_SOCKETS = 300


def cycles_of(registry: CollectorRegistry, cluster: str) -> float:
    """Cycles of one cluster (by its name, whatever the cluster label is called)."""
    return sum(v for lab, v in samples(registry, "kafka_txn_exporter_cycles_total")
               if cluster in lab.values())  # fmt: skip


# -- 9. two clusters, one unreachable ----------------------------------------------------------


def test_unreachable_cluster_does_not_stall_the_other(
    kafka: KafkaCluster, fault_daemon: DaemonFactory
) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    daemon = fault_daemon(clusters=[
        {"name": "alive", "bootstrap_servers": kafka.bootstrap_servers, "interval": "5s"},
        {"name": "dead", "bootstrap_servers": dead, "interval": "5s"},
    ])  # fmt: skip
    daemon.start()
    try:
        # The dead cluster's cycles fail for a whole request timeout each; the live one keeps
        # completing cycles meanwhile (counted, not timed: 5 of them within a bound).
        kept_cadence = until(
            lambda: cycles_of(daemon.registry, "alive") >= 5 and cycles_of(daemon.registry, "dead") >= 2,
            bound_s=180,
        )
        alive_complete = sum(
            v
            for lab, v in samples(daemon.registry, "kafka_txn_exporter_cycles_total", result="complete")
            if "alive" in lab.values()
        )
        dead_up = [
            v for lab, v in samples(daemon.registry, "kafka_txn_exporter_up") if "dead" in lab.values()
        ]
    finally:
        daemon.stop()

    assert kept_cadence
    assert alive_complete >= 5
    assert dead_up == [0]


# -- 10. scrape storm during cycles -----------------------------------------------------------


def test_scrape_storm_is_served_and_cycles_go_on(
    kafka: KafkaCluster, topic: str, fault_daemon: DaemonFactory
) -> None:
    daemon = fault_daemon(kafka.bootstrap_servers, topics=[topic], clusters=None)
    daemon.start()
    url = f"http://127.0.0.1:{daemon.port}/metrics"
    try:
        assert until(lambda: cycles(daemon.registry, "complete") >= 1, bound_s=180)
        before = cycles(daemon.registry, "complete")
        statuses: list[int] = []
        failures: list[str] = []
        lock = threading.Lock()
        stop_at = time.monotonic() + STORM_SECONDS

        def scraper() -> None:
            while time.monotonic() < stop_at:
                try:
                    status, _ = http_get(url, timeout_s=60)
                except (OSError, urllib.error.URLError) as exc:
                    with lock:
                        failures.append(repr(exc))
                    continue
                with lock:
                    statuses.append(status)

        threads = [threading.Thread(target=scraper, daemon=True) for _ in range(STORM_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=STORM_SECONDS + 120)
        went_on = until(lambda: cycles(daemon.registry, "complete") > before, bound_s=120)
        print(
            f"scrape storm: {len(statuses)} scrapes by {STORM_CLIENTS} clients in "
            f"{STORM_SECONDS:.0f} s, {len(failures)} failed"
        )
    finally:
        daemon.stop()

    assert not any(t.is_alive() for t in threads)
    assert statuses and set(statuses) == {200}
    assert failures == []
    assert went_on


# -- 11. idle-socket flood on /metrics --------------------------------------------------------


def test_idle_socket_flood_does_not_block_scrapes(
    kafka: KafkaCluster, topic: str, fault_daemon: DaemonFactory
) -> None:
    daemon = fault_daemon(kafka.bootstrap_servers, topics=[topic])
    daemon.start()
    idle: list[socket.socket] = []
    try:
        for _ in range(IDLE_SOCKETS):
            sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finishes its request
            idle.append(sock)
        status, body = http_get(f"http://127.0.0.1:{daemon.port}/metrics", timeout_s=60)
        health, _ = http_get(f"http://127.0.0.1:{daemon.port}/healthz", timeout_s=60)
    finally:
        for sock in idle:
            sock.close()
        daemon.stop()

    assert status == 200 and "kafka_txn_exporter_build_info" in body
    assert health == 200


# -- 12. signals: SIGHUP, SIGTERM during a cycle, SIGTERM during Spark start -----------------


def _exporter(tmp_path: Path, kafka: KafkaCluster, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    config = tmp_path / "config.yml"
    config.write_text(f"""
web: {{listen_address: "127.0.0.1:{port}"}}
spark: {{local_dir: "{tmp_path / "spark"}"}}
clusters:
  - name: signals
    bootstrap_servers: "{kafka.bootstrap_servers}"
    interval: 5s
    request_timeout: 2s
""")
    # The console script's two lines, and an exit hook that leaves a mark if the interpreter's
    # finalization runs (see _assert_ended_cleanly).
    hook = f"import atexit, pathlib; atexit.register(pathlib.Path({str(_finalized(tmp_path))!r}).touch)"
    entry = f"{hook}; import sys; from exporter.cli import main; sys.exit(main())"
    log_path = tmp_path / "daemon.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", entry, "run", "--config.file", str(config)],
                                stdout=log_file, stderr=subprocess.STDOUT)  # fmt: skip
    return proc, log_path


def _finalized(tmp_path: Path) -> Path:
    return tmp_path / "interpreter-finalized"


def _assert_ended_cleanly(code: int, tmp_path: Path, log_path: Path) -> None:
    """Exit 0 after the daemon's last log line, and without the interpreter's finalization:
    a native thread calling into Python while it finalized aborted the process with SIGABRT
    (exit -6) after a clean stop, once in a CI run."""
    log = log_path.read_text()
    assert code == 0, log[-3000:]
    assert "exporter stopped" in log
    assert not _finalized(tmp_path).exists(), "the interpreter's finalization ran"


def _ready(port: int) -> bool:
    try:
        return http_get(f"http://127.0.0.1:{port}/readyz", timeout_s=10)[0] == 200
    except (OSError, urllib.error.URLError):
        return False


def _metrics(port: int) -> str:
    return http_get(f"http://127.0.0.1:{port}/metrics", timeout_s=30)[1]


def test_sighup_keeps_the_daemon_serving_and_sigterm_mid_cycle_exits_cleanly(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    port = free_port()
    proc, log_path = _exporter(tmp_path, kafka, port)
    try:
        assert until(lambda: _ready(port) or proc.poll() is not None, bound_s=180)
        assert until(lambda: 'result="complete"' in _metrics(port), bound_s=120)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        alive_after_hup = proc.poll() is None
        serving_after_hup = alive_after_hup and _ready(port)
        proc.send_signal(signal.SIGTERM)  # a cycle takes seconds every 5 s: likely mid-cycle
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert alive_after_hup, log_path.read_text()[-3000:]
    assert serving_after_hup
    _assert_ended_cleanly(code, tmp_path, log_path)


def test_sigterm_during_spark_start_exits_cleanly(kafka: KafkaCluster, tmp_path: Path) -> None:
    port = free_port()
    proc, log_path = _exporter(tmp_path, kafka, port)
    try:
        # As soon as /healthz answers, Spark is still starting in the background.
        assert until(lambda: proc.poll() is not None or _healthz_answers(port), bound_s=120,
                     poll_s=0.1)  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _assert_ended_cleanly(code, tmp_path, log_path)


def _healthz_answers(port: int) -> bool:
    try:
        http_get(f"http://127.0.0.1:{port}/healthz", timeout_s=5)
    except urllib.error.HTTPError:
        return True  # 503 is an answer
    except (OSError, urllib.error.URLError):
        return False
    return True

"""The command-line daemon starts cleanly every time, and says so when its engine cannot start.

* No thread but the main one imports a module for the first time, from start through a
  complete cycle, scrapes and SIGTERM: what the threads import is imported before they start
  (``exporter/daemon/preload.py``), so two threads never import at once and CPython's import
  deadlock (``_DeadlockError ... _ModuleLock('importlib.resources')``, one start in five)
  cannot happen. Checked with an audit hook (``tests.integration.audited_daemon``).
* Twenty starts to the first ``/healthz`` and SIGTERM, each exiting 0 with no unexpected
  error.
* A Spark that cannot start (its local directory not usable) is logged once per attempt, in
  one line saying why, and ``/healthz`` answers 503 with that reason after
  ``spark.unhealthy_after_failed_starts`` attempts.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from testbed.broker import KafkaCluster, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
#: Bounds of the waits (a shared, loaded 2-core machine: generous, never a speed check).
HEALTHZ_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
STARTS = 20
#: What a start must never log: the command line's exit-4 message, the import deadlock, an
#: error of the exporter's own. (kafka-python may log a traceback of its own I/O thread when
#: its client is closed under a read at stop: the library's, not the start's.)
UNEXPECTED = re.compile(r"unexpected error|_DeadlockError|deadlock detected| ERROR exporter[.:]")


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def write_config(path: Path, port: int, bootstrap: str, **spark: Any) -> Path:
    path.write_text(
        json.dumps(
            {
                "web": {"listen_address": f"127.0.0.1:{port}"},
                "log": {"level": "info"},
                "spark": {"local_dir": str(path.parent / "spark"), **spark},
                "clusters": [
                    {
                        "name": "start",
                        "bootstrap_servers": bootstrap,
                        "interval": "3s",
                        "request_timeout": "2s",
                    }
                ],
            }
        )
    )
    return path


@contextmanager
def daemon(command: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The daemon as a process of its own; killed if the test leaves it running."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)


def wait_for(url: str, status: int, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        got, body = http_get(url)
        if got == status:
            return body
        assert proc.poll() is None, f"the daemon exited with {proc.returncode}:\n{tail(log_path)}"
        assert time.monotonic() < deadline, f"no {status} from {url} in {timeout_s:.0f} s:\n{tail(log_path)}"
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=STOP_TIMEOUT_S) == 0, tail(log_path)


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:]


def test_no_thread_imports_a_module_for_the_first_time(kafka: KafkaCluster, tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "config.yml", port, kafka.bootstrap_servers)
    audit = tmp_path / "imports.tsv"
    log_path = tmp_path / "daemon.log"
    command = [sys.executable, "-m", "tests.integration.audited_daemon", str(audit)]
    with daemon([*command, "run", "--config.file", str(config)], log_path) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_for(f"{base}/readyz", 200, proc, log_path, READY_TIMEOUT_S)
        # The scrapes Prometheus makes (gzip, OpenMetrics) and a probe, served by the workers.
        for headers in ({}, {"Accept-Encoding": "gzip", "Accept": "application/openmetrics-text"}):
            assert http_get(f"{base}/metrics", headers)[0] == 200
        assert http_get(f"{base}/healthz")[0] == 200
        stop(proc, log_path)
    lines = [line.split("\t", 1) for line in audit.read_text().splitlines()]
    loaded = {name for who, name in lines if who == "loaded"}
    assert loaded, "the daemon did not end through end_process"
    first_imports = sorted({f"{who}: {name}" for who, name in lines if who != "loaded" and name in loaded})
    assert first_imports == [], "add these to exporter/daemon/preload.py"


def test_twenty_starts_reach_healthz_and_stop_on_sigterm_without_an_unexpected_error(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    exe = Path(sys.executable).with_name("kafka-txn-exporter")
    for start in range(STARTS):
        port = free_port()
        work = tmp_path / f"start-{start}"
        work.mkdir()
        config = write_config(work / "config.yml", port, kafka.bootstrap_servers)
        log_path = work / "daemon.log"
        with daemon([str(exe), "run", "--config.file", str(config)], log_path) as proc:
            wait_for(f"http://127.0.0.1:{port}/healthz", 200, proc, log_path, HEALTHZ_TIMEOUT_S)
            stop(proc, log_path)
        text = log_path.read_text(errors="replace")
        assert not UNEXPECTED.search(text), f"start {start + 1} of {STARTS}:\n{tail(log_path)}"
        assert "exporter stopped" in text


def test_a_spark_that_cannot_start_is_logged_per_attempt_and_fails_healthz(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    """The local directory under a regular file: no user can create it (the tests may run as
    root, for whom a directory's permissions are no obstacle)."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    port = free_port()
    config = write_config(
        tmp_path / "config.yml",
        port,
        kafka.bootstrap_servers,
        local_dir=str(blocker / "spark"),
        unhealthy_after_failed_starts=2,
    )
    log_path = tmp_path / "daemon.log"
    exe = Path(sys.executable).with_name("kafka-txn-exporter")
    with daemon([str(exe), "run", "--config.file", str(config)], log_path) as proc:
        body = wait_for(f"http://127.0.0.1:{port}/healthz", 503, proc, log_path, HEALTHZ_TIMEOUT_S)
        stop(proc, log_path)
    reason = "no usable Spark local directory (spark.local_dir) for uid "
    why = body.decode()
    assert why.startswith("Spark did not start: 2 attempt(s) in a row failed; last: starting Spark failed: ")
    assert reason in why and f"{blocker / 'spark'}: Not a directory" in why
    lines = log_path.read_text().splitlines()
    attempts = [line for line in lines if " ERROR exporter.daemon.pipeline: starting Spark failed: " in line]
    assert len(attempts) >= 2
    for line in attempts:  # "...: why; next attempt in N s", all in one line
        assert reason in line and re.search(r"; next attempt in \d+ s$", line), line
    # Nothing between the attempts but the daemon's own log lines: no stack trace.
    assert all(re.match(r"^\d{4}-\d\d-\d\d ", line) for line in lines), tail(log_path)

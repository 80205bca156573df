"""The CLI as a process: Ctrl-C ends a command waiting on a broker with exit 130, errors are
JSON with --output json, a taken listen port is one clear line with exit 2. No Kafka: a
socket on 127.0.0.1 that accepts and never answers stands in for a hung broker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ENTRY = [sys.executable, "-m", "exporter.cli"]
REPO = Path(__file__).resolve().parents[2]


def run_cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRY, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.fixture
def silent_broker() -> Iterator[socket.socket]:
    """Accepts connections and never answers: every request waits for its timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server
    server.close()


def test_ctrl_c_during_list_exits_130_at_once(silent_broker: socket.socket) -> None:
    port = silent_broker.getsockname()[1]
    proc = subprocess.Popen(
        [
            *ENTRY,
            "list",
            "--bootstrap-server",
            f"127.0.0.1:{port}",
            "--request-timeout",
            "60s",
            "--output",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        silent_broker.settimeout(60)
        connection, _ = silent_broker.accept()  # the command is now waiting on the broker
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - sent
        connection.close()
    finally:
        proc.kill()
    print(f"exit {proc.returncode} {elapsed:.2f} s after SIGINT")
    assert proc.returncode == 130, err
    assert json.loads(out) == {"error": "list: interrupted", "exit_code": 130}
    assert "Traceback" not in err


def test_kafka_error_with_json_output_is_a_json_document_with_the_exit_code() -> None:
    result = run_cli(
        "describe",
        "--bootstrap-server",
        "127.0.0.1:1",
        "--transactional-id",
        "x",
        "--request-timeout",
        "1s",
        "--output",
        "json",
    )
    assert result.returncode == 3, result.stderr
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 3 and doc["error"].startswith("describe: ")
    assert "127.0.0.1:1" in doc["error"]


def test_usage_and_config_errors_with_json_output(tmp_path: Path) -> None:
    result = run_cli("list", "--bootstrap-server", "h:1", "--request-timeout", "soon", "--output", "json")
    assert result.returncode == 2
    assert json.loads(result.stdout.splitlines()[0])["exit_code"] == 2
    assert "--request-timeout" in result.stderr
    bad = tmp_path / "c.yml"
    bad.write_text("clusters: [{name: c, bootstrap_servers: 'h:1', colour: red}]\n")
    result = run_cli("list", "--config.file", str(bad), "--output", "json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 2 and "clusters[0].colour: unknown key" in doc["error"]


def test_listen_port_in_use_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    config = tmp_path / "c.yml"
    config.write_text("clusters: [{name: c, bootstrap_servers: '127.0.0.1:1'}]\n")
    try:
        result = run_cli("run", "--config.file", str(config), "--web.listen-address", f"127.0.0.1:{port}")
    finally:
        taken.close()
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "kafka-txn-exporter:" in line]
    assert lines == [
        f"kafka-txn-exporter: cannot listen on 127.0.0.1:{port} (web.listen_address): Address already in use"
    ]
    assert "Traceback" not in result.stderr


def test_argparse_errors_with_json_output_are_json_too() -> None:
    result = run_cli("list", "--bootstrap-server", "h:1", "--state", "Running", "--output", "json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 2 and "--state" in doc["error"]
    assert "usage: kafka-txn-exporter list" in result.stderr


def test_an_ipv6_bootstrap_server_is_accepted_and_an_unreachable_one_is_one_line() -> None:
    result = run_cli("list", "--bootstrap-server", "[::1]:1", "--request-timeout", "1s")
    assert result.returncode == 3
    assert result.stderr.splitlines() == ["list: metadata from [::1]:1 failed: BROKER_NOT_AVAILABLE"]

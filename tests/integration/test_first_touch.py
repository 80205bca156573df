"""What a new user sees first, against a real broker with a genuinely hanging transaction:

* the daemon's log at the default level holds only our own lines, one per state change
  (no APScheduler, kafka-python, py4j, JVM or Spark banner lines; skipped runs said once);
* the CLI's stderr likewise, and ``--log.level debug`` shows the libraries' and the Spark
  driver's lines;
* ``find-hanging --exporter`` answers from the daemon's last cycle with the same findings as
  ``find-hanging --fresh``; ``GET /api/v1/findings`` is the documented document;
* a cold ``find-hanging`` and ``report`` show their progress on a terminal, and nothing when
  stderr is not one.

The daemon and the CLI run as the user runs them: separate processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from testbed.broker import KafkaCluster, free_port
from testbed.maven import KafkaDistribution
from testbed.oracles import ToolError, TransactionsCommand
from testbed.scenarios import HangingTransaction, create_hanging_transaction

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "findings.schema.json").read_text())
#: A line of our own on the daemon's log (the text format of exporter/logs.py).
OUR_LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) exporter(\.\w+)*: "
)
#: What the libraries and the JVM used to print at the default level.
THEIR_LINES = (
    "apscheduler",
    "maximum number of running instances",
    "blocking the event loop",
    "py4j",
    "Using incubator modules",
    "Setting default log level",
    "sc.setLogLevel",
)
EXPORTER = [sys.executable, "-m", "exporter.cli"]
WAIT_S = 600.0


@dataclass(frozen=True)
class RunningExporter:
    url: str
    log: Path
    bootstrap: str
    topic: str
    hanging: HangingTransaction


def _findings(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/api/v1/findings", timeout=10) as response:
        document: dict[str, Any] = json.loads(response.read())
    return document


def _confirmed(url: str, hanging: HangingTransaction) -> bool:
    try:
        clusters = _findings(url)["clusters"]
    except OSError:
        return False
    return any(
        f["class"] == "hanging" and f["topic"] == hanging.topic and f["start_offset"] == hanging.start_offset
        for f in clusters[0]["findings"]
    )


@pytest.fixture(scope="module")
def exporter(
    kafka: KafkaCluster, kafka_dist: KafkaDistribution, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningExporter]:
    """``kafka-txn-exporter run`` at the default log level, a 3 s interval (shorter than the
    first cycle, which waits for Spark: APScheduler skips runs), until it has confirmed a
    hanging transaction on a topic of its own."""
    work = tmp_path_factory.mktemp("first-touch")
    topic = kafka.create_topic(f"first-touch-{uuid.uuid4().hex[:8]}", partitions=2)
    hanging = create_hanging_transaction(kafka, topic, partition=1, backdate_ms=30 * 60_000)
    port = free_port()
    config = work / "config.yml"
    config.write_text(
        json.dumps(
            {
                "web": {"listen_address": f"127.0.0.1:{port}"},
                "spark": {"local_dir": str(work / "spark")},
                "clusters": [
                    {
                        "name": "first",
                        "bootstrap_servers": kafka.bootstrap_servers,
                        "interval": "3s",
                        "request_timeout": "2s",
                    }
                ],
            }
        )
    )
    log = work / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [*EXPORTER, "run", "--config.file", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while not _confirmed(url, hanging):
            assert daemon.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        yield RunningExporter(url, log, kafka.bootstrap_servers, topic, hanging)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        with contextlib.suppress(ToolError):
            TransactionsCommand(kafka_dist, kafka.bootstrap_servers).abort(
                hanging.topic, hanging.partition, hanging.start_offset
            )


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXPORTER, *argv],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=WAIT_S,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _no_engine() -> dict[str, str]:
    """No warm engine or exporter to find: the CLI computes with a Spark of its own."""
    return {"KAFKA_TXN_EXPORTER_SPARK_CONNECT_PORT": "0", "KAFKA_TXN_EXPORTER_URL": ""}


def _keys(records: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {
        (
            r["topic"],
            r["partition"],
            r["producer_id"],
            r["producer_epoch"],
            r["start_offset"],
            r["class"],
            r["reason"],
        )
        for r in records
    }


def test_the_daemons_default_log_holds_only_our_own_lines_one_per_state_change(
    exporter: RunningExporter,
) -> None:
    lines = [line for line in exporter.log.read_text().splitlines() if line.strip()]
    foreign = [line for line in lines if not OUR_LOG_LINE.match(line)]
    assert not foreign, "\n".join(foreign)
    for theirs in THEIR_LINES:
        assert not [line for line in lines if theirs in line], theirs
    assert sum("starting Spark session" in line for line in lines) == 1
    assert sum("Spark session ready in" in line for line in lines) == 1
    cycles = [line for line in lines if "exporter.daemon.cycle: cycle for cluster first:" in line]
    # Every line about skipped runs is the end of a cycle: one per streak, never one per run.
    assert all(line in cycles for line in lines if "skipped" in line)
    assert "scheduled run(s) skipped" in cycles[0]  # the first cycle waited for Spark


def test_find_hanging_from_the_exporter_answers_what_fresh_finds_and_the_clis_stderr_is_ours(
    exporter: RunningExporter,
) -> None:
    scope = [
        "--bootstrap-server",
        exporter.bootstrap,
        "--topic",
        exporter.topic,
        "--max-transaction-timeout",
        "0",
    ]
    fresh = _cli("find-hanging", *scope, "--fresh", "--output", "json", env=_no_engine())
    assert fresh.returncode == 1, fresh.stderr
    answered = _cli("find-hanging", *scope, "--exporter", exporter.url, "--output", "json")
    assert answered.returncode == 1, answered.stderr

    fresh_doc, answer_doc = json.loads(fresh.stdout), json.loads(answered.stdout)
    assert _keys(answer_doc["hanging"]) == _keys(fresh_doc["hanging"]) != set()
    assert (exporter.hanging.producer_id, exporter.hanging.start_offset) in {
        (r["producer_id"], r["start_offset"]) for r in answer_doc["hanging"]
    }
    assert answer_doc["source"]["exporter"] == exporter.url and answer_doc["source"]["age_s"] >= 0
    assert fresh_doc["source"]["exporter"] is None
    assert f"the answer of the exporter at {exporter.url} (cluster first)" in answered.stderr

    # A cold local Spark started, and its stderr holds our messages only: no banner, no
    # progress line (stderr is a pipe here).
    for stderr in (fresh.stderr, answered.stderr):
        for line in stderr.splitlines():
            assert line.startswith("find-hanging: ") or OUR_LOG_LINE.match(line), line
        assert "\r" not in stderr

    document = _findings(exporter.url)
    jsonschema.validate(document, SCHEMA)


def test_list_from_the_exporter_is_the_coordinators_listing_of_its_last_cycle(
    exporter: RunningExporter,
) -> None:
    answered = _cli(
        "list", "--bootstrap-server", exporter.bootstrap, "--exporter", exporter.url, "--output", "json"
    )
    assert answered.returncode == 0, answered.stderr
    listed = {t["transactional_id"] for t in json.loads(answered.stdout)["transactions"]}
    assert exporter.hanging.transactional_id in listed


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (exit code, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*EXPORTER, *argv],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the last writer closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=WAIT_S)
    reader.join(30)
    os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def test_a_cold_find_hanging_shows_its_progress_on_a_terminal_and_debug_shows_the_drivers_lines(
    exporter: RunningExporter,
) -> None:
    code, out, terminal = _on_a_terminal(
        [
            "find-hanging",
            "--bootstrap-server",
            exporter.bootstrap,
            "--topic",
            exporter.topic,
            "--max-transaction-timeout",
            "0",
            "--fresh",
            "--log.level",
            "debug",
        ],
        _no_engine(),
    )
    assert code == 1, terminal[-3000:]
    assert "\r\x1b[Kfind-hanging: classifying (" in terminal
    assert re.search(r"find-hanging: (starting Spark|collecting from Kafka) \(\d+ s\)", terminal)
    assert exporter.topic in out and "\x1b" not in out  # the answer itself is clean
    # --log.level debug: the Spark driver's start-up banner, through our logger.
    assert "DEBUG exporter.pipeline.jvm: WARNING: Using incubator modules" in terminal


def test_report_shows_its_progress_on_a_terminal_and_nothing_in_a_pipe(tmp_path: Path) -> None:
    (tmp_path / "cycles").mkdir()  # a history with nothing in the window yet
    argv = ["report", "--history", str(tmp_path), "--since", "1h"]
    code, _, terminal = _on_a_terminal(argv, {})
    assert code == 0, terminal[-3000:]
    assert "\r\x1b[Kreport: starting Spark (" in terminal
    assert "no history in that window" in terminal
    piped = _cli(*argv)
    assert piped.returncode == 0 and "report:" not in piped.stderr and "\r" not in piped.stderr

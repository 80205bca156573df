"""The pipeline on Spark Connect gives exactly what it gives on the embedded local session,
and the daemon in thin mode (``spark.connect_url``: no JVM of its own) publishes on /metrics
what the embedded daemon publishes on the same broker.

A real Spark Connect server (the one in the pyspark wheel, ``SparkConnectServer`` through
``spark-submit``) runs on loopback as a subprocess of the test; the Connect client runs in a
separate Python process (:mod:`tests.integration.spark_connect_cycles`), since a Connect
client and the test process's classic session do not mix in one process. Both compute the
same cycles (the warm-up snapshot and a two-cycle snapshot with every class), and the
results must be equal field by field.

The daemon test runs the thin daemon as a command-line process (a Connect client) against
the single-node test-bed broker, and the embedded daemon in the test process on the test's
classic session; both see the same transactional state (a hanging transaction, an open one
with records behind it, committed and aborted ones).

Needs the ``connect`` extra (``pyspark[connect]``: grpcio, pandas, ...) and a JDK.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from exporter.model import CycleResult, TxnClass
from exporter.pipeline.compute import compute
from exporter.pipeline.rounds import compute_round
from testbed.broker import KafkaCluster
from testbed.scenarios import OpenTransaction, produce_plain, run_transaction
from tests.fixtures_kafka import HangingFactory
from tests.integration.spark_connect_cycles import CYCLES, RICH_GROUPS, comparable, run_cycles, run_rounds
from tests.spark_connect_server import (
    STOP_TIMEOUT_S,
    client_document,
    connect_server,
    log_tail,
    start_client_process,
)
from tests.unit.test_pipeline import candidates

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CLIENT_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 (local[2], 512m driver, no UI) for this module."""
    with connect_server(tmp_path_factory.mktemp("spark-connect")) as url:
        yield url


def start_connect_client(url: str) -> subprocess.Popen[str]:
    """The cycles of :data:`CYCLES` on Spark Connect, in a fresh Python process."""
    return start_client_process("tests.integration.spark_connect_cycles", url)


def connect_client_output(client: subprocess.Popen[str]) -> dict[str, Any]:
    """The client's JSON document; fails (and ends the client) after CLIENT_TIMEOUT_S."""
    return client_document(client, CLIENT_TIMEOUT_S, "Connect client")


def assert_meaningful(results: list[CycleResult]) -> None:
    """The cycles exercise what they claim to (on the local session, the reference)."""
    warmup, rich1, rich2 = results
    assert dict(warmup.open_transactions_by_class)[TxnClass.HANGING] == 1
    classes1 = dict(rich1.open_transactions_by_class)
    assert classes1[TxnClass.SUSPECTED_HANGING] == 1
    assert classes1[TxnClass.LATE] == 1
    assert classes1[TxnClass.TWO_PHASE_COMMIT] == 1
    assert classes1[TxnClass.UNKNOWN] == 1
    assert classes1[TxnClass.ONGOING] == 1
    assert candidates(rich1) == ((("t", 0, 100, 100), 1),)
    assert rich1.timeout_aborts == ()
    assert any(p.lso_lag is None for p in rich1.partitions)
    assert max(p.lso_lag or 0 for p in rich1.partitions) == 400
    classes2 = dict(rich2.open_transactions_by_class)
    assert classes2[TxnClass.HANGING] == 1
    assert candidates(rich2) == ((("t", 0, 100, 100), 2),)
    assert [(a.transactional_id, a.old_epoch, a.new_epoch) for a in rich2.timeout_aborts] == [("slow", 5, 6)]
    assert any(c.two_phase_commit_open_time_max_ms > 0 for c in rich1.coordinators)
    # The consumer-group family: lags, a pending commit, then a group blocked by pid 100.
    assert rich1.groups is not None and rich2.groups is not None
    assert {(g.group, g.unstable_offset_commits) for g in rich1.groups.groups} == {
        ("reader-rc", 1),
        ("reader-ru", 0),
        ("idle", 0),
    }
    assert rich1.groups.blocked == ()
    assert [(b.group, b.partition, b.producer_id) for b in rich2.groups.blocked] == [("reader-rc", 0, 100)]
    assert len(rich1.groups.partition_lags) == 3


class ConnectClient:
    """The Connect client process of :mod:`tests.integration.spark_connect_cycles`, started
    once for the module (it runs its cycles meanwhile); its document read once."""

    def __init__(self, url: str) -> None:
        self._process = start_connect_client(url)
        self._document: dict[str, Any] | None = None

    def document(self) -> dict[str, Any]:
        if self._document is None:
            self._document = connect_client_output(self._process)
        return self._document

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture(scope="module")
def connect_client(connect_url: str) -> Iterator[ConnectClient]:
    client = ConnectClient(connect_url)
    try:
        yield client
    finally:
        client.stop()


def test_pipeline_on_spark_connect_equals_local(spark: SparkSession, connect_client: ConnectClient) -> None:
    # The Connect client works in its own process meanwhile: both finish sooner.
    local = run_cycles(
        lambda snap, settings, previous, now_ms: compute(
            spark, snap, settings, previous.memory if previous else None, now_ms, groups=RICH_GROUPS
        )
    )
    assert_meaningful(local)
    remote = connect_client.document()
    assert remote["session"] == "pyspark.sql.connect.session.SparkSession"
    assert remote["jvm_in_client"] is False
    assert len(remote["results"]) == len(CYCLES)
    for (name, *_), expected, got in zip(CYCLES, local, remote["results"], strict=True):
        want = comparable(expected)
        assert set(got) == set(want), name
        for field in dataclasses.fields(CycleResult):
            assert got[field.name] == want[field.name], f"cycle {name}: field {field.name}"


def test_a_fleet_round_on_spark_connect_equals_the_embedded_round(
    spark: SparkSession, connect_client: ConnectClient
) -> None:
    """Three differently configured clusters in one plan, two rounds with memory carried
    (one cluster not ready for the second): the Connect server's round gives what the
    embedded session's round gives, cluster by cluster and field by field."""
    local = run_rounds(lambda runs: compute_round(spark, runs))
    assert [sorted(r) for r in local] == [["east", "plain", "west"], ["east", "west"]]
    assert local[1]["east"].groups is not None and local[1]["east"].groups.blocked
    assert local[1]["west"].findings and local[0]["plain"].findings
    remote = connect_client.document()["rounds"]
    assert [sorted(r) for r in remote] == [sorted(r) for r in local]
    for number, (expected, got) in enumerate(zip(local, remote, strict=True), start=1):
        for cluster, result in expected.items():
            want = comparable(result)
            for field in dataclasses.fields(CycleResult):
                assert got[cluster][field.name] == want[field.name], (
                    f"round {number}, {cluster}: {field.name}"
                )


# --- the daemon in thin mode ------------------------------------------------------------------

#: Exporter-internal series (timings, counters of cycles) differ between two runs by nature.
_OWN_PREFIX = "kafka_txn_exporter_"
#: Series whose value is a time that moves between the two daemons' cycles: labels compared.
_TIME_VALUED = ("_seconds", "_timestamp_ms", "_age")


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(_OWN_PREFIX) or not sample.name.startswith("kafka_txn_"):
                continue
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _comparable_series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float | None]:
    return {
        key: (None if any(part in key[0] for part in _TIME_VALUED) else v) for key, v in _series(text).items()
    }


def _java_children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and (entry / "comm").read_text().strip() == "java":
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


@pytest.mark.kafka
def test_thin_daemon_on_spark_connect_publishes_what_the_embedded_daemon_publishes(
    spark: SparkSession,
    connect_url: str,
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    tmp_path: Path,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.config import parse_config
    from exporter.daemon import Daemon, PipelineRunner
    from testbed.broker import free_port

    bootstrap = kafka.bootstrap_servers
    run_transaction(bootstrap, topic, partition=0, commit=True)
    run_transaction(bootstrap, topic, partition=0, commit=False)
    hanging(topic, partition=1, backdate_ms=30 * 60 * 1000)
    with OpenTransaction(bootstrap, topic, partition=2, transaction_timeout_ms=600_000) as legit:
        legit.begin(records=2)
        produce_plain(bootstrap, topic, partition=2, records=5)
        common = {
            "pipeline": {"hanging_confirm_cycles": 1, "lso_lag_series": "all"},
            "clusters": [
                {
                    "name": "parity",
                    "bootstrap_servers": bootstrap,
                    "interval": "3s",
                    "request_timeout": "2s",
                    "topics": {"allow": [topic]},
                }
            ],
        }

        # Thin: the command-line daemon, a Connect client; it must start no JVM.
        port = free_port()
        config_path = tmp_path / "thin.yml"
        config_path.write_text(
            json.dumps(
                {
                    **common,
                    "web": {"listen_address": f"127.0.0.1:{port}"},
                    "spark": {"connect_url": connect_url},
                }
            )
        )
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE", "PYSPARK_SUBMIT_ARGS")
        }
        env["PYTHONPATH"] = str(REPO)
        log_path = tmp_path / "thin.log"
        with log_path.open("w") as log:
            thin = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from exporter.cli import main; sys.exit(main())",
                    "run",
                    "--config.file",
                    str(config_path),
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while _get(f"http://127.0.0.1:{port}/readyz")[0] != 200:
                assert thin.poll() is None, log_tail(log_path)
                assert time.monotonic() < deadline, log_tail(log_path)
                time.sleep(0.5)
            status, thin_text = _get(f"http://127.0.0.1:{port}/metrics")
            assert status == 200
            assert _java_children(thin.pid) == [], "thin mode must not start a JVM"
        finally:
            thin.send_signal(signal.SIGTERM)
            try:
                thin.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                thin.kill()
                thin.wait()

        # Embedded: the same config on the test's classic session, one cycle.
        config = parse_config({**common, "web": {"listen_address": "127.0.0.1:0"}}, env={})
        embedded = Daemon(
            config,
            registry=CollectorRegistry(),
            pipeline=PipelineRunner(config.spark, config.pipeline, session=spark),
        )
        try:
            embedded.jobs[0].run_cycle()
            embedded_text = generate_latest(embedded.registry).decode()
        finally:
            embedded.stop()

    thin_series = _comparable_series(thin_text)
    embedded_series = _comparable_series(embedded_text)
    assert any(name == "kafka_txn_hanging_transaction_info" for name, _ in embedded_series)
    assert thin_series == embedded_series


@pytest.mark.kafka
def test_the_cli_classifies_on_a_reachable_connect_engine_and_starts_no_spark_of_its_own(
    connect_url: str, kafka: KafkaCluster, topic: str, hanging: HangingFactory
) -> None:
    """``find-hanging`` with ``SPARK_REMOTE`` set: the engine is looked for while Kafka is
    read, and the answer comes from the Connect server. The command runs without java on its
    PATH, so a fallback to a local session could not have answered."""
    stuck = hanging(topic, partition=1, backdate_ms=30 * 60 * 1000)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SPARK_CONNECT_MODE", "PYSPARK_SUBMIT_ARGS", "JAVA_HOME", "PATH")
    }
    env.update(SPARK_REMOTE=connect_url, PATH=str(Path(sys.executable).parent), PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from exporter.cli import main; sys.exit(main())",
         "find-hanging", "--bootstrap-server", kafka.bootstrap_servers, "--topic", topic,
         "--output", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    found = json.loads(done.stdout)["hanging"]
    assert [(f["partition"], f["producer_id"], f["start_offset"]) for f in found] == [
        (1, stuck.producer_id, stuck.start_offset)
    ]

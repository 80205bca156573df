"""Consumers that commit their last record + 1 page when a hanging transaction blocks them
(issue 41), seen from a real Prometheus evaluating the generated rules.

A committed transaction (records 0-2, its commit marker at 3), then a hanging transaction at
4: a read_committed confluent-kafka consumer committing the last record's offset + 1, and
Kafka's Java KafkaConsumer calling ``commitSync`` with ``record.offset() + 1`` as Spring does,
both commit 3, the marker's offset, below the LSO. The daemon runs on its schedule;
``KafkaConsumerGroupBlockedByTransaction`` must fire for both groups, its description naming
the hanging transaction.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from alerts.rules import Thresholds, thresholds_from_mapping
from exporter.config import parse_config
from exporter.daemon import Daemon, PipelineRunner
from testbed.broker import KafkaCluster, free_port
from testbed.jvmclients import commit_last_plus_one, prepare
from testbed.oracles import TransactionsCommand
from testbed.scenarios import (
    HangingTransaction,
    commit_last_plus_one_confluent,
    create_hanging_transaction,
    run_transaction,
)
from tests.e2e.stack import (
    LOOPBACK,
    Server,
    describe_json,
    get_json,
    prometheus_config,
    render_rules,
    running,
    start_prometheus,
    wait_until,
)

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.e2e, pytest.mark.kafka, pytest.mark.spark]

CLUSTER = "e2e-groups"
ALERT = "KafkaConsumerGroupBlockedByTransaction"
APPLICATION = "ledger-writer"
BLOCKED_AFTER = 2
#: Upper bound of the wait for both pages: the daemon's first, cold Spark cycle included.
PAGE_WAIT_S = 300.0
CYCLE_DRAIN_S = 90.0


def thresholds() -> Thresholds:
    """Every ``for:`` 2 s and a group blocked for more than 1 s pages."""
    short: dict[str, object] = {f.name: "2s" for f in fields(Thresholds) if f.name.endswith("_for")}
    short["consumer_blocked_seconds"] = 1
    return thresholds_from_mapping(short)


@pytest.fixture
def groups() -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return {f"kte-e2e-confluent-{suffix}": "confluent", f"kte-e2e-java-{suffix}": "java"}


@pytest.fixture
def stuck(
    kafka: KafkaCluster, topic: str, groups: dict[str, str], transactions_cli: TransactionsCommand
) -> Iterator[HangingTransaction]:
    """The hanging transaction behind the commit marker both groups committed at, aborted with
    Kafka's own tool at teardown."""
    run_transaction(kafka.bootstrap_servers, topic, partition=0, records=3, commit=True)
    txn = create_hanging_transaction(kafka, topic, partition=0, transactional_id=f"{APPLICATION}-0-7")
    clients = prepare()
    for group, client in groups.items():
        if client == "java":
            committed = commit_last_plus_one(clients, kafka.bootstrap_servers, group, topic, 0, 3)
        else:
            committed = commit_last_plus_one_confluent(kafka.bootstrap_servers, group, topic, 0, 3)
        assert committed == 3 < txn.start_offset
    yield txn
    transactions_cli.abort(txn.topic, txn.partition, txn.start_offset)


@pytest.fixture
def scheduled_daemon(
    kafka: KafkaCluster, topic: str, spark: SparkSession, stuck: HangingTransaction
) -> Iterator[Daemon]:
    config = parse_config({
        "web": {"listen_address": f"{LOOPBACK}:0"},
        "clusters": [{
            "name": CLUSTER, "bootstrap_servers": kafka.bootstrap_servers,
            "interval": "2s", "request_timeout": "1500ms", "topics": {"allow": [re.escape(topic)]},
            "groups": {"allow": ["kte-e2e-.*"], "blocked_after_cycles": BLOCKED_AFTER},
        }],
    }, env={})  # fmt: skip
    daemon = Daemon(config, pipeline=PipelineRunner(config.spark, config.pipeline, session=spark))
    with running(daemon, CYCLE_DRAIN_S):
        yield daemon


@pytest.fixture
def prometheus(tmp_path: Path, scheduled_daemon: Daemon) -> Iterator[Server]:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    config = prometheus_config(
        exporter_target=f"{LOOPBACK}:{scheduled_daemon.port}",
        alertmanager_target=f"{LOOPBACK}:{free_port()}",  # nobody: the alert's state is the subject
        rule_file=directory / "kafka-txn-exporter.rules.yml",
    )
    server = start_prometheus(directory, config, render_rules(thresholds()), free_port())
    try:
        yield server
    finally:
        server.process.stop()


@pytest.mark.timeout(900)
def test_consumers_committing_last_record_plus_one_page_when_a_hanging_transaction_blocks_them(
    topic: str, groups: dict[str, str], stuck: HangingTransaction, prometheus: Server
) -> None:
    def firing() -> dict[str, dict[str, Any]] | None:
        alerts = get_json(f"{prometheus.url}/api/v1/alerts")["data"]["alerts"]
        paging = {
            a["labels"]["group"]: a
            for a in alerts
            if a["labels"].get("alertname") == ALERT
            and a["state"] == "firing"
            and a["labels"].get("topic") == topic
        }
        return paging if set(paging) >= set(groups) else None

    def diagnostics() -> str:
        return f"--- Prometheus /api/v1/alerts:\n{describe_json(prometheus.url + '/api/v1/alerts')}\n" + (
            prometheus.process.describe()
        )

    pages = wait_until(
        firing, timeout_s=PAGE_WAIT_S, what=f"{ALERT} firing for {sorted(groups)}", diagnostics=diagnostics
    )
    for group in groups:
        page = pages[group]
        assert page["labels"]["partition"] == "0"
        description = page["annotations"]["description"]
        assert stuck.transactional_id in description, description
        assert f"application {APPLICATION}" in description, description
        assert f"starting at offset {stuck.start_offset}" in description, description

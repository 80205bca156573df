"""Attribution without consumer groups (issue 41): a running Kafka Streams exactly-once (v2)
application (testbed.streams: Maven's kafka-streams jars) has its open transaction counted
under its ``application.id`` by a daemon whose groups family is off."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.config import parse_config
from exporter.daemon import Daemon, PipelineRunner
from testbed.broker import KafkaCluster
from testbed.scenarios import produce_plain
from testbed.streams import StreamsEosApp

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

#: Cycles the daemon runs at most while the application starts and opens its transaction.
MAX_CYCLES = 20


def samples(registry: CollectorRegistry, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value) for metric in registry.collect() for s in metric.samples if s.name == name
    ]


@pytest.fixture
def topics(kafka: KafkaCluster) -> tuple[str, str]:
    stem = f"kte-streams-{uuid.uuid4().hex[:8]}"
    return kafka.create_topic(f"{stem}-in", partitions=1), kafka.create_topic(f"{stem}-out", partitions=1)


@pytest.fixture
def daemon(kafka: KafkaCluster, spark: SparkSession, topics: tuple[str, str]) -> Iterator[Daemon]:
    config = parse_config({
        "web": {"listen_address": "127.0.0.1:0"},
        "clusters": [{
            "name": "streams", "bootstrap_servers": kafka.bootstrap_servers, "interval": "10s",
            "request_timeout": "5s", "topics": {"allow": [re.escape(t) for t in topics]},
        }],
    })  # fmt: skip
    assert not config.clusters[0].groups.enabled
    daemon = Daemon(config, registry=CollectorRegistry(),
                    pipeline=PipelineRunner(config.spark, config.pipeline, session=spark))  # fmt: skip
    yield daemon
    daemon.stop()


@pytest.mark.timeout(900)
def test_a_kafka_streams_applications_open_transactions_are_counted_under_its_application_id_with_groups_off(
    kafka: KafkaCluster, topics: tuple[str, str], daemon: Daemon
) -> None:
    source, sink = topics
    application_id = f"kte-orders-enricher-{uuid.uuid4().hex[:6]}"
    produce_plain(kafka.bootstrap_servers, source, partition=0, records=5)
    with StreamsEosApp(kafka.bootstrap_servers, application_id, source=source, sink=sink) as app:
        app.wait_processed(5)
        by_application: list[tuple[dict[str, str], float]] = []
        for _ in range(MAX_CYCLES):
            daemon.jobs[0].run_cycle()
            by_application = samples(daemon.registry, "kafka_txn_open_transactions_by_application")
            if by_application:
                break
        result = daemon.store.get("streams").result
        log_tail = "\n".join(app.output[-30:])
    assert by_application, f"no open transaction of {application_id} seen\n{log_tail}"
    assert [(labels["application"], labels["class"], value) for labels, value in by_application] == [
        (application_id, "ongoing", 1.0)
    ], log_tail
    assert result is not None and result.groups is None  # the group family is off
    assert samples(daemon.registry, "kafka_txn_consumer_group_blocked_partitions") == []

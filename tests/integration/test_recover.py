"""``recover`` on real brokers with real clients: an application killed with transactions
open, found by its attribution, ended transaction by transaction, its consumers reading on,
and nothing of another application touched."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from exporter.cli import main
from testbed.broker import KafkaCluster
from testbed.lingering import KilledProducers, flink_sink_ids
from testbed.oracles import TransactionsCommand
from testbed.scenarios import OpenTransaction, create_hanging_transaction, produce_plain
from testbed.streams import StreamsEosApp

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    capsys.readouterr()
    code = main([*argv, "--output", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def group_consumer(cluster: KafkaCluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def consume_and_commit(
    cluster: KafkaCluster, group: str, topic: str, partitions: range, *, want: int, timeout_s: float
) -> list[bytes]:
    """A read_committed member of ``group`` reads from its committed offsets and commits. A
    member that gets nothing is replaced after a while: the first group of a fresh cluster
    waits for ``__consumer_offsets`` to be created, and a member can miss its coordinator."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while not values and time.monotonic() < deadline:
        consumer = group_consumer(cluster, group)
        try:
            consumer.assign([TopicPartition(topic, p) for p in partitions])
            attempt_until = min(deadline, time.monotonic() + max(3.0, timeout_s / 3))
            while len(values) < want and time.monotonic() < attempt_until:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(message.value())
            if values:
                consumer.commit(asynchronous=False)
        finally:
            consumer.close()
    return values


def test_recover_ends_a_killed_flink_jobs_lingering_transactions_and_nothing_else(
    kafka: KafkaCluster,
    topic: str,
    spark: SparkSession,
    transactions_cli: TransactionsCommand,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = ("--bootstrap-server", kafka.bootstrap_servers)
    app = f"kte-flink-{uuid.uuid4().hex[:6]}"
    group = f"kte-downstream-{uuid.uuid4().hex[:6]}"
    for p in range(3):
        produce_plain(kafka.bootstrap_servers, topic, partition=p, records=2)
    assert len(consume_and_commit(kafka, group, topic, range(3), want=6, timeout_s=30)) == 6
    # A zombie of the same job: its partition was never added to its transaction (hanging).
    zombie = create_hanging_transaction(kafka, topic, partition=2, transactional_id=f"{app}-5-6")
    job = KilledProducers(
        kafka.bootstrap_servers, topic, flink_sink_ids(app, subtasks=3, checkpoint=7, partitions=3)
    )
    with (
        job,
        OpenTransaction(
            kafka.bootstrap_servers, topic, partition=1, transactional_id=f"kte-billing-{app}-tx-7",
            transaction_timeout_ms=600_000,
        ) as other,
    ):  # fmt: skip
        job.kill()
        other.begin(records=1)
        for p in range(3):
            produce_plain(kafka.bootstrap_servers, topic, partition=p, records=4)
        assert consume_and_commit(kafka, group, topic, range(3), want=1, timeout_s=3) == []

        code, plan, err = cli_json(capsys, "recover", *bs, "--application", app)
        assert code == 0, err
        assert plan["dry_run"] is True and plan["transactions"] == 4
        kinds = sorted((a["action"], a["result"]) for a in plan["actions"])
        assert kinds == [("abort", "dry_run")] + [("force-terminate", "dry_run")] * 3, plan
        listed = [t for a in plan["actions"] for t in a["transactions"]]
        assert {t["transactional_id"] for t in listed} == {
            *flink_sink_ids(app, subtasks=3, checkpoint=7, partitions=3),
            zombie.transactional_id,
        }
        assert {t["application"] for t in listed} == {app}
        assert {(t["class"], t["coordinator_state"]) for t in listed} == {
            ("ongoing", "Ongoing"),
            ("hanging", "Empty"),
        }
        assert {t["partition"] for t in listed if group in t["blocked_groups"]} == {0, 1, 2}
        assert other.transactional_id not in {t["transactional_id"] for t in listed}
        assert consume_and_commit(kafka, group, topic, range(3), want=1, timeout_s=2) == []

        # A prefix that spans two applications is ambiguous: refused, nothing written.
        code, _, err = cli_json(capsys, "recover", *bs, "--transactional-id-prefix", "kte-")
        assert code == 1 and "applications" in err

        code, done, err = cli_json(capsys, "recover", *bs, "--application", app, "--yes")
        assert code == 0, err
        results = sorted((a["action"], a["result"]) for a in done["actions"])
        assert results == [("abort", "aborted")] + [("force-terminate", "terminated")] * 3, done
        assert {(g, tp) for g, tp in done["groups_unblocked"]} == {(group, f"{topic}-{p}") for p in range(3)}
        assert done["groups_still_blocked"] == []
        # The group reads on: everything up to the other application's transaction (partition 1).
        read = consume_and_commit(kafka, group, topic, range(3), want=12, timeout_s=30)
        assert read.count(b"plain") == 8, read
        # The other application's transaction is untouched: still open, still its own.
        assert transactions_cli.describe(other.transactional_id).state == "Ongoing"
        other.commit()
    assert len(consume_and_commit(kafka, group, topic, range(3), want=5, timeout_s=30)) >= 4


@pytest.mark.timeout(600)
def test_recover_ends_a_killed_kafka_streams_exactly_once_application(
    kafka: KafkaCluster,
    topic: str,
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = ("--bootstrap-server", kafka.bootstrap_servers)
    app = f"kte-streams-{uuid.uuid4().hex[:6]}"
    source, output = kafka.create_topic(f"{topic}-in", partitions=3), topic
    group = f"kte-downstream-{uuid.uuid4().hex[:6]}"
    for p in range(3):
        produce_plain(kafka.bootstrap_servers, output, partition=p, records=1)
    assert len(consume_and_commit(kafka, group, output, range(3), want=3, timeout_s=60)) == 3
    with StreamsEosApp(kafka.bootstrap_servers, app, source=source, sink=output) as streams:
        for p in range(3):
            produce_plain(kafka.bootstrap_servers, source, partition=p, records=3)
        streams.wait_processed(9)
        deadline = time.monotonic() + 60
        while sum(kafka.end_offsets(output, p)[0] for p in range(3)) < 12:  # the records landed
            assert time.monotonic() < deadline, "Kafka Streams' records never reached the sink"
            time.sleep(0.5)
        streams.kill()
    for p in range(3):
        produce_plain(kafka.bootstrap_servers, output, partition=p, records=2)

    code, plan, err = cli_json(capsys, "recover", *bs, "--application", app)
    assert code == 0, err
    listed = [t for a in plan["actions"] for t in a["transactions"]]
    assert listed and {t["application"] for t in listed} == {app}
    assert {t["topic"] for t in listed} >= {output}
    assert {a["action"] for a in plan["actions"]} == {"force-terminate"}
    # The killed instance's transaction holds the group on the partitions it wrote to.
    assert {g for t in listed for g in t["blocked_groups"]} == {group}

    code, done, err = cli_json(capsys, "recover", *bs, "--application", app, "--yes")
    assert code == 0, err
    assert {a["result"] for a in done["actions"]} == {"terminated"}
    assert done["groups_still_blocked"] == []
    read = consume_and_commit(kafka, group, output, range(3), want=6, timeout_s=30)
    assert read.count(b"plain") == 6, read

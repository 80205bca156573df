"""The operator commands against a real broker, checked against Kafka's own
``kafka-transactions.sh`` (the ``transactions_cli`` oracle) on the same cluster.

Commands run in-process through :func:`exporter.cli.main`; find-hanging and abort reuse the
session's Spark (the ``spark`` fixture), as the commands take the active session.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pyspark.sql import SparkSession

from exporter.cli import main
from testbed.broker import KafkaCluster
from testbed.oracles import TransactionsCommand
from testbed.scenarios import (
    OpenTransaction,
    create_hanging_transaction,
    produce_plain,
    run_transaction,
)
from tests.fixtures_kafka import HangingFactory

pytestmark = [pytest.mark.kafka]

HOUR_MS = 3_600_000


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``kafka-txn-exporter ARGV`` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code, out, err = cli(capsys, *argv, "--output", "json")
    return code, json.loads(out) if out.strip() else None, err


def open_start_offset(cluster: KafkaCluster, topic: str, partition: int) -> int:
    from exporter.kafka.admin import ClusterAdmin

    with ClusterAdmin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        rows = admin.describe_producers({cluster.leader_of(topic, partition): [(topic, partition)]})
    starts = [p.current_txn_start_offset for p in rows.rows if p.current_txn_start_offset >= 0]
    assert len(starts) == 1, rows
    return starts[0]


def read_committed(
    cluster: KafkaCluster, topic: str, partition: int, *, want: int, timeout_s: float
) -> list[bytes]:
    """Values a read_committed consumer gets from the partition's start within the time."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"kte-cli-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < want and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


# --- list, describe, describe-producers: field by field against Kafka's tool -----------------


def test_list_describe_and_describe_producers_agree_with_kafka(
    kafka: KafkaCluster,
    topic: str,
    transactions_cli: TransactionsCommand,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = ("--bootstrap-server", kafka.bootstrap_servers)
    committed = run_transaction(kafka.bootstrap_servers, topic, partition=1)
    with OpenTransaction(kafka.bootstrap_servers, topic, partition=0, transaction_timeout_ms=600_000) as txn:
        txn.begin(records=2)
        ours_ids = {txn.transactional_id, committed.transactional_id}

        code, listed, _ = cli_json(capsys, "list", *bs)
        kafka_list = transactions_cli.list_transactions()
        kafka_described = transactions_cli.describe(txn.transactional_id)
        kafka_producers = transactions_cli.describe_producers(topic, 0)
        code_d, described, _ = cli_json(capsys, "describe", *bs, "--transactional-id", txn.transactional_id)
        code_p, producers, _ = cli_json(
            capsys, "describe-producers", *bs, "--topic", topic, "--partition", "0"
        )

        assert (code, code_d, code_p) == (0, 0, 0)
        mine = {
            (t["transactional_id"], t["coordinator_id"], t["producer_id"], t["state"])
            for t in listed["transactions"]
            if t["transactional_id"] in ours_ids
        }
        theirs = {
            (t.transactional_id, t.coordinator, t.producer_id, t.state)
            for t in kafka_list
            if t.transactional_id in ours_ids
        }
        assert mine == theirs
        assert {s for *_, s in mine} == {"Ongoing", "CompleteCommit"}

        assert (
            described["coordinator_id"],
            described["transactional_id"],
            described["producer_id"],
            described["producer_epoch"],
            described["state"],
            described["transaction_timeout_ms"],
            described["start_time_ms"],
            tuple(described["partitions"]),
        ) == (
            kafka_described.coordinator,
            kafka_described.transactional_id,
            kafka_described.producer_id,
            kafka_described.producer_epoch,
            kafka_described.state,
            kafka_described.timeout_ms,
            kafka_described.start_time_ms,
            tuple(sorted(kafka_described.partitions)),
        )
        assert described["partitions"] == [f"{topic}-0"]

        assert producers["broker_id"] == kafka.leader_of(topic, 0)
        assert [
            (
                p["producer_id"],
                p["producer_epoch"],
                p["coordinator_epoch"],
                p["last_sequence"],
                p["last_timestamp_ms"],
                p["current_txn_start_offset"],
            )
            for p in producers["producers"]
        ] == [
            (
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.last_sequence,
                p.last_timestamp_ms,
                p.current_txn_start_offset,
            )
            for p in sorted(kafka_producers, key=lambda p: p.producer_id)
        ]

        # Kafka's filters (ListTransactions v0, v1 and v2 on this broker) and ours.
        pattern = re.escape(txn.transactional_id)
        for extra, expected in (
            (("--state", "Ongoing"), {txn.transactional_id}),
            (("--producer-id", str(described["producer_id"])), {txn.transactional_id}),
            (("--duration-filter", "0"), ours_ids),  # the broker filters on start time only
            (("--transactional-id-pattern", pattern), {txn.transactional_id}),
        ):
            code, filtered, err = cli_json(capsys, "list", *bs, *extra)
            assert code == 0, err
            assert {t["transactional_id"] for t in filtered["transactions"]} & ours_ids == expected
        txn.abort()

    code, table, _ = cli(capsys, "describe-producers", *bs, "--topic", topic, "--partition", "0")
    assert code == 0
    assert table.splitlines()[0].split() == [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    assert table.splitlines()[1].split()[-1] == "None"  # no open transaction, as Kafka prints


def test_kafka_errors_name_the_broker_and_the_error_code(
    kafka: KafkaCluster,
    topic: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    bs = ("--bootstrap-server", kafka.bootstrap_servers)
    code, out, err = cli(capsys, "describe", *bs, "--transactional-id", "kte-no-such-id")
    assert code == 3
    assert out == ""
    assert "TRANSACTIONAL_ID_NOT_FOUND" in err and "broker 1" in err

    code, _, err = cli(capsys, "describe-producers", *bs, "--topic", topic, "--partition", "7")
    assert code == 3
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err

    # --command-config: a properties file of librdkafka settings, as with Kafka's tools.
    properties = tmp_path / "client.properties"
    properties.write_text("# ops\nclient.id = kte-ops\n")
    code, out, _ = cli(capsys, "list", *bs, "--command-config", str(properties))
    assert code == 0
    assert out.split()[:4] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]

    # The installed entry point, and an unreachable cluster: exit 3.
    entry = Path(sys.executable).parent / "kafka-txn-exporter"
    run = subprocess.run(
        [str(entry), "list", "--bootstrap-server", "127.0.0.1:1", "--request-timeout", "2s"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 3, run.stderr
    assert "127.0.0.1:1" in run.stderr


# --- find-hanging: every transaction Kafka reports, aged from its start ----------------------


@pytest.mark.spark
def test_find_hanging_reports_what_kafka_reports_aged_from_the_start(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    transactions_cli: TransactionsCommand,
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Partition 0: hanging since three hours, but its producer wrote to it again just now:
    # LastTimestamp is fresh, the start is not.
    first = create_hanging_transaction(kafka, topic, partition=0, backdate_ms=3 * HOUR_MS)
    again = create_hanging_transaction(kafka, topic, partition=0, transactional_id=first.transactional_id)
    # Partition 1: a hanging transaction, two hours old.
    old = hanging(topic, partition=1, backdate_ms=2 * HOUR_MS)
    # Partition 2: a committed transaction, then a legitimate open one: not hanging.
    run_transaction(kafka.bootstrap_servers, topic, partition=2)
    with OpenTransaction(
        kafka.bootstrap_servers, topic, partition=2, transaction_timeout_ms=600_000
    ) as legit:
        legit.begin()
        try:
            code, found, err = cli_json(
                capsys, "find-hanging", "--bootstrap-server", kafka.bootstrap_servers, "--topic", topic
            )
            kafka_all = transactions_cli.find_hanging(topic=topic, max_transaction_timeout_min=0)
            kafka_default = transactions_cli.find_hanging(topic=topic)
        finally:
            transactions_cli.abort(topic, 0, first.start_offset)

    assert code == 1, err
    mine = {(f["topic"], f["partition"], f["producer_id"], f["start_offset"]): f for f in found["hanging"]}
    # Every transaction Kafka reports (even with no age limit), with the same fields.
    for k in kafka_all:
        assert (k.topic, k.partition, k.producer_id, k.start_offset) in mine, (found, err)
        f = mine[(k.topic, k.partition, k.producer_id, k.start_offset)]
        assert (f["producer_epoch"], f["coordinator_epoch"], f["last_timestamp_ms"]) == (
            k.producer_epoch,
            k.coordinator_epoch,
            k.last_timestamp_ms,
        )
        assert f["reason"] is not None
    assert {(k.partition, k.start_offset) for k in kafka_all} == {
        (0, first.start_offset),
        (1, old.start_offset),
    }
    assert set(mine) == {
        (topic, 0, first.producer_id, first.start_offset),
        (topic, 1, old.producer_id, old.start_offset),
    }

    # Partition 0: Kafka ages it from LastTimestamp (minutes), we from its first batch.
    resumed = mine[(topic, 0, first.producer_id, first.start_offset)]
    assert resumed["last_timestamp_ms"] == again.timestamp_ms
    assert resumed["start_time_ms"] == first.timestamp_ms
    assert resumed["start_time_source"] == "batch_timestamp"
    assert resumed["age_ms"] >= 3 * HOUR_MS - 60_000
    assert resumed["transactional_id"] == first.transactional_id
    assert [k.duration_min < 15 for k in kafka_all if k.partition == 0] == [True]
    # With Kafka's default --max-transaction-timeout (15 min) its tool misses it; we do not.
    assert {k.partition for k in kafka_default} == {1}
    old_finding = mine[(topic, 1, old.producer_id, old.start_offset)]
    assert old_finding["age_ms"] >= 2 * HOUR_MS - 60_000
    assert old_finding["lso_lag"] >= 1


# --- abort -----------------------------------------------------------------------------------


@pytest.mark.spark
def test_abort_hanging_transaction_unblocks_read_committed_consumers(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    txn = hanging(topic, partition=0, backdate_ms=2 * HOUR_MS)
    produce_plain(kafka.bootstrap_servers, topic, partition=0, records=5)
    assert read_committed(kafka, topic, 0, want=1, timeout_s=3) == []
    hwm, lso = kafka.end_offsets(topic, 0)
    assert lso == txn.start_offset
    abort = (
        "abort",
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        str(txn.start_offset),
    )

    # Without --yes: the plan, and nothing changes.
    code, plan, err = cli_json(capsys, *abort)
    assert code == 0, err
    assert plan["result"] == "dry_run"
    assert (plan["producer_id"], plan["producer_epoch"], plan["lso_before"]) == (
        txn.producer_id,
        txn.producer_epoch,
        lso,
    )
    assert plan["reason"] is not None
    assert plan["start_time_ms"] == txn.timestamp_ms
    assert kafka.end_offsets(topic, 0) == (hwm, lso)
    assert open_start_offset(kafka, topic, 0) == txn.start_offset

    code, done, err = cli_json(capsys, *abort, "--yes")
    assert code == 0, err
    assert done["result"] == "aborted"
    assert done["lso_after"] > txn.start_offset
    assert kafka.end_offsets(topic, 0)[1] == done["lso_after"]
    assert read_committed(kafka, topic, 0, want=5, timeout_s=15) == [b"plain"] * 5

    # The same start offset again is stale now: refused, nothing written.
    code, out, err = cli(capsys, *abort, "--yes")
    assert code == 1
    assert out == ""
    assert f"no open transaction starts at offset {txn.start_offset}" in err


@pytest.mark.spark
def test_abort_refuses_a_legitimate_transaction_and_force_terminate_ends_it(
    kafka: KafkaCluster,
    topic: str,
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = ("--bootstrap-server", kafka.bootstrap_servers)
    with OpenTransaction(kafka.bootstrap_servers, topic, partition=0, transaction_timeout_ms=600_000) as txn:
        txn.begin(records=2)
        start = open_start_offset(kafka, topic, 0)

        code, out, err = cli(
            capsys, "abort", *bs, "--topic", topic, "--partition", "0", "--start-offset", str(start), "--yes"
        )
        assert code == 1
        assert out == ""
        assert "not hanging" in err and txn.transactional_id in err
        assert f"force-terminate --transactional-id {txn.transactional_id}" in err
        assert open_start_offset(kafka, topic, 0) == start

        stale = str(start + 1000)
        code, _, err = cli(
            capsys, "abort", *bs, "--topic", topic, "--partition", "0", "--start-offset", stale
        )
        assert code == 1
        assert f"no open transaction starts at offset {stale}" in err

        terminate = ("force-terminate", *bs, "--transactional-id", txn.transactional_id)
        code, plan, err = cli_json(capsys, *terminate)
        assert code == 0, err
        assert plan["result"] == "dry_run" and plan["before"]["state"] == "Ongoing"
        assert open_start_offset(kafka, topic, 0) == start

        code, done, err = cli_json(capsys, *terminate, "--yes")
        assert code == 0, err
        # The coordinator aborted it, then completed the InitProducerId: Empty, epoch bumped.
        assert done["after"]["state"] in ("Empty", "CompleteAbort")
        assert done["new_producer_epoch"] > plan["before"]["producer_epoch"]
        txn.is_open = False  # fenced: the producer can no longer end it
    hwm, lso = kafka.end_offsets(topic, 0)
    assert lso == hwm
    # The audit's evidence: the partition's LSO held at the transaction's start, then freed.
    assert done["lso_before"] == {f"{topic}-0": start}
    assert done["lso_after"][f"{topic}-0"] > start

    code, _, err = cli(capsys, *terminate, "--yes")
    assert code == 1
    assert "no open transaction to abort" in err


# --- trust in the operator: doctor, both sides re-read, the epoch guard -----------------------


def test_doctor_finds_nothing_missing_on_a_broker_that_allows_everything(
    kafka: KafkaCluster,
    topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_transaction(kafka.bootstrap_servers, topic, partition=0)  # __transaction_state exists
    bs = ("--bootstrap-server", kafka.bootstrap_servers)
    code, doc, err = cli_json(capsys, "doctor", *bs)
    assert code == 0, err
    results = {(c["resource_type"], c["resource"], c["operation"]): c["permission"] for c in doc["checks"]}
    assert results == {
        ("Topic", "*", "Describe"): "ok",
        ("Topic", "__transaction_state", "Describe"): "ok",
        ("Topic", "*", "Read"): "ok",
        ("TransactionalId", "*", "Describe"): "ok",
        ("Cluster", "kafka-cluster", "DescribeConfigs"): "ok",
        ("Cluster", "kafka-cluster", "ClusterAction"): "not_probed",
        ("TransactionalId", "*", "Write"): "not_probed",
    }
    assert doc["complete_cycle"] is True
    assert all(c["grant"] is None for c in doc["checks"] if c["permission"] == "ok")

    # A topic that is not there is reported as not visible (exit 1), with the grant line.
    code, doc, _ = cli_json(capsys, "doctor", *bs, "--topic", topic, "--topic", "kte-absent")
    assert code == 1
    absent = [c for c in doc["checks"] if c["resource"] == "kte-absent"]
    assert [(c["operation"], c["permission"]) for c in absent] == [("Describe", "missing")]
    assert absent[0]["grant"].endswith("--operation Describe --topic 'kte-absent'")


@pytest.mark.spark
def test_abort_reads_the_coordinators_again_before_writing(
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
) -> None:
    from exporter.kafka.admin import ClusterAdmin
    from exporter.operator.actions import coordinator_owner

    stuck = hanging(topic, partition=1)
    with (
        OpenTransaction(kafka.bootstrap_servers, topic, partition=0, transaction_timeout_ms=600_000) as txn,
        ClusterAdmin(bootstrap_servers=kafka.bootstrap_servers) as admin,
    ):
        txn.begin()
        leader = kafka.leader_of(topic, 0)
        [live] = [
            p
            for p in admin.describe_producers({leader: [(topic, 0)]}).rows
            if p.current_txn_start_offset >= 0
        ]
        owner = coordinator_owner(admin, live.producer_id, topic, 0)
        assert owner is not None
        assert (owner.transactional_id, owner.state) == (txn.transactional_id, "Ongoing")
        # The same producer id on another partition: the coordinator's transaction does not
        # include it, so it does not own it there.
        assert coordinator_owner(admin, live.producer_id, topic, 2) is None
        assert coordinator_owner(admin, stuck.producer_id, topic, 1) is None


def test_force_terminate_refuses_when_the_producer_re_initialised_since_the_dry_run(
    kafka: KafkaCluster,
    topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = ("--bootstrap-server", kafka.bootstrap_servers)
    with OpenTransaction(
        kafka.bootstrap_servers, topic, partition=0, transaction_timeout_ms=600_000
    ) as first:
        first.begin()
        terminate = ("force-terminate", *bs, "--transactional-id", first.transactional_id)
        code, plan, err = cli_json(capsys, *terminate)
        assert code == 0, err
        seen = plan["expected_producer_epoch"]
        assert seen == plan["before"]["producer_epoch"]
        # The application restarts: InitProducerId bumps the epoch, a new transaction opens.
        with OpenTransaction(
            kafka.bootstrap_servers,
            topic,
            partition=0,
            transactional_id=first.transactional_id,
            transaction_timeout_ms=600_000,
        ) as second:
            first.is_open = False  # fenced
            second.begin()
            code, out, err = cli(capsys, *terminate, "--producer-epoch", str(seen), "--yes")
            assert code == 1
            assert out == ""
            assert f"not {seen} (--producer-epoch)" in err and "nothing was changed" in err
            code, described, _ = cli_json(
                capsys, "describe", *bs, "--transactional-id", first.transactional_id
            )
            assert described["state"] == "Ongoing"
            assert described["producer_epoch"] > seen

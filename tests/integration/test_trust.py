"""A page must mean a transaction hangs: the trust rules on real brokers.

Each test drives what operators actually see (churn of short transactions from two client
generations, a coordinator that crashes, a producer recovering from a KIP-588 timeout, a
prepared two-phase-commit transaction) and checks the daemon's cycles one by one. The
least-privilege case is in ``test_acls.py`` (the authorizer test bed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.config import Config, parse_config
from exporter.daemon import Daemon, PipelineRunner
from exporter.model import CoordinatorTimeoutAbort, CycleResult, Finding, TxnClass
from testbed.broker import KafkaCluster
from testbed.churn import JavaChurn, LibrdkafkaChurn
from testbed.faults import killed
from testbed.maven import KafkaDistribution
from testbed.scenarios import (
    OpenTransaction,
    ReinitializedTransaction,
    force_terminate,
    open_two_phase_commit_transaction,
    run_timeout_then_reinit,
)
from tests.fixtures_kafka import HangingFactory

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def trust_config(bootstrap: str, topic: str, *, confirm_cycles: int = 2) -> Config:
    return parse_config(
        {
            "web": {"listen_address": "127.0.0.1:0"},
            "pipeline": {"hanging_confirm_cycles": confirm_cycles},
            "clusters": [
                {
                    "name": "test",
                    "bootstrap_servers": bootstrap,
                    "interval": "2s",
                    "request_timeout": "1500ms",
                    "topics": {"allow": [topic]},
                }
            ],
        },
        env={},
    )


@pytest.fixture
def daemon_with(spark: SparkSession) -> Iterator[Callable[[Config], Daemon]]:
    made: list[Daemon] = []

    def factory(config: Config) -> Daemon:
        daemon = Daemon(
            config,
            registry=CollectorRegistry(),
            pipeline=PipelineRunner(config.spark, config.pipeline, session=spark),
        )
        made.append(daemon)
        return daemon

    yield factory
    for d in made:
        d.stop()


def run_cycle(daemon: Daemon) -> CycleResult:
    daemon.jobs[0].run_cycle()
    result = daemon.store.get("test").result
    assert result is not None
    return result


def not_ongoing(result: CycleResult) -> list[Finding]:
    return [f for f in result.findings if f.txn_class is not TxnClass.ONGOING]


def test_churn_of_short_transactions_never_makes_a_finding(
    kafka: KafkaCluster,
    kafka_dist: KafkaDistribution,
    topic: str,
    hanging: HangingFactory,
    daemon_with: Callable[[Config], Daemon],
) -> None:
    """60 s of short transactions from librdkafka (transactions v1 style) and Kafka's own
    Java producer (v2), confirmation at once: no cycle shows anything but ongoing, and a
    genuine hanging transaction created in the middle is still found."""
    daemon = daemon_with(trust_config(kafka.bootstrap_servers, topic, confirm_cycles=1))
    rdkafka = LibrdkafkaChurn(
        kafka.bootstrap_servers, topic, duration_s=60.0, partitions=(0, 1), max_transactions=20_000
    )
    java = JavaChurn(
        kafka_dist,
        kafka.bootstrap_servers,
        topic,
        duration_s=60.0,
        throughput=200,
        transaction_duration_ms=100,
    )
    stuck = None
    cycles = 0
    seen_open = 0
    with rdkafka, java:
        started = time.monotonic()
        while rdkafka.running or java.running:
            result = run_cycle(daemon)
            cycles += 1
            seen_open += sum(n for _, n in result.open_transactions_by_class)
            unexpected = [
                f
                for f in not_ongoing(result)
                if stuck is None or (f.partition, f.start_offset) != (stuck.partition, stuck.start_offset)
            ]
            assert unexpected == [], f"cycle {cycles}: {unexpected}"
            if stuck is None and time.monotonic() - started > 30:
                stuck = hanging(topic, partition=2)
        rdkafka.join()
        java.wait()
    assert rdkafka.stats.errors == [] and java.stats.errors == []
    assert rdkafka.stats.transactions_committed >= 20
    assert cycles >= 2
    assert seen_open > 0, "the cycles never caught a transaction open: churn too light"
    assert stuck is not None
    found = not_ongoing(run_cycle(daemon))
    assert [(f.partition, f.producer_id, f.start_offset, f.txn_class) for f in found] == [
        (2, stuck.producer_id, stuck.start_offset, TxnClass.HANGING)
    ]


def test_a_producer_recovering_from_a_coordinator_timeout_is_counted_once(
    kafka: KafkaCluster,
    topic: str,
    daemon_with: Callable[[Config], Daemon],
) -> None:
    """KIP-588: the coordinator aborts the transaction and the producer re-initialises at
    once, so the cycles never see PrepareAbort or CompleteAbort: only Ongoing, then Empty
    with a bumped epoch. Counted exactly once."""
    daemon = daemon_with(trust_config(kafka.bootstrap_servers, topic))
    done: dict[str, ReinitializedTransaction] = {}

    def drive() -> None:
        done["result"], _ = run_timeout_then_reinit(
            kafka.bootstrap_servers, topic, transaction_timeout_ms=20_000, reopen=False
        )

    driver = threading.Thread(target=drive, name="kip588-driver")
    driver.start()
    aborts: list[CoordinatorTimeoutAbort] = []
    try:
        deadline = time.monotonic() + 180
        while not daemon.jobs[0].memory or not any(
            w.transactional_id.startswith("kte-reinit") for w in daemon.jobs[0].memory.watched
        ):
            assert time.monotonic() < deadline, "the transaction was never seen Ongoing"
            aborts.extend(run_cycle(daemon).timeout_aborts)
    finally:
        driver.join(timeout=90)
    reinit = done["result"]
    assert reinit.final.state == "Empty"
    for _ in range(3):
        aborts.extend(run_cycle(daemon).timeout_aborts)
    ours = [a for a in aborts if a.transactional_id == reinit.transactional_id]
    assert len(ours) == 1, aborts
    assert ours[0].new_epoch > ours[0].old_epoch
    registry = daemon.registry
    total = sum(
        s.value
        for m in registry.collect()
        if m.name == "kafka_txn_coordinator_timeout_aborts"
        for s in m.samples
        if s.name.endswith("_total")
    )
    assert total >= 1


def test_a_prepared_two_phase_commit_transaction_is_never_late_or_hanging(
    kafka_2pc: KafkaCluster,
    topic: str,
    daemon_with: Callable[[Config], Daemon],
) -> None:
    """A 2PC transaction (InitProducerId v6, Enable2Pc) next to an ordinary open one: it is
    two_phase_commit in every cycle, and the coordinator open-time gauge that
    KafkaTransactionCoordinatorOpenTimeHigh reads does not include it."""
    prepared = open_two_phase_commit_transaction(kafka_2pc, topic, partition=0)
    try:
        time.sleep(6)  # the 2PC transaction is the older one
        with OpenTransaction(kafka_2pc.bootstrap_servers, topic, partition=1) as ordinary:
            ordinary.begin(records=1)
            daemon = daemon_with(trust_config(kafka_2pc.bootstrap_servers, topic))
            for _ in range(3):
                result = run_cycle(daemon)
                mine = [f for f in result.findings if f.partition == 0]
                assert [(f.producer_id, f.txn_class, f.late) for f in mine] == [
                    (prepared.producer_id, TxnClass.TWO_PHASE_COMMIT, False)
                ]
                assert not [f for f in not_ongoing(result) if f.partition != 0]
                (coordinator,) = [c for c in result.coordinators if c.coordinator_id == prepared.coordinator]
                assert coordinator.two_phase_commit_open_time_max_ms >= 6000
                assert (
                    coordinator.active_transaction_open_time_max_ms
                    < coordinator.two_phase_commit_open_time_max_ms
                )
            broker = result.brokers[0]
            assert broker.two_phase_commit_enabled is True
            ordinary.commit()
    finally:
        force_terminate(kafka_2pc.bootstrap_servers, prepared.transactional_id)


@pytest.mark.cluster
@pytest.mark.parametrize("kafka_any", ["kafka_cluster3"], indirect=True)
def test_a_confirmed_hanging_transaction_survives_its_coordinator_and_leader_crashing(
    kafka_any: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    daemon_with: Callable[[Config], Daemon],
) -> None:
    """SIGKILL the coordinator of the hanging transaction's id, then the partition's leader:
    the finding is exported in every cycle as hanging, never re-suspected, its confirmation
    count never restarts."""
    cluster = kafka_any
    stuck = hanging(topic, partition=0)
    daemon = daemon_with(trust_config(cluster.bootstrap_servers, topic))
    key = (stuck.partition, stuck.producer_id, stuck.start_offset)

    def hanging_in(result: CycleResult) -> list[Finding]:
        return [f for f in result.findings if (f.partition, f.producer_id, f.start_offset) == key]

    def confirmations() -> int:
        memory = daemon.jobs[0].memory
        assert memory is not None
        (count,) = [
            c.cycles
            for c in memory.candidates
            if (c.finding.partition, c.finding.producer_id, c.finding.start_offset) == key
        ]
        return count

    run_cycle(daemon)
    assert [f.txn_class for f in hanging_in(run_cycle(daemon))] == [TxnClass.HANGING]
    count = confirmations()
    for victim in (cluster.coordinator_of(stuck.transactional_id), stuck.leader):
        with killed(cluster, victim):
            for _ in range(3):
                result = run_cycle(daemon)
                assert [f.txn_class for f in hanging_in(result)] == [TxnClass.HANGING]
                assert confirmations() >= count
                count = confirmations()
                series = [
                    s
                    for m in daemon.registry.collect()
                    if m.name == "kafka_txn_hanging_transaction_info"
                    for s in m.samples
                    if s.labels["start_offset"] == str(stuck.start_offset)
                ]
                assert len(series) == 1
        for _ in range(2):
            assert [f.txn_class for f in hanging_in(run_cycle(daemon))] == [TxnClass.HANGING]
            assert confirmations() >= count
            count = confirmations()

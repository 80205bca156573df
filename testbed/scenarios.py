"""Drivers that put real transactional states on a real broker.

* :func:`run_transaction`: a committed or aborted transaction (confluent-kafka producer).
* :class:`OpenTransaction`: a legitimate transaction the coordinator knows, kept open.
* :func:`create_hanging_transaction`: a KIP-664 hanging transaction that no coordinator
  knows: partition verification off on the leader, InitProducerId, then a raw Produce
  (v <= 11) of a transactional batch WITHOUT AddPartitionsToTxn.
* :func:`run_coordinator_timeout`: a transaction the coordinator aborts on its timeout
  (KIP-588: CompleteAbort with a bumped epoch).
* :func:`produce_plain`: non-transactional records, e.g. to grow LastStableOffsetLag
  behind an open transaction.
* :func:`open_invisible_transaction`: a legitimate transaction of an application user
  whose id a "team" principal cannot Describe (authorizer clusters, issue 10 item 1).
* :func:`open_two_phase_commit_transaction`: a KIP-939 two-phase-commit transaction, left
  open (raw protocol: InitProducerId v6 with Enable2Pc), and :func:`force_terminate`.
* :func:`run_timeout_then_reinit`: KIP-588 the way a producer recovers: its transaction is
  timed out by the coordinator and it re-initialises at once (epoch bumped again).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import kafka.errors as kafka_errors
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from testbed.broker import SASL_LISTENER, KafkaCluster
from testbed.rawclient import CoordinatorTransaction, RawClient

log = logging.getLogger(__name__)

VERIFICATION_CONFIG = "transaction.partition.verification.enable"
#: Highest Produce version that does not add the partition to the transaction itself.
MAX_PRODUCE_VERSION_WITHOUT_IMPLICIT_ADD = 11
#: Back-date a hanging transaction by this much to make it "late" for a broker with the
#: default transaction.max.timeout.ms (15 min + Kafka's fixed 5 min buffer).
DEFAULT_LATE_BACKDATE_MS = 60 * 60 * 1000


def unique_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _producer_config(bootstrap_servers: str, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap_servers,
        "linger.ms": 0,
        "logger": log,  # librdkafka logs to Python logging, not to stderr
    }
    config.update(extra)
    return config


@dataclass(frozen=True, slots=True)
class TransactionRun:
    transactional_id: str
    topic: str
    partition: int
    records: int
    committed: bool


def run_transaction(
    bootstrap_servers: str,
    topic: str,
    *,
    partition: int = 0,
    records: int = 3,
    commit: bool = True,
    transactional_id: str | None = None,
    timeout_s: float = 30.0,
) -> TransactionRun:
    """One complete transaction with confluent-kafka's transactional producer."""
    txn_id = transactional_id or unique_id("kte-txn")
    with OpenTransaction(bootstrap_servers, topic, partition=partition,
                         transactional_id=txn_id, timeout_s=timeout_s) as txn:  # fmt: skip
        txn.begin(records=records)
        if commit:
            txn.commit()
        else:
            txn.abort()
    return TransactionRun(txn_id, topic, partition, records, commit)


class OpenTransaction:
    """A legitimate transaction the coordinator knows, open until :meth:`commit`/:meth:`abort`.

    Leaving the ``with`` block aborts it when still open.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        partition: int = 0,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        timeout_s: float = 30.0,
        client_config: Mapping[str, object] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.transactional_id = transactional_id or unique_id("kte-open")
        self.timeout_s = timeout_s
        self.records_written = 0
        self.is_open = False
        self._producer = Producer(_producer_config(
            bootstrap_servers,
            **{
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": transaction_timeout_ms,
                **(client_config or {}),
            },
        ))  # fmt: skip

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.is_open:
            self.abort()

    def init(self) -> Self:
        """init_transactions only (InitProducerId: the id is Empty with a bumped epoch)."""
        self._producer.init_transactions(self.timeout_s)
        return self

    def begin(self, *, records: int = 1, init: bool = True) -> Self:
        """init_transactions (unless ``init`` is False: done already), begin_transaction,
        and write ``records`` records (flushed)."""
        if init:
            self._producer.init_transactions(self.timeout_s)
        self._producer.begin_transaction()
        self.is_open = True
        self.produce(records)
        return self

    def produce(self, records: int = 1) -> None:
        for _ in range(records):
            self._producer.produce(self.topic, value=b"txn", partition=self.partition)
            self.records_written += 1
        remaining = self._producer.flush(self.timeout_s)
        if remaining:
            raise TimeoutError(f"{remaining} transactional records not delivered")

    def commit(self) -> None:
        self._producer.commit_transaction(self.timeout_s)
        self.is_open = False

    def abort(self) -> None:
        self._producer.abort_transaction(self.timeout_s)
        self.is_open = False


def produce_plain(bootstrap_servers: str, topic: str, *, partition: int = 0,
                  records: int = 10, timeout_s: float = 30.0,
                  client_config: Mapping[str, object] | None = None) -> None:  # fmt: skip
    """Write ``records`` non-transactional records to one partition."""
    producer = Producer(_producer_config(bootstrap_servers, acks="all", **(client_config or {})))
    for _ in range(records):
        producer.produce(topic, value=b"plain", partition=partition)
    remaining = producer.flush(timeout_s)
    if remaining:
        raise TimeoutError(f"{remaining} plain records not delivered")


def commit_last_plus_one_confluent(
    bootstrap_servers: str, group: str, topic: str, partition: int, expect: int, *, timeout_s: float = 60.0
) -> int:
    """A read_committed confluent-kafka consumer of one partition reads ``expect`` records
    (a new group: from the start) and commits the last one's offset + 1, explicitly (not its
    position): the offset it committed."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap_servers, "group.id": group, "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "logger": log,
    })  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        got, last = 0, -1
        deadline = time.monotonic() + timeout_s
        while got < expect and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got, last = got + 1, message.offset()
        if got != expect:
            raise TimeoutError(f"{group} read {got} records of {topic}-{partition}, expected {expect}")
        consumer.commit(offsets=[TopicPartition(topic, partition, last + 1)], asynchronous=False)
        return last + 1
    finally:
        consumer.close()


# -- partition verification ---------------------------------------------------------------


def set_verification(cluster: KafkaCluster, broker_id: int, enabled: bool | None) -> None:
    """Set ``transaction.partition.verification.enable`` on one broker (``None``: remove the
    dynamic override, back to the static default) and wait until the broker reports it."""
    op = AlterConfigOpType.DELETE if enabled is None else AlterConfigOpType.SET
    value = None if enabled is None else str(enabled).lower()
    resource = ConfigResource(
        ResourceType.BROKER, str(broker_id),
        incremental_configs=[ConfigEntry(VERIFICATION_CONFIG, value, incremental_operation=op)],
    )  # fmt: skip
    admin = cluster.admin()
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    expected = "true" if enabled is None else str(enabled).lower()
    deadline = time.monotonic() + 30
    while verification_value(cluster, broker_id) != expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{VERIFICATION_CONFIG} on broker {broker_id} is not {expected}")
        time.sleep(0.2)


def verification_value(cluster: KafkaCluster, broker_id: int) -> str:
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    configs = cluster.admin().describe_configs([resource])[resource].result(timeout=30)
    return str(configs[VERIFICATION_CONFIG].value)


@contextlib.contextmanager
def verification_disabled(cluster: KafkaCluster, broker_id: int) -> Iterator[None]:
    """Partition verification off on one broker for the block, restored afterwards."""
    set_verification(cluster, broker_id, False)
    try:
        yield
    finally:
        set_verification(cluster, broker_id, None)


# -- the hanging transaction ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """A transactional batch on a partition that no coordinator has in a transaction."""

    transactional_id: str
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    leader: int
    coordinator: int
    timestamp_ms: int  # CreateTime of its records: DescribeProducers' LastTimestamp


def transactional_batch(producer_id: int, producer_epoch: int, *, records: int,
                        timestamp_ms: int) -> bytes:  # fmt: skip
    """A transactional record batch (magic 2, base sequence 0), as a real producer writes."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=0, batch_size=1 << 20,
    )  # fmt: skip
    for offset in range(records):
        builder.append(offset, timestamp=timestamp_ms, key=None, value=b"hanging", headers=[])
    return bytes(builder.build())


def _produce_raw(raw: RawClient, leader: int, transactional_id: str, topic: str,
                 partition: int, batch: bytes) -> int:  # fmt: skip
    """Produce v<=11 with a transactional id and no AddPartitionsToTxn: the base offset."""
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[data(name=topic, partition_data=[
            data.PartitionProduceData(index=partition, records=batch)
        ])],
        max_version=MAX_PRODUCE_VERSION_WITHOUT_IMPLICIT_ADD,
    )  # fmt: skip
    response = raw.send(leader, request)
    result = response.responses[0].partition_responses[0]
    error = kafka_errors.for_code(result.error_code)
    if error is not kafka_errors.NoError:
        raise error(f"raw Produce to {topic}-{partition}: {result.error_message}")
    return int(result.base_offset)


def create_hanging_transaction(
    cluster: KafkaCluster,
    topic: str,
    *,
    partition: int = 0,
    transactional_id: str | None = None,
    records: int = 1,
    backdate_ms: int = 0,
    restore_verification: bool = True,
) -> HangingTransaction:
    """Make a genuinely hanging transaction on ``topic``-``partition``.

    ``backdate_ms`` moves the records' CreateTime into the past, so the transaction is
    late at once (see :data:`DEFAULT_LATE_BACKDATE_MS`). With ``restore_verification``
    False, verification stays off on the leader: call :func:`set_verification` later.
    """
    leader = cluster.leader_of(topic, partition)
    # Coordinator and leader on different brokers when the cluster has more than one.
    txn_id = transactional_id or cluster.transactional_id_coordinated_by("kte-hanging", avoid={leader})
    timestamp_ms = int(time.time() * 1000) - backdate_ms
    set_verification(cluster, leader, False)
    try:
        with RawClient(cluster.bootstrap_servers) as raw:
            coordinator, producer_id, epoch = raw.init_producer_id(txn_id)
            batch = transactional_batch(producer_id, epoch, records=records,
                                        timestamp_ms=timestamp_ms)  # fmt: skip
            offset = _produce_raw(raw, leader, txn_id, topic, partition, batch)
    finally:
        if restore_verification:
            set_verification(cluster, leader, None)
    hanging = HangingTransaction(txn_id, topic, partition, producer_id, epoch, offset,
                                 leader, coordinator, timestamp_ms)  # fmt: skip
    log.info("hanging transaction created: %s", hanging)
    return hanging


def create_partition_not_in_transaction(
    cluster: KafkaCluster,
    topic: str,
    *,
    owned_partition: int,
    hanging_partition: int,
    records: int = 1,
    transaction_timeout_ms: int = 600_000,
) -> HangingTransaction:
    """A hanging transaction whose coordinator has an open transaction WITHOUT its
    partition (reason ``partition_not_in_transaction``), made now (no back-dating):
    InitProducerId, AddPartitionsToTxn for ``owned_partition`` and a transactional write
    there (an ordinary open transaction), then a raw Produce v11 of the same producer to
    ``hanging_partition`` with verification off on its leader. Once the coordinator times
    out the owned part (``transaction_timeout_ms``) the reason becomes
    ``coordinator_not_open``; the hanging partition stays open either way."""
    leader = cluster.leader_of(topic, hanging_partition)
    txn_id = cluster.transactional_id_coordinated_by("kte-notin", avoid={leader})
    with RawClient(cluster.bootstrap_servers) as raw:
        coordinator, producer_id, epoch = raw.init_producer_id(
            txn_id, transaction_timeout_ms=transaction_timeout_ms
        )
        raw.add_partitions_to_txn(txn_id, producer_id, epoch, [(topic, owned_partition)])
        now_ms = int(time.time() * 1000)
        batch = transactional_batch(producer_id, epoch, records=records, timestamp_ms=now_ms)
        _produce_raw(raw, cluster.leader_of(topic, owned_partition), txn_id, topic, owned_partition, batch)
        set_verification(cluster, leader, False)
        try:
            batch = transactional_batch(producer_id, epoch, records=records, timestamp_ms=now_ms)
            offset = _produce_raw(raw, leader, txn_id, topic, hanging_partition, batch)
        finally:
            set_verification(cluster, leader, None)
    hanging = HangingTransaction(txn_id, topic, hanging_partition, producer_id, epoch, offset,
                                 leader, coordinator, now_ms)  # fmt: skip
    log.info("hanging transaction (partition not in the transaction) created: %s", hanging)
    return hanging


# -- the coordinator's timeout (KIP-588) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimedOutTransaction:
    """A transaction seen Ongoing, then aborted by its coordinator's timeout."""

    topic: str
    partition: int
    ongoing: CoordinatorTransaction
    aborted: CoordinatorTransaction

    @property
    def transactional_id(self) -> str:
        return self.ongoing.transactional_id


def wait_for_transaction_state(
    bootstrap_servers: str, transactional_id: str, states: set[str], *, timeout_s: float = 60.0
) -> CoordinatorTransaction:
    """Poll DescribeTransactions until the id is in one of ``states``."""
    deadline = time.monotonic() + timeout_s
    with RawClient(bootstrap_servers) as raw:
        while True:
            described = raw.describe_transaction(transactional_id)
            if described.state in states:
                return described
            if time.monotonic() > deadline:
                raise TimeoutError(f"{transactional_id} still {described.state}, not {states}")
            time.sleep(0.5)


def run_coordinator_timeout(
    bootstrap_servers: str,
    topic: str,
    *,
    partition: int = 0,
    transactional_id: str | None = None,
    transaction_timeout_ms: int = 5_000,
    wait_timeout_s: float = 90.0,
) -> TimedOutTransaction:
    """Begin a transaction, write, then go quiet until the coordinator aborts it.

    The broker notices expired transactions every
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10 s by default).
    """
    txn = OpenTransaction(bootstrap_servers, topic, partition=partition,
                          transactional_id=transactional_id or unique_id("kte-timeout"),
                          transaction_timeout_ms=transaction_timeout_ms)  # fmt: skip
    txn.begin(records=1)
    ongoing = wait_for_transaction_state(bootstrap_servers, txn.transactional_id, {"Ongoing"})
    aborted = wait_for_transaction_state(
        bootstrap_servers, txn.transactional_id, {"CompleteAbort"}, timeout_s=wait_timeout_s
    )
    txn.is_open = False  # the coordinator ended it; the producer is fenced now
    return TimedOutTransaction(topic, partition, ongoing, aborted)


# -- least privilege: a transaction another principal cannot see (issue 10, item 1) -------


def open_invisible_transaction(
    cluster: KafkaCluster,
    topic: str,
    *,
    partition: int = 0,
    records: int = 1,
    transaction_timeout_ms: int = 600_000,
) -> OpenTransaction:
    """A legitimate transaction of :data:`~testbed.acls.APP_USER`, begun and left open.

    Needs a cluster with ``authorizer=True`` and the test SASL users. Grants the
    application's own ACLs (Write/Describe on the ``app-`` transactional-id prefix and on
    ``topic``); a principal whose grant is Describe on another prefix (the team grant) does
    not see the id in ListTransactions, DescribeTransactions answers it
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, yet the partition shows the open transaction to
    anyone with Read on the topic. The caller commits or aborts it (``with`` aborts).
    """
    from testbed import acls

    acls.grant(cluster, acls.application_acls(acls.user(acls.APP_USER), topic))
    txn = OpenTransaction(
        cluster.bootstrap_for(SASL_LISTENER), topic, partition=partition,
        transactional_id=unique_id(acls.APP_TRANSACTIONAL_ID_PREFIX + "orders"),
        transaction_timeout_ms=transaction_timeout_ms,
        client_config=cluster.sasl_client_config(acls.APP_USER),
    )  # fmt: skip
    try:
        txn.begin(records=records)
    except BaseException:
        if txn.is_open:
            txn.abort()
        raise
    return txn


# -- two-phase commit (KIP-939) -------------------------------------------------------------

#: What DescribeTransactions shows as the timeout of a 2PC transaction (Int.MaxValue).
TWO_PHASE_COMMIT_TIMEOUT_MS = 2_147_483_647
#: Broker properties that let a 4.1-4.4 broker serve InitProducerId v6 with Enable2Pc.
TWO_PHASE_COMMIT_BROKER_PROPERTIES = {
    "transaction.two.phase.commit.enable": "true",
    "unstable.api.versions.enable": "true",
}


@dataclass(frozen=True, slots=True)
class TwoPhaseCommitTransaction:
    """An open (prepared, from the client's point of view) 2PC transaction."""

    transactional_id: str
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    leader: int
    coordinator: int


def open_two_phase_commit_transaction(
    cluster: KafkaCluster,
    topic: str,
    *,
    partition: int = 0,
    transactional_id: str | None = None,
    records: int = 1,
    bootstrap_servers: str | None = None,
) -> TwoPhaseCommitTransaction:
    """Open a KIP-939 two-phase-commit transaction and leave it open.

    InitProducerId v6 with Enable2Pc (the coordinator sets the timeout to Int.MaxValue),
    AddPartitionsToTxn for the partition, then a transactional Produce of ``records``
    records: DescribeTransactions shows it Ongoing with TransactionTimeoutMs 2147483647, and
    the coordinator never times it out. A 2PC client "prepares" by flushing and keeping it
    open, so this is what a prepared transaction looks like from the brokers. Needs
    :data:`TWO_PHASE_COMMIT_BROKER_PROPERTIES`; end it with :func:`force_terminate`.
    """
    leader = cluster.leader_of(topic, partition)
    txn_id = transactional_id or cluster.transactional_id_coordinated_by("kte-2pc",
                                                                         avoid={leader})  # fmt: skip
    with RawClient(bootstrap_servers or cluster.bootstrap_servers) as raw:
        coordinator, producer_id, epoch = raw.init_producer_id(txn_id, enable_2pc=True)
        raw.add_partitions_to_txn(txn_id, producer_id, epoch, [(topic, partition)])
        batch = transactional_batch(producer_id, epoch, records=records,
                                    timestamp_ms=int(time.time() * 1000))  # fmt: skip
        offset = _produce_raw(raw, leader, txn_id, topic, partition, batch)
    txn = TwoPhaseCommitTransaction(txn_id, topic, partition, producer_id, epoch, offset,
                                    leader, coordinator)  # fmt: skip
    log.info("two-phase-commit transaction open: %s", txn)
    return txn


def force_terminate(bootstrap_servers: str, transactional_id: str) -> tuple[int, int]:
    """Abort whatever transaction ``transactional_id`` has open, 2PC or not, the way
    Admin.forceTerminateTransaction does (InitProducerId v6, Enable2Pc false, KeepPreparedTxn
    false): the producer is fenced. The coordinator completes the abort before it answers,
    so the id is then Empty with a bumped epoch. Returns ``(producer id, new epoch)``."""
    with RawClient(bootstrap_servers) as raw:
        _, producer_id, epoch = raw.init_producer_id(transactional_id, enable_2pc=False,
                                                     keep_prepared_txn=False)  # fmt: skip
    return producer_id, epoch


# -- KIP-588: timed out by the coordinator, re-initialised at once ------------------------


@dataclass(frozen=True, slots=True)
class ReinitializedTransaction:
    """A transaction the coordinator timed out, and what the producer did right after."""

    topic: str
    partition: int
    ongoing: CoordinatorTransaction  # before the timeout
    aborted: CoordinatorTransaction  # the first state seen after it (bumped epoch)
    final: CoordinatorTransaction  # after the immediate re-init (and new transaction)
    deadline_ms: int  # start time + timeout: when the coordinator may abort it
    reopened: bool

    @property
    def transactional_id(self) -> str:
        return self.ongoing.transactional_id


def run_timeout_then_reinit(
    bootstrap_servers: str,
    topic: str,
    *,
    partition: int = 0,
    transactional_id: str | None = None,
    transaction_timeout_ms: int = 2_000,
    reopen: bool = True,
    poll_interval_s: float = 0.05,
    wait_timeout_s: float = 60.0,
    client_config: Mapping[str, object] | None = None,
) -> tuple[ReinitializedTransaction, OpenTransaction | None]:
    """KIP-588 as a recovering producer lives it.

    Begin a transaction with a short timeout and go quiet; poll DescribeTransactions every
    ``poll_interval_s`` until the coordinator has aborted it (epoch bumped, PrepareAbort or
    CompleteAbort); then at once InitProducerId again with the same id (a new producer
    instance: epoch bumped once more) and, with ``reopen``, begin a new transaction. The id
    spends only milliseconds in PrepareAbort/CompleteAbort, so an observer polling every few
    seconds sees Ongoing, then Empty (``reopen=False``) or a new Ongoing with a higher epoch.

    Returns the observations and the new producer (open when ``reopen``; the caller ends
    it), or None when not reopened.
    """
    txn_id = transactional_id or unique_id("kte-reinit")
    first = OpenTransaction(bootstrap_servers, topic, partition=partition,
                            transactional_id=txn_id,
                            transaction_timeout_ms=transaction_timeout_ms,
                            client_config=client_config)  # fmt: skip
    first.begin(records=1)
    raw_bootstrap = bootstrap_servers
    ongoing = wait_for_transaction_state(raw_bootstrap, txn_id, {"Ongoing"})
    deadline = time.monotonic() + wait_timeout_s
    with RawClient(raw_bootstrap) as raw:
        while True:
            seen = raw.describe_transaction(txn_id)
            if seen.producer_epoch != ongoing.producer_epoch or seen.state != "Ongoing":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{txn_id} not timed out by its coordinator in "
                                   f"{wait_timeout_s} s")  # fmt: skip
            time.sleep(poll_interval_s)
    first.is_open = False  # fenced by the coordinator's abort
    second = OpenTransaction(bootstrap_servers, topic, partition=partition,
                             transactional_id=txn_id, client_config=client_config)  # fmt: skip
    if reopen:
        second.begin(records=1)
    else:
        second.init()
    with RawClient(raw_bootstrap) as raw:
        final = raw.describe_transaction(txn_id)
    result = ReinitializedTransaction(
        topic, partition, ongoing, seen, final,
        deadline_ms=ongoing.start_time_ms + ongoing.timeout_ms, reopened=reopen,
    )  # fmt: skip
    log.info("timed out and re-initialised: %s", result)
    return result, (second if reopen else None)


__all__ = [
    "DEFAULT_LATE_BACKDATE_MS",
    "HangingTransaction",
    "OpenTransaction",
    "ReinitializedTransaction",
    "TimedOutTransaction",
    "TransactionRun",
    "TwoPhaseCommitTransaction",
    "create_hanging_transaction",
    "create_partition_not_in_transaction",
    "force_terminate",
    "open_invisible_transaction",
    "open_two_phase_commit_transaction",
    "produce_plain",
    "run_coordinator_timeout",
    "run_timeout_then_reinit",
    "run_transaction",
    "set_verification",
    "transactional_batch",
    "unique_id",
    "verification_disabled",
    "verification_value",
    "wait_for_transaction_state",
]

"""Every request the exporter and the operator CLI send to Kafka, for one cluster.

confluent-kafka serves metadata, ListOffsets and DescribeConfigs; kafka-python's protocol
layer serves DescribeProducers, ListTransactions, DescribeTransactions, Fetch (the batch at
a transaction's start offset), ApiVersions (feature levels), WriteTxnMarkers (abort) and
InitProducerId (force-terminate). Requests to different brokers are in flight together,
each with the request timeout, so a cycle costs a few round trips whatever the number of
partitions. A failure is returned per broker / partition as a :class:`CollectionError`
next to what succeeded, never raised for the whole batch.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from exporter.kafka.clients import confluent_config, kafka_python_config
from exporter.kafka.errors import (
    AUTHENTICATION_ERRORS,
    KafkaRequestError,
    KafkaUnavailable,
    error_name,
    error_name_for_code,
)
from exporter.model import (
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    BatchTimestamp,
    Broker,
    BrokerConfig,
    CollectionError,
    ListedTransaction,
    PartitionOffsets,
    ProducerState,
    TopicPartition,
    TransactionDescription,
)

log = logging.getLogger(__name__)

_LIBRDKAFKA_LOG = logging.getLogger("exporter.kafka.librdkafka")
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: How long kafka-python's failure path asks librdkafka whether the login was refused.
LOGIN_PROBE_TIMEOUT_S = 2.0
K = TypeVar("K")
T = TypeVar("T")
TRANSACTION_CONFIGS = (
    "transaction.max.timeout.ms",
    "transaction.partition.verification.enable",
    "transaction.two.phase.commit.enable",
)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: tuple[Broker, ...]
    #: (topic, partition) -> leader broker id (-1 when leaderless)
    leaders: Mapping[tuple[str, int], int]
    controller_id: int = -1
    #: (topic, partition) -> replica broker ids (the CLI's ``find-hanging --broker-id``)
    replicas: Mapping[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    #: __transaction_state partitions without a leader: the transactional ids they hold are
    #: listed by no coordinator, so "listed by nobody" proves nothing this cycle.
    leaderless_transaction_state: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Collected(Generic[T]):
    """Rows that were read, and the errors for what was not."""

    rows: tuple[T, ...]
    errors: tuple[CollectionError, ...] = ()


@dataclass(frozen=True, slots=True)
class AbortSpec:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


class ClusterAdmin:
    """Both Kafka clients for one cluster. Thread-compatible: one caller at a time."""

    def __init__(self, *, bootstrap_servers: str, properties: Mapping[str, str] | None = None,
                 request_timeout_ms: int = 10_000) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._properties = dict(properties or {})
        self.request_timeout_ms = request_timeout_ms
        self._confluent: Any = None
        self._kafka: Any = None
        self._closed = False
        #: The last login failure librdkafka reported through its error callback: its
        #: request errors only say the transport failed.
        self._login_failure: str | None = None
        # The collector uses both clients from two threads; kafka-python's must be created once.
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Close both clients for good: later calls raise KafkaUnavailable."""
        self._closed = True
        self._drop_clients()

    def _drop_clients(self) -> None:
        with self._lock:
            self._drop_clients_locked()

    def _drop_clients_locked(self) -> None:
        if self._kafka is not None:
            try:
                self._kafka.close()
            except Exception:  # the client may already be broken; closing must not fail
                log.debug("closing kafka-python admin client failed", exc_info=True)
            self._kafka = None
        self._confluent = None

    def __enter__(self) -> ClusterAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _admin(self) -> Any:
        with self._lock:
            return self._admin_locked()

    def _admin_locked(self) -> Any:
        self._check_open()
        if self._confluent is None:
            from confluent_kafka.admin import AdminClient

            config = confluent_config(self.bootstrap_servers, self._properties,
                                      self.request_timeout_ms)
            config.update(error_cb=self._on_librdkafka_error, logger=_LIBRDKAFKA_LOG)
            try:
                self._confluent = AdminClient(config)
            except Exception as e:  # e.g. an unreadable ssl.ca.location, a missing mechanism
                raise KafkaUnavailable(f"cannot create a Kafka client for {self.bootstrap_servers}"
                                       f": {e}", error=error_name(e)) from e
        return self._confluent

    def _on_librdkafka_error(self, err: Any) -> None:
        name = str(err.name())
        if name in AUTHENTICATION_ERRORS:
            self._login_failure = AUTHENTICATION_ERRORS[name]
            log.warning("login to %s failed: %s", self.bootstrap_servers, err.str())

    def _kafka_client(self) -> Any:
        """kafka-python's admin client, created on first use and again after a failure."""
        with self._lock:
            self._check_open()
            if self._kafka is None:
                self._kafka = self._new_kafka_python_client()
            return self._kafka

    def _new_kafka_python_client(self) -> Any:
        """kafka-python bootstraps in its constructor and retries a failed login until its
        timeout; keep hold of the network client it makes, to name a login failure and to
        stop its I/O thread when the bootstrap fails."""
        from kafka import KafkaAdminClient
        from kafka.net.compat import KafkaNetClient

        made: list[Any] = []

        def network_client(**configs: Any) -> Any:
            made.append(KafkaNetClient(**configs))
            return made[-1]

        config = kafka_python_config(self.bootstrap_servers, self._properties,
                                     self.request_timeout_ms)
        try:
            return KafkaAdminClient(kafka_client=network_client, **config)
        except Exception as e:
            failures = [f for c in made for f in c._manager._auth_failures.values()]
            for c in made:  # as KafkaAdminClient.close() does: the client, then its I/O thread
                c.close()
                c._net.stop()
            error = error_name(failures[0]) if failures else error_name(e)
            if not failures:
                # kafka-python often reports a failed SASL exchange as a lost socket; the
                # other client names it (this costs a little time, on the failure path only).
                error = self._login_failure_seen_by_librdkafka() or error
            raise KafkaUnavailable(f"cannot bootstrap from {self.bootstrap_servers}: {error}: "
                                   f"{failures[0] if failures else e}", error=error) from e

    def _login_failure_seen_by_librdkafka(self) -> str | None:
        if self._login_failure is None:
            try:
                admin = self._admin_locked()
            except KafkaUnavailable:
                return None
            try:
                admin.list_topics(timeout=min(self._timeout_s, LOGIN_PROBE_TIMEOUT_S))
            except Exception:  # only its error callback is of interest here
                admin.poll(0)
        return self._login_failure

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaUnavailable("the admin client is closed")

    @property
    def _timeout_s(self) -> float:
        return self.request_timeout_ms / 1000

    # -- metadata, configs, offsets (confluent-kafka) -----------------------------

    def metadata(self, topic_filter: Callable[[str], bool] | None = None) -> ClusterMetadata:
        """Brokers and partition leaders. Raises KafkaUnavailable when no broker answers."""
        admin = self._admin()
        try:
            md = admin.list_topics(timeout=self._timeout_s)
        except Exception as e:
            admin.poll(0)  # serves librdkafka's error and log callbacks queued meanwhile
            error = self._login_failure or error_name(e)
            raise KafkaUnavailable(f"metadata from {self.bootstrap_servers} failed: {error}",
                                   error=error) from e
        admin.poll(0)
        self._login_failure = None
        brokers = tuple(sorted((Broker(b.id, b.host, b.port) for b in md.brokers.values()),
                               key=lambda b: b.broker_id))
        leaders: dict[tuple[str, int], int] = {}
        replicas: dict[tuple[str, int], tuple[int, ...]] = {}
        state = md.topics.get(TRANSACTION_STATE_TOPIC)
        leaderless_state = tuple(sorted(p for p, m in state.partitions.items() if m.leader < 0)
                                 ) if state is not None and state.error is None else ()
        for name, topic in md.topics.items():
            if topic_filter is not None and not topic_filter(name):
                continue
            if topic.error is not None:
                continue
            for pid, partition in topic.partitions.items():
                leaders[(name, pid)] = partition.leader
                replicas[(name, pid)] = tuple(partition.replicas)
        return ClusterMetadata(brokers=brokers, leaders=leaders,
                               controller_id=getattr(md, "controller_id", -1), replicas=replicas,
                               leaderless_transaction_state=leaderless_state)

    def broker_configs(self, broker_ids: Iterable[int]) -> Collected[BrokerConfig]:
        """Transaction settings of each broker (DescribeConfigs, all brokers at once)."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        resources = {b: ConfigResource(ResourceType.BROKER, str(b)) for b in broker_ids}
        if not resources:
            return Collected(())
        # librdkafka takes one BROKER resource per call; the calls run concurrently.
        admin = self._admin()
        futures = {b: admin.describe_configs([r], request_timeout=self._timeout_s)[r]
                   for b, r in resources.items()}
        rows: list[BrokerConfig] = []
        errors: list[CollectionError] = []
        for broker_id in resources:
            try:
                entries = futures[broker_id].result(timeout=self._timeout_s + 1)
            except Exception as e:
                errors.append(CollectionError("DescribeConfigs", error_name(e), broker_id=broker_id,
                                              message=str(e)[:200]))
                continue
            rows.append(_broker_config(broker_id, {k: v.value for k, v in entries.items()}))
        return Collected(tuple(rows), tuple(errors))

    def offsets(self, partitions: Iterable[tuple[str, int]],
                leaders: Mapping[tuple[str, int], int]) -> Collected[PartitionOffsets]:
        """High watermark and LSO of every partition (ListOffsets latest, both isolations)."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as CTopicPartition
        from confluent_kafka.admin import OffsetSpec

        tps = sorted(set(partitions))
        if not tps:
            return Collected(())
        admin = self._admin()
        request = {CTopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
        pending = {
            "hwm": admin.list_offsets(request, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                      request_timeout=self._timeout_s),
            "lso": admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                      request_timeout=self._timeout_s),
        }
        values: dict[str, dict[tuple[str, int], int]] = {"hwm": {}, "lso": {}}
        errors: dict[tuple[str, int], CollectionError] = {}
        for kind, futures in pending.items():
            for ctp, future in futures.items():
                key = (ctp.topic, ctp.partition)
                try:
                    values[kind][key] = int(future.result(timeout=self._timeout_s + 1).offset)
                except Exception as e:
                    errors.setdefault(key, CollectionError(
                        "ListOffsets", error_name(e), broker_id=leaders.get(key, -1),
                        topic=key[0], partition=key[1]))
        rows = tuple(
            PartitionOffsets(topic=t, partition=p, leader=leaders.get((t, p), -1),
                             high_watermark=values["hwm"].get((t, p), -1),
                             last_stable_offset=values["lso"].get((t, p), -1))
            for t, p in tps
        )
        return Collected(rows, tuple(errors.values()))

    # -- kafka-python protocol requests --------------------------------------------

    def _run(self, coro: Callable[..., Any], *args: Any) -> Any:
        client = self._kafka_client()
        try:
            return client._manager.run(coro, *args)
        except (KafkaUnavailable, KafkaRequestError):
            raise
        except Exception:
            # A broken client (closed loop, lost bootstrap) is rebuilt on the next call.
            self._drop_clients()
            raise

    async def _send_all(self, requests: Sequence[tuple[K, int, Any]]
                        ) -> list[tuple[K, int, Any]]:
        """Send every request at once, then wait for each: (key, broker, response|exception)."""
        client = self._kafka
        if client is None:  # dropped under us by close(): the cycle is being stopped
            raise KafkaUnavailable("the admin client is closed")
        manager = client._manager
        in_flight: list[tuple[K, int, Any]] = []
        for key, broker_id, request in requests:
            try:
                future = manager.send(request, node_id=broker_id,
                                      request_timeout_ms=self.request_timeout_ms)
            except Exception as e:  # unknown broker id, auth failure cached for the node
                manager.cluster.request_update()
                future = e
            in_flight.append((key, broker_id, future))
        results: list[tuple[K, int, Any]] = []
        for key, broker_id, future in in_flight:
            if isinstance(future, BaseException):
                results.append((key, broker_id, future))
                continue
            try:
                response = await manager.wait_for(future, self.request_timeout_ms + 1000)
            except Exception as e:
                response = e
            results.append((key, broker_id, response))
        return results

    def describe_producers(self, partitions_by_broker: Mapping[int, Iterable[tuple[str, int]]]
                           ) -> Collected[ProducerState]:
        """DescribeProducers: one request per broker with all its partitions, all at once."""
        return self._run(self._describe_producers, partitions_by_broker)  # type: ignore[no-any-return]

    async def _describe_producers(self, partitions_by_broker: Mapping[int, Iterable[tuple[str, int]]]
                                  ) -> Collected[ProducerState]:
        from kafka.protocol.admin.transactions import DescribeProducersRequest

        requests = []
        for broker_id, tps in partitions_by_broker.items():
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, partition in tps:
                by_topic[topic].append(partition)
            if by_topic:
                request = DescribeProducersRequest(topics=[
                    DescribeProducersRequest.TopicRequest(name=t, partition_indexes=sorted(ps))
                    for t, ps in sorted(by_topic.items())])
                requests.append((broker_id, broker_id, request))
        rows: list[ProducerState] = []
        errors: list[CollectionError] = []
        for broker_id, _, response in await self._send_all(requests):
            if isinstance(response, BaseException):
                errors.append(CollectionError("DescribeProducers", error_name(response),
                                              broker_id=broker_id, message=str(response)[:200]))
                continue
            for topic in response.topics:
                for part in topic.partitions:
                    if part.error_code != 0:
                        errors.append(CollectionError(
                            "DescribeProducers", error_name_for_code(part.error_code),
                            broker_id=broker_id, topic=topic.name,
                            partition=part.partition_index, message=part.error_message or ""))
                        continue
                    rows.extend(ProducerState(
                        topic=topic.name, partition=part.partition_index, broker_id=broker_id,
                        producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                        last_sequence=p.last_sequence, last_timestamp_ms=p.last_timestamp,
                        coordinator_epoch=p.coordinator_epoch,
                        current_txn_start_offset=p.current_txn_start_offset,
                    ) for p in part.active_producers)
        return Collected(tuple(rows), tuple(errors))

    def list_transactions(self, broker_ids: Iterable[int], *, states: Sequence[str] = (),
                          producer_ids: Sequence[int] = (), min_duration_ms: int | None = None,
                          transactional_id_pattern: str | None = None,
                          ) -> Collected[ListedTransaction]:
        """ListTransactions on every broker (each coordinates some transactional ids)."""
        return self._run(self._list_transactions, list(broker_ids), list(states),  # type: ignore[no-any-return]
                         list(producer_ids), min_duration_ms, transactional_id_pattern)

    async def _list_transactions(self, broker_ids: list[int], states: list[str],
                                 producer_ids: list[int], min_duration_ms: int | None,
                                 pattern: str | None) -> Collected[ListedTransaction]:
        from kafka.protocol.admin.transactions import ListTransactionsRequest

        kwargs: dict[str, Any] = {"state_filters": states, "producer_id_filters": producer_ids}
        if min_duration_ms is not None:
            kwargs.update(duration_filter=min_duration_ms, min_version=1)
        if pattern is not None:
            kwargs.update(transactional_id_pattern=pattern, min_version=2)
        requests = [(b, b, ListTransactionsRequest(**kwargs)) for b in broker_ids]
        rows: list[ListedTransaction] = []
        errors: list[CollectionError] = []
        for broker_id, _, response in await self._send_all(requests):
            if isinstance(response, BaseException):
                errors.append(CollectionError("ListTransactions", error_name(response),
                                              broker_id=broker_id, message=str(response)[:200]))
                continue
            if response.error_code != 0:
                errors.append(CollectionError("ListTransactions",
                                              error_name_for_code(response.error_code),
                                              broker_id=broker_id))
                continue
            rows.extend(ListedTransaction(broker_id, t.transactional_id, t.producer_id,
                                          t.transaction_state)
                        for t in response.transaction_states)
        return Collected(tuple(rows), tuple(errors))

    def describe_transactions(self, ids_by_coordinator: Mapping[int, Iterable[str]]
                              ) -> Collected[TransactionDescription]:
        """DescribeTransactions, one request per coordinator, all at once."""
        return self._run(self._describe_transactions, ids_by_coordinator)  # type: ignore[no-any-return]

    async def _describe_transactions(self, ids_by_coordinator: Mapping[int, Iterable[str]]
                                     ) -> Collected[TransactionDescription]:
        from kafka.protocol.admin.transactions import DescribeTransactionsRequest

        requests = [(c, c, DescribeTransactionsRequest(transactional_ids=sorted(set(ids))))
                    for c, ids in ids_by_coordinator.items() if ids]
        rows: list[TransactionDescription] = []
        errors: list[CollectionError] = []
        for coordinator, _, response in await self._send_all(requests):
            if isinstance(response, BaseException):
                errors.append(CollectionError("DescribeTransactions", error_name(response),
                                              broker_id=coordinator, message=str(response)[:200]))
                continue
            for t in response.transaction_states:
                error = error_name_for_code(t.error_code) if t.error_code else None
                if error is not None and error != "TRANSACTIONAL_ID_NOT_FOUND":
                    errors.append(CollectionError("DescribeTransactions", error,
                                                  broker_id=coordinator))
                rows.append(TransactionDescription(
                    coordinator_id=coordinator, transactional_id=t.transactional_id, error=error,
                    state=t.transaction_state or "", timeout_ms=t.transaction_timeout_ms,
                    start_time_ms=t.transaction_start_time_ms, producer_id=t.producer_id,
                    producer_epoch=t.producer_epoch,
                    partitions=tuple(TopicPartition(tp.topic, p)
                                     for tp in t.topics for p in tp.partitions),
                ))
        return Collected(tuple(rows), tuple(errors))

    def find_transaction_coordinators(self, transactional_ids: Iterable[str]) -> dict[str, int]:
        """FindCoordinator(TRANSACTION) for each id; raises KafkaRequestError on failure."""
        ids = sorted(set(transactional_ids))
        if not ids:
            return {}
        from kafka.protocol.metadata import CoordinatorType

        client = self._kafka_client()
        try:
            found: dict[str, int] = self._run(client._find_coordinator_ids, ids,
                                              CoordinatorType.TRANSACTION)
        except KafkaUnavailable:
            raise
        except Exception as e:
            raise KafkaRequestError("FindCoordinator", error_name(e), message=str(e)) from e
        return found

    def transaction_version(self) -> int:
        """The finalized transaction.version feature level, -1 when the broker has none."""
        client = self._kafka_client()
        try:
            features = self._run(client._async_describe_features, False)
        except KafkaUnavailable:
            raise
        except Exception as e:
            raise KafkaRequestError("ApiVersions", error_name(e), message=str(e)) from e
        finalized = features.get("transaction.version", {}).get("finalized")
        return int(finalized[1]) if finalized else -1

    def batch_timestamps(self, offsets_by_broker: Mapping[int, Iterable[tuple[str, int, int]]]
                         ) -> Collected[BatchTimestamp]:
        """The timestamp of the batch at each (topic, partition, offset): one Fetch per leader."""
        return self._run(self._batch_timestamps, offsets_by_broker)  # type: ignore[no-any-return]

    async def _batch_timestamps(self, offsets_by_broker: Mapping[int, Iterable[tuple[str, int, int]]]
                                ) -> Collected[BatchTimestamp]:
        from kafka.protocol.consumer.fetch import FetchRequest

        # One Fetch per wanted offset, all in flight together: a broker returns a batch
        # larger than partition_max_bytes only for the first partition of a request, and
        # one byte is all we ask for. Only open transactions the coordinator does not
        # cover need this, and each is read once (the collector caches the timestamps).
        requests = []
        for broker_id, items in offsets_by_broker.items():
            for topic, partition, offset in sorted(set(items)):
                request = FetchRequest(
                    replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1,
                    isolation_level=0, session_id=0, session_epoch=-1,
                    topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                        FetchRequest.FetchTopic.FetchPartition(
                            partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1)])],
                    forgotten_topics_data=[], rack_id="", min_version=4, max_version=12)
                requests.append(({(topic, partition): offset}, broker_id, request))
        rows: list[BatchTimestamp] = []
        errors: list[CollectionError] = []
        for wanted, broker_id, response in await self._send_all(requests):
            if isinstance(response, BaseException):
                errors.append(CollectionError("Fetch", error_name(response), broker_id=broker_id,
                                              message=str(response)[:200]))
                continue
            for topic in response.responses:
                for part in topic.partitions:
                    key = (topic.topic, part.partition_index)
                    if part.error_code != 0:
                        errors.append(CollectionError("Fetch", error_name_for_code(part.error_code),
                                                      broker_id=broker_id, topic=key[0],
                                                      partition=key[1]))
                        continue
                    ts = _first_batch_timestamp(part.records, wanted.get(key, -1))
                    if ts is not None:
                        rows.append(BatchTimestamp(key[0], key[1], wanted[key], ts))
        return Collected(tuple(rows), tuple(errors))

    # -- actions (operator CLI) ----------------------------------------------------

    def abort_transaction(self, spec: AbortSpec, leader: int) -> None:
        """WriteTxnMarkers(ABORT) to the partition leader, as Kafka's admin abort does."""
        self._run(self._abort, spec, leader)

    async def _abort(self, spec: AbortSpec, leader: int) -> None:
        from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

        marker = WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=spec.producer_id, producer_epoch=spec.producer_epoch,
            transaction_result=False, coordinator_epoch=spec.coordinator_epoch,
            topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                name=spec.topic, partition_indexes=[spec.partition])])
        [(_, _, response)] = await self._send_all(
            [(None, leader, WriteTxnMarkersRequest(markers=[marker]))])
        if isinstance(response, BaseException):
            raise KafkaRequestError("WriteTxnMarkers", error_name(response), broker_id=leader,
                                    message=str(response))
        for result in response.markers:
            for topic in result.topics:
                for part in topic.partitions:
                    if part.error_code != 0:
                        raise KafkaRequestError("WriteTxnMarkers",
                                                error_name_for_code(part.error_code),
                                                broker_id=leader)

    def force_terminate(self, transactional_id: str, coordinator: int) -> tuple[int, int]:
        """InitProducerId(keepPreparedTxn=false) for the id: fences its producer and aborts its
        open transaction (KIP-939 forceTerminateTransaction). Returns (producer id, epoch)."""
        return self._run(self._force_terminate, transactional_id, coordinator)  # type: ignore[no-any-return]

    async def _force_terminate(self, transactional_id: str, coordinator: int) -> tuple[int, int]:
        from kafka.protocol.producer.transaction import InitProducerIdRequest

        # The coordinator answers CONCURRENT_TRANSACTIONS while it aborts; ask again.
        for _ in range(50):
            request = InitProducerIdRequest(transactional_id=transactional_id,
                                            transaction_timeout_ms=60_000, producer_id=-1,
                                            producer_epoch=-1, enable2_pc=False,
                                            keep_prepared_txn=False)
            [(_, _, response)] = await self._send_all([(None, coordinator, request)])
            if isinstance(response, BaseException):
                raise KafkaRequestError("InitProducerId", error_name(response),
                                        broker_id=coordinator, message=str(response))
            if response.error_code == 0:
                return int(response.producer_id), int(response.producer_epoch)
            error = error_name_for_code(response.error_code)
            if error not in ("CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS"):
                raise KafkaRequestError("InitProducerId", error, broker_id=coordinator)
            await self._kafka_client()._net.sleep(0.2)
        raise KafkaRequestError("InitProducerId", "CONCURRENT_TRANSACTIONS", broker_id=coordinator,
                                message="the coordinator kept the transaction busy for 10 s")


def _broker_config(broker_id: int, values: Mapping[str, str | None]) -> BrokerConfig:
    def flag(name: str, default: bool) -> bool:
        value = values.get(name)
        return default if value is None else value.strip().lower() == "true"

    timeout = values.get("transaction.max.timeout.ms")
    return BrokerConfig(
        broker_id=broker_id,
        transaction_max_timeout_ms=int(timeout) if timeout else DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
        verification_enabled=flag("transaction.partition.verification.enable", True),
        two_phase_commit_enabled=flag("transaction.two.phase.commit.enable", False),
    )


def _first_batch_timestamp(records: bytes | None, offset: int) -> int | None:
    """Timestamp of the batch holding ``offset``: its first record's CreateTime, or the
    append time on LogAppendTime topics."""
    if not records:
        return None
    from kafka.record import MemoryRecords

    batches = MemoryRecords(records)
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None:
            break
        last_offset = batch.base_offset + batch.last_offset_delta
        if last_offset < offset:
            continue
        if batch.timestamp_type == 1:  # LogAppendTime: the broker stamped the batch
            return int(batch.max_timestamp)
        return int(batch.first_timestamp)
    return None

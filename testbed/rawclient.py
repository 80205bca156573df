"""A blocking raw-protocol client on kafka-python's network layer, for requests that no
regular client sends (a Produce without AddPartitionsToTxn, on purpose)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import kafka.errors as kafka_errors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin import DescribeTransactionsRequest
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest, InitProducerIdRequest

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS = 30_000
#: InitProducerId v6 (KIP-939) carries Enable2Pc and KeepPreparedTxn; brokers offer it only
#: with ``unstable.api.versions.enable=true`` (Kafka 4.1-4.4).
INIT_PRODUCER_ID_2PC_VERSION = 6
#: The last client-side AddPartitionsToTxn version (v4+ is the broker-to-broker batch form).
ADD_PARTITIONS_CLIENT_VERSION = 3


@dataclass(frozen=True, slots=True)
class CoordinatorTransaction:
    """DescribeTransactions of one transactional id, as its coordinator sees it."""

    coordinator_id: int
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[tuple[str, int], ...]


class RawClient:
    """Send one request to one broker and wait for its response."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "kte-testbed") -> None:
        self._client = KafkaNetClient(
            bootstrap_servers=bootstrap_servers.split(","),
            client_id=client_id,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        self._client.check_version(timeout_ms=REQUEST_TIMEOUT_MS)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def send(self, node_id: int, request: Any, *, timeout_ms: int = REQUEST_TIMEOUT_MS) -> Any:
        """Send ``request`` to broker ``node_id``; return the decoded response."""
        return self._client.send_and_receive(node_id, request, timeout_ms=timeout_ms)

    def any_node(self) -> int:
        nodes = sorted(b.node_id for b in self._client.cluster.brokers())
        if not nodes:
            raise kafka_errors.NoBrokersAvailable()
        return int(nodes[0])

    def find_transaction_coordinator(self, transactional_id: str) -> int:
        """FindCoordinator(TRANSACTION); retries while the coordinator is loading."""
        request = FindCoordinatorRequest(
            key=transactional_id, key_type=CoordinatorType.TRANSACTION.value, max_version=3
        )
        for _ in range(60):
            response = self.send(self.any_node(), request)
            error = kafka_errors.for_code(response.error_code)
            if error is kafka_errors.NoError:
                node_id: int = response.node_id
                return node_id
            if not error.retriable:
                raise error(response.error_message)
            log.debug("FindCoordinator %s: %s, retrying", transactional_id, error.__name__)
            self._client.poll(timeout_ms=500)
        raise kafka_errors.CoordinatorNotAvailableError(transactional_id)

    def _retry_on_coordinator(self, transactional_id: str, request: Any) -> tuple[int, Any]:
        """Send ``request`` to the id's coordinator, retrying retriable top-level errors."""
        for _ in range(60):
            coordinator = self.find_transaction_coordinator(transactional_id)
            response = self.send(coordinator, request)
            error = kafka_errors.for_code(_error_code(response))
            if error is kafka_errors.NoError:
                return coordinator, response
            if not error.retriable:
                raise error(f"{type(request).__name__} for {transactional_id}")
            log.debug("%s %s: %s, retrying", type(request).__name__, transactional_id,
                      error.__name__)  # fmt: skip
            self._client.poll(timeout_ms=500)
        raise kafka_errors.KafkaTimeoutError(f"{type(request).__name__} for {transactional_id}")

    def init_producer_id(
        self,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = 60_000,
        enable_2pc: bool | None = None,
        keep_prepared_txn: bool = False,
    ) -> tuple[int, int, int]:
        """InitProducerId for a transactional id: ``(coordinator, producer id, epoch)``.

        ``enable_2pc`` (True or False) sends version 6 exactly (KIP-939; it fails with
        UnsupportedVersion when the broker does not offer it), with Enable2Pc and
        KeepPreparedTxn; ``None`` sends up to version 4, as the test bed always did.
        ``enable_2pc=False, keep_prepared_txn=False`` is what Admin.forceTerminateTransaction
        sends: it fences the producer and aborts its open transaction.
        """
        if enable_2pc is None:
            request = InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
                max_version=4,
            )
        else:
            request = InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
                enable2_pc=enable_2pc,
                keep_prepared_txn=keep_prepared_txn,
                min_version=INIT_PRODUCER_ID_2PC_VERSION,
                max_version=INIT_PRODUCER_ID_2PC_VERSION,
            )
        coordinator, response = self._retry_on_coordinator(transactional_id, request)
        return coordinator, int(response.producer_id), int(response.producer_epoch)

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> None:
        """AddPartitionsToTxn (client form, v<=3) at the id's coordinator; raises on the
        first partition error."""
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        add_topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=producer_epoch,
            v3_and_below_topics=[add_topic(name=t, partitions=ps) for t, ps in topics.items()],
            max_version=ADD_PARTITIONS_CLIENT_VERSION,
        )
        for _ in range(60):
            coordinator = self.find_transaction_coordinator(transactional_id)
            response = self.send(coordinator, request)
            errors = {
                (topic.name, result.partition_index): kafka_errors.for_code(
                    result.partition_error_code)
                for topic in response.results_by_topic_v3_and_below
                for result in topic.results_by_partition
            }  # fmt: skip
            failed = {tp: e for tp, e in errors.items() if e is not kafka_errors.NoError}
            if not failed:
                return
            if not all(e.retriable for e in failed.values()):
                raise next(iter(failed.values()))(f"AddPartitionsToTxn {transactional_id}: "
                                                  f"{failed}")  # fmt: skip
            log.debug("AddPartitionsToTxn %s: %s, retrying", transactional_id, failed)
            self._client.poll(timeout_ms=300)
        raise kafka_errors.KafkaTimeoutError(f"AddPartitionsToTxn for {transactional_id}")

    def api_version_range(self, node_id: int, api_key: int) -> tuple[int, int] | None:
        """``(min, max)`` version a broker offers for an API key (ApiVersions)."""
        from kafka.protocol.metadata import ApiVersionsRequest

        response = self.send(node_id, ApiVersionsRequest(max_version=3))
        for api in response.api_keys:
            if api.api_key == api_key:
                return int(api.min_version), int(api.max_version)
        return None

    def describe_transaction(self, transactional_id: str) -> CoordinatorTransaction:
        """DescribeTransactions for one id, sent to its coordinator."""
        request = DescribeTransactionsRequest(transactional_ids=[transactional_id])
        coordinator, response = self._retry_on_coordinator(transactional_id, request)
        state = response.transaction_states[0]
        return CoordinatorTransaction(
            coordinator_id=coordinator,
            transactional_id=state.transactional_id,
            state=state.transaction_state,
            producer_id=state.producer_id,
            producer_epoch=state.producer_epoch,
            timeout_ms=state.transaction_timeout_ms,
            start_time_ms=state.transaction_start_time_ms,
            partitions=tuple((topic.topic, p) for topic in state.topics for p in topic.partitions),
        )


def _error_code(response: Any) -> int:
    """Top-level error of a response; DescribeTransactions carries it per id."""
    if hasattr(response, "transaction_states"):
        return int(response.transaction_states[0].error_code)
    return int(response.error_code)

"""Every request the exporter and the operator CLI send to Kafka, for one cluster.

:class:`ClusterAdmin` owns the two clients of one cluster and hands them to the request
families, one module each:

* ``metadata``: Metadata (brokers, leaders, replicas), confluent-kafka;
* ``offsets``: ListOffsets (high watermark and LSO through the kafka-python protocol; log
  start offsets, read on demand, through confluent-kafka);
* ``configs``: DescribeConfigs (confluent-kafka) and ApiVersions (``transaction.version``);
* ``producers``: DescribeProducers;
* ``transactions``: ListTransactions, DescribeTransactions, FindCoordinator and the
  visibility probe;
* ``fetch``: Fetch (the batch at an open transaction's start offset);
* ``markers``: the CLI's writes, WriteTxnMarkers and InitProducerId.

Each family returns :class:`~exporter.kafka.results.Collected` rows built through the one
error path in ``results`` (a failure per broker / partition, named as Kafka names it, next to
what succeeded); every access to kafka-python's internals is in ``_protocol`` (all families
but the confluent-kafka ones send through it). Adding an admin API: a function in its
family's module, a method here, and (when read every cycle) a stage in ``collector``.
Requests to different brokers are in flight together. Every read takes an optional
``deadline`` (a :func:`time.monotonic` value): its request timeout is shortened to the time
left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from exporter.kafka import configs as _configs
from exporter.kafka import fetch as _fetch
from exporter.kafka import markers as _markers
from exporter.kafka import metadata as _metadata
from exporter.kafka import offsets as _offsets
from exporter.kafka import producers as _producers
from exporter.kafka import transactions as _transactions
from exporter.kafka._protocol import ProtocolClient
from exporter.kafka.clients import confluent_config, kafka_python_config
from exporter.kafka.configs import TRANSACTION_CONFIGS
from exporter.kafka.errors import (
    AUTHENTICATION_ERRORS,
    KafkaRequestError,
    KafkaUnavailable,
    error_name,
)
from exporter.kafka.librdkafka_log import LibrdkafkaLog
from exporter.kafka.markers import AbortSpec
from exporter.kafka.metadata import TRANSACTION_STATE_TOPIC, ClusterMetadata, cluster_metadata
from exporter.kafka.results import Collected, remaining_s, timeout_ms
from exporter.model import (
    BatchTimestamp,
    BrokerConfig,
    ListedTransaction,
    PartitionOffsets,
    ProducerState,
    TransactionDescription,
)

log = logging.getLogger(__name__)

#: How long kafka-python's failure path asks librdkafka whether the login was refused.
LOGIN_PROBE_TIMEOUT_S = 2.0
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
#: Between a Metadata attempt that timed out and the next: librdkafka's request-timeout scan
#: runs once a second and drops the silent broker's connection (``_list_topics``).
METADATA_RETRY_GAP_S = 1.1
#: The shortest Metadata attempt worth splitting the wait for.
METADATA_MIN_ATTEMPT_S = 0.5
#: How long close() waits for a kafka-python bootstrap in flight before leaving it to close
#: its own client.
CLOSE_WAIT_S = 1.0
R = TypeVar("R")


class ClusterAdmin:
    """Both Kafka clients for one cluster.

    Safe to call from several threads at once (the collector overlaps independent stages):
    each client is created once, under its own lock, and both clients are thread-safe.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        properties: Mapping[str, str] | None = None,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        name: str | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._properties = dict(properties or {})
        self.request_timeout_ms = request_timeout_ms
        #: How log lines name the cluster (its bootstrap servers unless given).
        self.name = name or bootstrap_servers
        self._confluent: Any = None
        self._protocol_client: ProtocolClient | None = None
        self._closed = False
        #: The last login failure librdkafka reported through its error callback: its
        #: request errors only say the transport failed.
        self._login_failure: str | None = None
        self._librdkafka_log = LibrdkafkaLog(self.name)
        self._confluent_lock = threading.Lock()
        self._protocol_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Close both clients for good: later calls raise KafkaUnavailable."""
        self._closed = True
        # A bootstrap in flight holds the lock until its timeout; it closes what it made
        # itself when it sees the admin closed, so a stop need not wait for it.
        if self._protocol_lock.acquire(timeout=CLOSE_WAIT_S):
            try:
                self._drop_protocol_locked(None)
            finally:
                self._protocol_lock.release()
        with self._confluent_lock:
            self._confluent = None

    def release(self) -> None:
        """Close both clients but stay open: the next request makes them again. A daemon
        watching more clusters than it keeps connected calls this between two cycles, so an
        idle cluster holds no thread and no socket (librdkafka runs a thread per broker)."""
        if self._protocol_lock.acquire(timeout=CLOSE_WAIT_S):
            try:
                self._drop_protocol_locked(None)
            finally:
                self._protocol_lock.release()
        with self._confluent_lock:
            self._confluent = None

    def begin_cycle(self) -> None:
        """A new cycle: every broker gets one fresh attempt, whatever reconnect backoff the
        last failures left (see :meth:`ProtocolClient.forget_backoff`). librdkafka needs no
        help: its requests wait for the connection within their timeout."""
        with self._protocol_lock:
            client = self._protocol_client
        if client is None:
            return
        try:
            client.forget_backoff()
        except Exception:  # a broken client is dropped and rebuilt by the next request
            log.debug("cluster %s: forgetting kafka-python's backoff failed", self.name, exc_info=True)

    def __enter__(self) -> ClusterAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaUnavailable("the admin client is closed")

    @property
    def _timeout_s(self) -> float:
        return self.request_timeout_ms / 1000

    # -- confluent-kafka -----------------------------------------------------------

    def _admin(self) -> Any:
        with self._confluent_lock:
            return self._admin_locked()

    def _admin_locked(self) -> Any:
        self._check_open()
        if self._confluent is None:
            from confluent_kafka.admin import AdminClient

            config = confluent_config(self.bootstrap_servers, self._properties, self.request_timeout_ms)
            config.update(error_cb=self._on_librdkafka_error, logger=self._librdkafka_log)
            try:
                self._confluent = AdminClient(config)
            except Exception as e:  # e.g. an unreadable ssl.ca.location, a missing mechanism
                raise KafkaUnavailable(
                    f"cannot create a Kafka client for {self.bootstrap_servers}: {e}", error=error_name(e)
                ) from e
        return self._confluent

    def _on_librdkafka_error(self, err: Any) -> None:
        name = str(err.name())
        if name in AUTHENTICATION_ERRORS:
            self._login_failure = AUTHENTICATION_ERRORS[name]
            log.warning("login to %s failed: %s", self.bootstrap_servers, err.str())

    def _login_failure_seen_by_librdkafka(self) -> str | None:
        if self._login_failure is None:
            try:
                admin = self._admin()
            except KafkaUnavailable:
                return None
            try:
                admin.list_topics(timeout=min(self._timeout_s, LOGIN_PROBE_TIMEOUT_S))
            except Exception:  # only its error callback is of interest here
                admin.poll(0)
        return self._login_failure

    # -- kafka-python ----------------------------------------------------------------

    def _kafka_client(self, deadline: float | None = None) -> ProtocolClient:
        """kafka-python's client, created on first use and again after a failure."""
        with self._protocol_lock:
            self._check_open()
            if self._protocol_client is None:
                config = kafka_python_config(
                    self.bootstrap_servers, self._properties, self.request_timeout_ms
                )
                config["bootstrap_timeout_ms"] = timeout_ms(self.request_timeout_ms, deadline, "Metadata")
                client = ProtocolClient.connect(config, login_failure=self._login_failure_seen_by_librdkafka)
                if self._closed:  # closed while bootstrapping
                    client.close()
                    self._check_open()
                self._protocol_client = client
            return self._protocol_client

    def _drop_protocol_locked(self, broken: ProtocolClient | None) -> None:
        client = self._protocol_client
        if client is None or (broken is not None and client is not broken):
            return
        self._protocol_client = None
        try:
            client.close()
        except Exception:  # the client may already be broken; closing must not fail
            log.debug("closing kafka-python admin client failed", exc_info=True)

    def _protocol(self, call: Callable[[ProtocolClient], R], deadline: float | None = None) -> R:
        client = self._kafka_client(deadline)
        try:
            return call(client)
        except (KafkaUnavailable, KafkaRequestError):
            raise
        except Exception:
            # A broken client (closed loop, lost bootstrap) is rebuilt on the next call.
            with self._protocol_lock:
                self._drop_protocol_locked(client)
            raise

    # -- reads ---------------------------------------------------------------------

    def metadata(
        self,
        topic_filter: Callable[[str], bool] | None = None,
        *,
        expect: Iterable[str] = (),
        deadline: float | None = None,
    ) -> ClusterMetadata:
        """Brokers and partition leaders. Raises KafkaUnavailable when no broker answers.

        ``expect``: topics that should be in the listing; those it leaves out are asked for by
        name (without auto-creation), and the ones Kafka refuses are ``refused_topics``.
        """
        admin = self._admin()
        try:
            md = self._list_topics(admin, deadline)
        except Exception as e:
            admin.poll(0)  # serves librdkafka's error and log callbacks queued meanwhile
            error = self._login_failure or error_name(e)
            raise KafkaUnavailable(
                f"metadata from {self.bootstrap_servers} failed: {error}", error=error
            ) from e
        admin.poll(0)
        self._login_failure = None
        metadata = cluster_metadata(md, topic_filter)
        missing = sorted({name for name in expect if name not in md.topics})
        if not missing:
            return metadata
        wait_ms = timeout_ms(self.request_timeout_ms, deadline, "Metadata")
        return replace(metadata, refused_topics=_metadata.refused_topics(admin, missing, wait_ms))

    def _list_topics(self, admin: Any, deadline: float | None) -> Any:
        """Metadata from any broker, tried a second time when the first broker does not
        answer. librdkafka sends Metadata to one connected broker of its choosing; a broker
        that accepts connections but never answers (stopped, frozen in a pause) keeps being
        chosen until librdkafka drops the connection, at its next request-timeout scan (once
        a second) after the request timed out. So the first attempt gets at most half of
        what the wait allows, and the second one starts after that scan: another broker
        answers it, and one silent broker of several never costs the whole cycle."""
        left = remaining_s(deadline)
        retry_fits = left is None or left >= METADATA_RETRY_GAP_S + 2 * METADATA_MIN_ATTEMPT_S
        first_ms = timeout_ms(self.request_timeout_ms, deadline, "Metadata")
        if left is not None and retry_fits:
            first_ms = min(first_ms, int((left - METADATA_RETRY_GAP_S) / 2 * 1000))
        try:
            return admin.list_topics(timeout=first_ms / 1000)
        except Exception as e:
            if not retry_fits or error_name(e) != "REQUEST_TIMED_OUT":
                raise
            log.info("metadata: no answer in %d ms, asking again", first_ms)
        time.sleep(METADATA_RETRY_GAP_S)
        return admin.list_topics(timeout=timeout_ms(self.request_timeout_ms, deadline, "Metadata") / 1000)

    def transaction_state_leaders(self, *, deadline: float | None = None) -> dict[int, int]:
        """``{partition: leader}`` of ``__transaction_state``, read now (Metadata for that topic
        alone). Raises KafkaRequestError when the broker does not answer."""
        admin = self._admin()
        try:
            wait_s = timeout_ms(self.request_timeout_ms, deadline, "Metadata") / 1000
            md = admin.list_topics(topic=_metadata.TRANSACTION_STATE_TOPIC, timeout=wait_s)
        except Exception as e:
            raise KafkaRequestError("Metadata", error_name(e)) from e
        finally:
            admin.poll(0)
        return _metadata.transaction_state_leaders(md)

    def broker_configs(
        self, broker_ids: Iterable[int], *, deadline: float | None = None
    ) -> Collected[BrokerConfig]:
        """Transaction settings of each broker (DescribeConfigs, all brokers at once)."""
        ids = list(broker_ids)
        if not ids:
            return Collected(())
        return _configs.broker_configs(self._admin(), ids, self.request_timeout_ms, deadline)

    def offsets(
        self,
        partitions: Iterable[tuple[str, int]],
        leaders: Mapping[tuple[str, int], int],
        *,
        deadline: float | None = None,
    ) -> Collected[PartitionOffsets]:
        """High watermark and LSO of every partition (ListOffsets latest, both isolations)."""
        tps = list(partitions)
        if not tps:
            return Collected(())
        return self._protocol(
            lambda c: _offsets.partition_offsets(c, tps, leaders, self.request_timeout_ms, deadline),
            deadline,
        )

    def log_start_offsets(
        self,
        partitions: Iterable[tuple[str, int]],
        leaders: Mapping[tuple[str, int], int],
        *,
        deadline: float | None = None,
    ) -> Collected[tuple[str, int, int]]:
        """The log start offset of each partition (ListOffsets earliest): (topic, partition,
        offset) rows."""
        return _offsets.log_start_offsets(
            self._admin(), partitions, leaders, self.request_timeout_ms, deadline
        )

    def describe_producers(
        self, partitions_by_broker: Mapping[int, Iterable[tuple[str, int]]], *, deadline: float | None = None
    ) -> Collected[ProducerState]:
        """DescribeProducers: one request per broker with all its partitions, all at once."""
        return self._protocol(
            lambda c: _producers.describe_producers(
                c, partitions_by_broker, self.request_timeout_ms, deadline
            ),
            deadline,
        )

    def list_transactions(
        self,
        broker_ids: Iterable[int],
        *,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        min_duration_ms: int | None = None,
        transactional_id_pattern: str | None = None,
        deadline: float | None = None,
    ) -> Collected[ListedTransaction]:
        """ListTransactions on every broker (each coordinates some transactional ids)."""
        ids = list(broker_ids)
        return self._protocol(
            lambda c: _transactions.list_transactions(
                c,
                ids,
                states=states,
                producer_ids=producer_ids,
                min_duration_ms=min_duration_ms,
                transactional_id_pattern=transactional_id_pattern,
                request_timeout_ms=self.request_timeout_ms,
                deadline=deadline,
            ),
            deadline,
        )

    def describe_transactions(
        self, ids_by_coordinator: Mapping[int, Iterable[str]], *, deadline: float | None = None
    ) -> Collected[TransactionDescription]:
        """DescribeTransactions, one request per coordinator, all at once."""
        return self._protocol(
            lambda c: _transactions.describe_transactions(
                c, ids_by_coordinator, self.request_timeout_ms, deadline
            ),
            deadline,
        )

    def find_transaction_coordinators(self, transactional_ids: Iterable[str]) -> dict[str, int]:
        """FindCoordinator(TRANSACTION) for each id; raises KafkaRequestError on failure."""
        ids = sorted(set(transactional_ids))
        if not ids:
            return {}
        return self._protocol(lambda c: _transactions.find_coordinator_ids(c, ids, self.request_timeout_ms))

    def probe_visibility(self, *, deadline: float | None = None) -> Collected[bool]:
        """Whether this principal may Describe every transactional id: one row, or the error
        that left it unknown (see :mod:`exporter.kafka.transactions`)."""
        return self._protocol(
            lambda c: _transactions.probe_visibility(c, self.request_timeout_ms, deadline), deadline
        )

    def transaction_version(self, *, deadline: float | None = None) -> int:
        """The finalized transaction.version feature level, -1 when the cluster has none."""
        return self._protocol(
            lambda c: _configs.transaction_version(c, self.request_timeout_ms, deadline), deadline
        )

    def batch_timestamps(
        self,
        offsets_by_broker: Mapping[int, Iterable[tuple[str, int, int]]],
        *,
        deadline: float | None = None,
    ) -> Collected[BatchTimestamp]:
        """The timestamp of the batch at each (topic, partition, offset): one Fetch each."""
        return self._protocol(
            lambda c: _fetch.batch_timestamps(c, offsets_by_broker, self.request_timeout_ms, deadline),
            deadline,
        )

    # -- actions (operator CLI) ----------------------------------------------------

    def abort_transaction(self, spec: AbortSpec, leader: int) -> None:
        """WriteTxnMarkers(ABORT) to the partition leader, as Kafka's admin abort does."""
        self._protocol(lambda c: _markers.write_abort_marker(c, spec, leader, self.request_timeout_ms))

    def force_terminate(self, transactional_id: str, coordinator: int) -> tuple[int, int]:
        """InitProducerId(keepPreparedTxn=false) for the id: fences its producer and aborts its
        open transaction (KIP-939 forceTerminateTransaction). Returns (producer id, epoch).
        Raises KafkaRequestError; its ``retriable`` says whether trying again may help."""
        return self._protocol(
            lambda c: _markers.force_terminate(c, transactional_id, coordinator, self.request_timeout_ms)
        )


__all__ = [
    "LOGIN_PROBE_TIMEOUT_S",
    "TRANSACTION_CONFIGS",
    "TRANSACTION_STATE_TOPIC",
    "AbortSpec",
    "ClusterAdmin",
    "ClusterMetadata",
    "Collected",
    "KafkaRequestError",
    "KafkaUnavailable",
]

"""One collection cycle: everything the pipeline needs from one cluster, as a snapshot.

Stages, each timed: metadata -> (configs and offsets over confluent-kafka) in parallel with
(producers and transaction listings over kafka-python) -> transaction descriptions ->
batch timestamps. The number of requests grows with the number of brokers, not partitions.
Only a metadata failure loses the whole cycle; any other error loses only its part and is
recorded in the snapshot.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from exporter.kafka.admin import ClusterAdmin, ClusterMetadata, Collected
from exporter.kafka.errors import KafkaUnavailable, error_name
from exporter.model import (
    OPEN_COORDINATOR_STATES,
    BatchTimestamp,
    BrokerConfig,
    ClusterSnapshot,
    CollectionError,
    ListedTransaction,
    PartitionOffsets,
    ProducerState,
    TransactionDescription,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Stages:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def timed(self, name: str, fn: Callable[[], T]) -> T:
        started = time.monotonic()
        try:
            return fn()
        finally:
            self.seconds[name] = time.monotonic() - started


class SnapshotCollector:
    """Builds a :class:`ClusterSnapshot` per call. Keeps only the batch-timestamp cache."""

    def __init__(self, *, cluster: str, admin: ClusterAdmin,
                 topic_filter: Callable[[str], bool] | None = None,
                 read_batch_timestamps: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.admin = admin
        self._topic_filter = topic_filter
        self._read_batch_timestamps = read_batch_timestamps
        self._clock = clock
        self._timestamps: dict[tuple[str, int, int], int] = {}
        #: Start offsets whose batch could not be read (e.g. OFFSET_OUT_OF_RANGE once retention
        #: passed it): tried once, reported once, then left to the LastTimestamp fallback.
        self._unreadable: set[tuple[str, int, int]] = set()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"collect-{cluster}")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.admin.close()

    def collect(self, *, describe_extra: Iterable[str] = (),
                partitions: Iterable[tuple[str, int]] | None = None) -> ClusterSnapshot:
        """One cycle. Raises KafkaUnavailable only when no metadata could be read.

        ``describe_extra``: transactional ids to describe in any state (the previous cycle's
        Ongoing transactions, for KIP-588 timeout-abort detection). ``partitions``: limit the
        partition-level part to these (the CLI's --topic/--partition).
        """
        taken_at_ms = int(self._clock() * 1000)
        stages = _Stages()
        metadata = stages.timed("metadata", lambda: self.admin.metadata(self._topic_filter))
        if partitions is not None:
            wanted = set(partitions)
            metadata = replace(metadata,
                               leaders={k: v for k, v in metadata.leaders.items() if k in wanted})
        broker_ids = [b.broker_id for b in metadata.brokers]
        confluent_part = self._pool.submit(self._configs_and_offsets, metadata, broker_ids, stages)
        errors: list[CollectionError] = []
        producers = stages.timed("producers", lambda: self._producers(metadata))
        listed = stages.timed("list_transactions",
                              lambda: self._guard("ListTransactions",
                                                  lambda: self.admin.list_transactions(broker_ids)))
        if metadata.leaderless_transaction_state:
            # Every broker may answer, yet the ids of a leaderless __transaction_state
            # partition are listed by none: the listing is incomplete.
            listed = Collected(listed.rows, (*listed.errors, *(
                CollectionError("ListTransactions", "COORDINATOR_NOT_AVAILABLE",
                                topic="__transaction_state", partition=p)
                for p in metadata.leaderless_transaction_state)))
        configs, offsets = confluent_part.result()
        listed_ok = frozenset(broker_ids) - {e.broker_id for e in listed.errors if e.broker_id >= 0}
        described = stages.timed("describe_transactions",
                                 lambda: self._describe(listed.rows, producers.rows, describe_extra))
        timestamps = stages.timed("batch_timestamps",
                                  lambda: self._batch_timestamps(metadata, producers.rows,
                                                                 listed.rows, described.rows))
        for part in (configs, offsets, producers, listed, described, timestamps):
            errors.extend(part.errors)
        return ClusterSnapshot(
            cluster=self.cluster,
            taken_at_ms=taken_at_ms,
            brokers=metadata.brokers,
            broker_configs=configs.rows,
            partitions=offsets.rows,
            producers=producers.rows,
            listed_transactions=listed.rows,
            transactions=described.rows,
            batch_timestamps=timestamps.rows,
            errors=tuple(errors),
            coordinators_listed=listed_ok,
            stage_seconds=tuple(sorted(stages.seconds.items())),
        )

    # -- stages ----------------------------------------------------------------------

    def _guard(self, api: str, fn: Callable[[], Collected[T]]) -> Collected[T]:
        """A stage that fails as a whole (client broken, cluster gone) becomes one error."""
        try:
            return fn()
        except Exception as e:  # recorded and exported, never fatal to the cycle
            log.warning("%s failed for cluster %s: %s", api, self.cluster, e)
            return Collected((), (CollectionError(api, error_name(e), message=str(e)[:200]),))

    def _configs_and_offsets(self, metadata: ClusterMetadata, broker_ids: list[int],
                             stages: _Stages
                             ) -> tuple[Collected[BrokerConfig], Collected[PartitionOffsets]]:
        configs = stages.timed("configs", lambda: self._guard(
            "DescribeConfigs", lambda: self._configs_with_features(broker_ids)))
        offsets = stages.timed("offsets", lambda: self._guard(
            "ListOffsets", lambda: self.admin.offsets(metadata.leaders, metadata.leaders)))
        if offsets.rows or not metadata.leaders:
            return configs, offsets
        # Keep every partition with its leader even when its offsets could not be read.
        rows = tuple(PartitionOffsets(t, p, leader) for (t, p), leader in
                     sorted(metadata.leaders.items()))
        return configs, Collected(rows, offsets.errors)

    def _configs_with_features(self, broker_ids: list[int]) -> Collected[BrokerConfig]:
        configs = self.admin.broker_configs(broker_ids)
        try:
            version = self.admin.transaction_version()
        except Exception as e:  # feature levels are a nice-to-have; count and go on
            return Collected(configs.rows, (*configs.errors, CollectionError(
                "ApiVersions", error_name(e), message=str(e)[:200])))
        return Collected(tuple(replace(c, transaction_version=version) for c in configs.rows),
                         configs.errors)

    def _producers(self, metadata: ClusterMetadata) -> Collected[ProducerState]:
        by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
        leaderless: list[CollectionError] = []
        for (topic, partition), leader in sorted(metadata.leaders.items()):
            if leader < 0:
                leaderless.append(CollectionError("DescribeProducers", "LEADER_NOT_AVAILABLE",
                                                  topic=topic, partition=partition))
            else:
                by_leader[leader].append((topic, partition))
        result = self._guard("DescribeProducers", lambda: self.admin.describe_producers(by_leader))
        return Collected(result.rows, (*result.errors, *leaderless))

    def _describe(self, listed: tuple[ListedTransaction, ...],
                  producers: tuple[ProducerState, ...],
                  extra: Iterable[str]) -> Collected[TransactionDescription]:
        open_pids = {p.producer_id for p in producers if p.current_txn_start_offset >= 0}
        wanted = set(extra)
        by_coordinator: dict[int, set[str]] = defaultdict(set)
        for t in listed:
            if t.state in OPEN_COORDINATOR_STATES or t.producer_id in open_pids or (
                    t.transactional_id in wanted):
                by_coordinator[t.coordinator_id].add(t.transactional_id)
        if not by_coordinator:
            return Collected(())
        return self._guard("DescribeTransactions",
                           lambda: self.admin.describe_transactions(by_coordinator))

    def _batch_timestamps(self, metadata: ClusterMetadata, producers: tuple[ProducerState, ...],
                          listed: tuple[ListedTransaction, ...],
                          described: tuple[TransactionDescription, ...]
                          ) -> Collected[BatchTimestamp]:
        """Read (once, then cached) the batch at the start offset of every open transaction
        whose start time the coordinator does not give."""
        covered = {
            (tp.topic, tp.partition, d.producer_id)
            for d in described if d.error is None and d.state in OPEN_COORDINATOR_STATES
            for tp in d.partitions
        }
        open_keys = {(p.topic, p.partition, p.current_txn_start_offset): p for p in producers
                     if p.current_txn_start_offset >= 0}
        self._timestamps = {k: v for k, v in self._timestamps.items() if k in open_keys}
        self._unreadable &= set(open_keys)
        if not self._read_batch_timestamps:
            return Collected(())
        missing: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
        for key, p in open_keys.items():
            if (key not in self._timestamps and key not in self._unreadable
                    and (p.topic, p.partition, p.producer_id) not in covered):
                missing[metadata.leaders.get((p.topic, p.partition), p.broker_id)].append(key)
        errors: tuple[CollectionError, ...] = ()
        if missing:
            fetched = self._guard("Fetch", lambda: self.admin.batch_timestamps(missing))
            errors = fetched.errors
            for row in fetched.rows:
                self._timestamps[(row.topic, row.partition, row.offset)] = row.timestamp_ms
            failed_partitions = {(e.topic, e.partition) for e in fetched.errors if e.partition >= 0}
            self._unreadable.update(k for keys in missing.values() for k in keys
                                    if (k[0], k[1]) in failed_partitions)
        return Collected(tuple(BatchTimestamp(t, p, o, ts)
                               for (t, p, o), ts in sorted(self._timestamps.items())), errors)


__all__ = ["KafkaUnavailable", "SnapshotCollector"]

"""One collection cycle: everything the pipeline needs from one cluster, as a snapshot.

Stages, each timed (``ClusterSnapshot.stage_seconds``)::

    metadata ─┬─ configs (DescribeConfigs + ApiVersions) ────────────────────────────┐
              ├─ offsets (ListOffsets) ───────────────────────────────────────────────┤
              ├─ visibility_probe (FindCoordinator + DescribeTransactions) ───────────┤
              ├─ producers (DescribeProducers) ─┐                                     │
              └─ list_transactions ─────────────┴─ describe_transactions ─┬─ reread_producers
                                                                          └─ batch_timestamps

Stages on different branches run at the same time; the number of requests grows with the
number of brokers, not partitions. Only a metadata failure loses the whole cycle; any other
error loses only its part and is recorded in the snapshot.

Read-verify: after DescribeTransactions, DescribeProducers is read again for every partition
that showed an open transaction in the first read (one request per leader of such a
partition, none when no partition has an open transaction). The rows are
``ClusterSnapshot.reread_producers`` and the partitions read are ``reread_partitions``; the
pipeline keeps a hanging candidate only when the re-read still shows the same (producer id,
start offset), so a transaction that completed between the two reads is never suspected.

Log start: when an open transaction's start offset is below its partition's LSO (the LSO
has passed it: it closed, or retention lifted the LSO to a new log start over it), the
partition's log start offset is read (ListOffsets earliest, stage ``log_start``, after both
``offsets`` and ``producers``). Usually no partition qualifies and nothing is sent.

Cycle deadline: with ``collect(deadline_s=...)`` a cycle never runs past its deadline. Each
stage gets a budget from the time left when it starts (:data:`STAGE_SHARES`), its request
timeouts are shortened to that budget, and a stage still running when its budget is spent
is cut: its part is recorded as ``CollectionError(api, "DEADLINE_EXCEEDED")`` and the
snapshot is partial, like any other partial cycle. (The cut stage's requests end on their own
shortly after; their answers are dropped.)
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TypeVar

from exporter.config.groups import GroupsConfig
from exporter.kafka.admin import ClusterAdmin, ClusterMetadata
from exporter.kafka.consumable import Gap, collect_consumable_checks, consumable_gaps
from exporter.kafka.errors import DEADLINE_EXCEEDED, KafkaRequestError, KafkaUnavailable, is_retriable
from exporter.kafka.groups import collect_group_offsets, offsets_of
from exporter.kafka.metadata import TRANSACTION_STATE_TOPIC
from exporter.kafka.results import Collected, Gather, guarded
from exporter.model import (
    OPEN_COORDINATOR_STATES,
    PROBE_MESSAGE,
    REREAD_MESSAGE,
    BatchTimestamp,
    BrokerConfig,
    ClusterSnapshot,
    CollectionError,
    ConsumableCheck,
    GroupOffsets,
    ListedTransaction,
    PartitionOffsets,
    ProducerState,
    TransactionDescription,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Share of the time left (when the stage starts) each stage may use. Stages that others
#: wait for get less, so that those still have time; stages nothing waits for get it all.
STAGE_SHARES = {
    "metadata": 0.5,
    "producers": 0.6,
    "list_transactions": 0.6,
    "describe_transactions": 0.5,
    "configs": 1.0,
    "offsets": 1.0,
    "visibility_probe": 1.0,
    "reread_producers": 1.0,
    "batch_timestamps": 1.0,
    "log_start": 1.0,
    "groups": 1.0,
    "consumable_checks": 1.0,
}
#: Requests of a stage end this long before its budget (at most), so that they time out on
#: their own, per broker, and only a stage stuck elsewhere is cut.
MAX_GRACE_S = 0.5
GRACE_SHARE = 0.1
#: Threads per collector: the five stages after metadata at once, plus stages cut in an
#: earlier cycle whose requests have not ended yet.
STAGE_WORKERS = 8


@dataclass(frozen=True, slots=True)
class _Budget:
    """When a stage is cut (``cut_at``) and when its requests must end (``requests_by``)."""

    cut_at: float | None
    requests_by: float | None


class _Stages:
    def __init__(self, pool: ThreadPoolExecutor, deadline: float | None) -> None:
        self.seconds: dict[str, float] = {}
        self._pool = pool
        self.deadline = deadline

    def budget(self, name: str) -> _Budget:
        if self.deadline is None:
            return _Budget(None, None)
        now = time.monotonic()
        left = max(0.0, self.deadline - now)
        cut_at = now + left * STAGE_SHARES.get(name, 1.0)  # a stage nothing waits for: all
        grace = min(MAX_GRACE_S, (cut_at - now) * GRACE_SHARE)
        return _Budget(cut_at, cut_at - grace)

    def timed(self, name: str, fn: Callable[[], T]) -> T:
        started = time.monotonic()
        try:
            return fn()
        finally:
            self.seconds[name] = time.monotonic() - started

    def start(
        self, name: str, api: str, fn: Callable[[float | None], Collected[T]]
    ) -> Callable[[], Collected[T]]:
        """Run ``fn(requests_by)`` on the pool now; the returned call waits for its result
        until the stage's budget is spent, then cuts it."""
        budget = self.budget(name)
        started = time.monotonic()
        future: Future[Collected[T]] = self._pool.submit(
            lambda: self._finish(name, started, guarded(api, lambda: fn(budget.requests_by)))
        )

        def result() -> Collected[T]:
            wait = None if budget.cut_at is None else max(0.0, budget.cut_at - time.monotonic())
            try:
                return future.result(timeout=wait)
            except FutureTimeout:
                self.seconds[name] = time.monotonic() - started
                log.debug("stage %s cut at the cycle deadline after %.2f s", name, self.seconds[name])
                return Collected(
                    (),
                    (
                        CollectionError(
                            api,
                            DEADLINE_EXCEEDED,
                            message=(
                                f"stage {name} cut after {self.seconds[name]:.2f} s by the cycle deadline"
                            ),
                        ),
                    ),
                )

        return result

    def _finish(self, name: str, started: float, result: Collected[T]) -> Collected[T]:
        self.seconds.setdefault(name, time.monotonic() - started)
        return result


def _tag(error: CollectionError, tag: str) -> CollectionError:
    """The error with its message prefixed by ``tag`` (how later stages tell it apart)."""
    return replace(error, message=f"{tag}: {error.message}" if error.message else tag)


def _tagged(result: Collected[T], tag: str) -> Collected[T]:
    return Collected(result.rows, tuple(_tag(e, tag) for e in result.errors))


#: Cycles a start batch's fetch is tried when it fails with a retriable error.
FETCH_ATTEMPTS = 3


class SnapshotCollector:
    """Builds a :class:`ClusterSnapshot` per call. Keeps only the batch-timestamp cache."""

    def __init__(
        self,
        *,
        cluster: str,
        admin: ClusterAdmin,
        topic_filter: Callable[[str], bool] | None = None,
        named_topics: Iterable[str] = (),
        read_batch_timestamps: bool = True,
        groups: GroupsConfig | None = None,
        clock: Callable[[], float] = time.time,
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        """``pool``: the threads the stages run on, shared with other collectors (a daemon
        watching many clusters bounds its threads so); None: a pool of this collector's own."""
        self.cluster = cluster
        #: The consumer-group family (None or disabled: no group request at all).
        self._groups = groups if groups is not None and groups.enabled else None
        self.admin = admin
        self._topic_filter = topic_filter
        #: Topics expected in the metadata: ``__transaction_state`` and the ones the config
        #: names; those left out are asked about, and a refusal is a named error.
        self._expected_topics = (TRANSACTION_STATE_TOPIC, *named_topics)
        self._read_batch_timestamps = read_batch_timestamps
        self._clock = clock
        self._timestamps: dict[tuple[str, int, int], int] = {}
        #: Start offsets whose batch could not be read (e.g. OFFSET_OUT_OF_RANGE once retention
        #: passed it): tried once, reported once, then left to the LastTimestamp fallback.
        self._unreadable: set[tuple[str, int, int]] = set()
        #: Retriable failures so far of a start batch's fetch (a leader move, a timeout): it
        #: is asked for again, :data:`FETCH_ATTEMPTS` times at most, then left unreadable.
        self._fetch_failures: dict[tuple[str, int, int], int] = {}
        self._own_pool = pool is None
        self._pool = pool or ThreadPoolExecutor(
            max_workers=STAGE_WORKERS, thread_name_prefix=f"collect-{cluster}"
        )

    def close(self) -> None:
        if self._own_pool:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.admin.close()

    def collect(
        self,
        *,
        describe_extra: Iterable[str] = (),
        partitions: Iterable[tuple[str, int]] | None = None,
        deadline_s: float | None = None,
    ) -> ClusterSnapshot:
        """One cycle. Raises KafkaUnavailable only when no metadata could be read.

        ``describe_extra``: transactional ids to describe in any state (the previous cycle's
        Ongoing transactions, for KIP-588 timeout-abort detection). ``partitions``: limit the
        partition-level part to these (the CLI's --topic/--partition). ``deadline_s``: the
        cycle returns within this many seconds, partial if need be (None: no deadline, each
        request has the request timeout).
        """
        taken_at_ms = int(self._clock() * 1000)
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self.admin.begin_cycle()
        stages = _Stages(self._pool, deadline)
        metadata_by = stages.budget("metadata").requests_by
        metadata = stages.timed(
            "metadata",
            lambda: self.admin.metadata(
                self._topic_filter, expect=self._expected_topics, deadline=metadata_by
            ),
        )
        if partitions is not None:
            wanted = set(partitions)
            metadata = replace(metadata, leaders={k: v for k, v in metadata.leaders.items() if k in wanted})
        broker_ids = [b.broker_id for b in metadata.brokers]
        admin = self.admin

        configs = stages.start(
            "configs", "DescribeConfigs", lambda by: self._configs_with_features(broker_ids, by)
        )
        offsets = stages.start(
            "offsets",
            "ListOffsets",
            lambda by: admin.offsets(metadata.leaders, metadata.leaders, deadline=by),
        )
        visibility = stages.start(
            "visibility_probe", "DescribeTransactions", lambda by: admin.probe_visibility(deadline=by)
        )
        producers_pending = stages.start(
            "producers", "DescribeProducers", lambda by: self._producers(metadata, by)
        )
        groups_pending = (
            stages.start("groups", "OffsetFetch", lambda by: self._group_offsets(broker_ids, by))
            if self._groups is not None
            else None
        )
        listed_pending = stages.start(
            "list_transactions",
            "ListTransactions",
            lambda by: self._list_transactions(metadata, broker_ids, by),
        )

        producers = producers_pending()
        listed = listed_pending()
        listed_ok = frozenset(broker_ids) - {e.broker_id for e in listed.errors if e.broker_id >= 0}
        if any(e.broker_id < 0 and e.topic != TRANSACTION_STATE_TOPIC for e in listed.errors):
            listed_ok = frozenset()  # the whole stage failed: no broker's listing is known
        described = stages.start(
            "describe_transactions",
            "DescribeTransactions",
            lambda by: self._describe(listed.rows, producers.rows, describe_extra, by),
        )()
        reread_pending = stages.start(
            "reread_producers", "DescribeProducers", lambda by: self._reread(metadata, producers.rows, by)
        )
        fetch_plan = self._plan_batch_timestamps(metadata, producers.rows, described.rows)
        fetched = stages.start("batch_timestamps", "Fetch", lambda by: self._fetch(fetch_plan, by))()
        timestamps = self._merge_batch_timestamps(fetch_plan, fetched)
        reread, reread_ok = self._reread_result(metadata, producers.rows, reread_pending())
        offsets_done = self._with_log_starts(
            metadata, self._offsets_or_leaders(metadata, offsets()), producers.rows, stages
        )
        configs_done = configs()
        visible = _tagged(visibility(), PROBE_MESSAGE)
        group_offsets: Collected[GroupOffsets] = Collected(())
        checks: Collected[ConsumableCheck] = Collected(())
        if groups_pending is not None and self._groups is not None:
            group_offsets = groups_pending()
            gaps = consumable_gaps(offsets_of(group_offsets), offsets_done.rows)
            if gaps and self._groups.consumable_check_max_bytes > 0:
                checks = stages.start(
                    "consumable_checks",
                    "Fetch",
                    lambda by: self._consumable_checks(gaps, metadata.leaders, by),
                )()

        errors: list[CollectionError] = [
            CollectionError(
                "Metadata",
                error,
                topic=topic,
                message=f"topic {topic} is left out of the metadata: Kafka answers {error}",
            )
            for topic, error in metadata.refused_topics
        ]
        for part in (
            configs_done,
            offsets_done,
            visible,
            producers,
            listed,
            described,
            reread,
            timestamps,
            group_offsets,
            checks,
        ):
            errors.extend(part.errors)
        cut = sorted({e.api for e in errors if e.error == DEADLINE_EXCEEDED})
        if cut:
            log.warning(
                "cycle for cluster %s reached its deadline (%.1f s): %s cut",
                self.cluster,
                deadline_s,
                ", ".join(cut),
            )
        return ClusterSnapshot(
            cluster=self.cluster,
            taken_at_ms=taken_at_ms,
            brokers=metadata.brokers,
            broker_configs=configs_done.rows,
            partitions=offsets_done.rows,
            producers=producers.rows,
            listed_transactions=listed.rows,
            transactions=described.rows,
            batch_timestamps=timestamps.rows,
            errors=tuple(errors),
            transactional_ids_visible=visible.rows[0] if visible.rows else None,
            reread_producers=reread.rows,
            reread_partitions=reread_ok,
            group_offsets=offsets_of(group_offsets),
            consumable_checks=checks.rows,
            coordinators_listed=listed_ok,
            stage_seconds=tuple(sorted(stages.seconds.items())),
        )

    # -- stages ----------------------------------------------------------------------

    def _group_offsets(self, broker_ids: list[int], by: float | None) -> Collected[GroupOffsets]:
        assert self._groups is not None
        return collect_group_offsets(
            self.admin._kafka_client(by),
            broker_ids=broker_ids,
            topic_filter=self._topic_filter or (lambda _: True),
            group_filter=self._groups.group_matcher(),
            request_timeout_ms=self._timeout_ms(by),
        )

    def _consumable_checks(
        self,
        gaps: list[Gap],
        leaders: Mapping[tuple[str, int], int],
        by: float | None,
    ) -> Collected[ConsumableCheck]:
        assert self._groups is not None
        return collect_consumable_checks(
            self.admin._kafka_client(by),
            gaps,
            leaders,
            max_bytes=self._groups.consumable_check_max_bytes,
            request_timeout_ms=self._timeout_ms(by),
            deadline=by,
        )

    def _timeout_ms(self, by: float | None) -> int:
        """The request timeout, shortened to what is left of the stage's budget."""
        timeout = self.admin.request_timeout_ms
        if by is None:
            return timeout
        return max(100, min(timeout, int((by - time.monotonic()) * 1000)))

    def _offsets_or_leaders(
        self, metadata: ClusterMetadata, offsets: Collected[PartitionOffsets]
    ) -> Collected[PartitionOffsets]:
        """Keep every partition with its leader even when its offsets could not be read."""
        if offsets.rows or not metadata.leaders:
            return offsets
        rows = tuple(PartitionOffsets(t, p, leader) for (t, p), leader in sorted(metadata.leaders.items()))
        return Collected(rows, offsets.errors)

    def _with_log_starts(
        self,
        metadata: ClusterMetadata,
        offsets: Collected[PartitionOffsets],
        producers: tuple[ProducerState, ...],
        stages: _Stages,
    ) -> Collected[PartitionOffsets]:
        """The log start offset of each partition whose LSO has passed an open transaction's
        start (usually none: no request then). The pipeline reads such an LSO as proof that
        the transaction closed, unless retention or DeleteRecords lifted the LSO to the log
        start over a transaction still open. Read after the LSO: the log start only grows, so
        the value read is at least the one the LSO was computed with."""
        lso = {(o.topic, o.partition): o.last_stable_offset for o in offsets.rows}
        passed = {
            (p.topic, p.partition)
            for p in producers
            if 0 <= p.current_txn_start_offset < lso.get((p.topic, p.partition), -1)
        }
        if not passed:
            return offsets
        read = stages.start(
            "log_start",
            "ListOffsets",
            lambda by: self.admin.log_start_offsets(passed, metadata.leaders, deadline=by),
        )()
        starts = {(t, p): offset for t, p, offset in read.rows}

        def with_start(o: PartitionOffsets) -> PartitionOffsets:
            start = starts.get((o.topic, o.partition))
            return o if start is None else replace(o, log_start_offset=start)

        rows = tuple(map(with_start, offsets.rows))
        return Collected(rows, (*offsets.errors, *read.errors))

    def _configs_with_features(
        self, broker_ids: list[int], deadline: float | None
    ) -> Collected[BrokerConfig]:
        configs = self.admin.broker_configs(broker_ids, deadline=deadline)
        try:
            version = self.admin.transaction_version(deadline=deadline)
        except Exception as e:  # the feature level is exported; its failure is counted
            failed: Gather[BrokerConfig] = Gather("ApiVersions")
            failed.fail(e)
            return Collected(configs.rows, (*configs.errors, *failed.errors))
        return Collected(tuple(replace(c, transaction_version=version) for c in configs.rows), configs.errors)

    def _producers(self, metadata: ClusterMetadata, deadline: float | None) -> Collected[ProducerState]:
        by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
        leaderless: list[CollectionError] = []
        for (topic, partition), leader in sorted(metadata.leaders.items()):
            if leader < 0:
                leaderless.append(
                    CollectionError(
                        "DescribeProducers", "LEADER_NOT_AVAILABLE", topic=topic, partition=partition
                    )
                )
            else:
                by_leader[leader].append((topic, partition))
        if not by_leader:
            return Collected((), tuple(leaderless))
        result = guarded(
            "DescribeProducers", lambda: self.admin.describe_producers(by_leader, deadline=deadline)
        )
        return Collected(result.rows, (*result.errors, *leaderless))

    def _describe(
        self,
        listed: tuple[ListedTransaction, ...],
        producers: tuple[ProducerState, ...],
        extra: Iterable[str],
        deadline: float | None,
    ) -> Collected[TransactionDescription]:
        open_pids = {p.producer_id for p in producers if p.current_txn_start_offset >= 0}
        wanted = set(extra)
        by_coordinator: dict[int, set[str]] = defaultdict(set)
        for t in listed:
            if (
                t.state in OPEN_COORDINATOR_STATES
                or t.producer_id in open_pids
                or (t.transactional_id in wanted)
            ):
                by_coordinator[t.coordinator_id].add(t.transactional_id)
        if not by_coordinator:
            return Collected(())
        return self.admin.describe_transactions(by_coordinator, deadline=deadline)

    @staticmethod
    def _open_partitions_by_leader(
        metadata: ClusterMetadata, producers: tuple[ProducerState, ...]
    ) -> dict[int, list[tuple[str, int]]]:
        by_leader: dict[int, set[tuple[str, int]]] = defaultdict(set)
        for p in producers:
            if p.current_txn_start_offset >= 0:
                key = (p.topic, p.partition)
                by_leader[metadata.leaders.get(key, p.broker_id)].add(key)
        return {b: sorted(tps) for b, tps in sorted(by_leader.items()) if b >= 0}

    def _list_transactions(
        self, metadata: ClusterMetadata, broker_ids: Sequence[int], by: float | None
    ) -> Collected[ListedTransaction]:
        """ListTransactions on every broker, then ``__transaction_state``'s leaders read again.

        Every broker may answer and a live transaction still be "listed by nobody": when a
        ``__transaction_state`` partition has no leader (nobody lists its ids), and when its
        leadership moves during the listing (the old leader has unloaded its ids, the new one
        has not started loading them: a broker that is loading answers
        COORDINATOR_LOAD_IN_PROGRESS, one that has not yet acted on its election answers
        without them). Such a partition is an error of the listing (COORDINATOR_NOT_AVAILABLE
        when leaderless, NOT_COORDINATOR when its leader read again differs from the cycle's
        metadata), as is a failed re-read: each makes "listed by nobody" inconclusive this
        cycle (docs/metrics.md)."""
        listed = self.admin.list_transactions(broker_ids, deadline=by)
        before = metadata.transaction_state_leaders
        if not before:
            return listed
        try:
            after = self.admin.transaction_state_leaders(deadline=by)
        except KafkaRequestError as e:
            lost = CollectionError(
                "ListTransactions", e.error, topic=TRANSACTION_STATE_TOPIC, message="leaders not re-read"
            )
            return Collected(listed.rows, (*listed.errors, lost))
        unsure = {p: "COORDINATOR_NOT_AVAILABLE" for p, leader in before.items() if leader < 0}
        unsure |= {
            p: "NOT_COORDINATOR"
            for p, leader in before.items()
            if p not in unsure and after.get(p, -1) != leader
        }
        return Collected(
            listed.rows,
            (
                *listed.errors,
                *(
                    CollectionError("ListTransactions", error, topic=TRANSACTION_STATE_TOPIC, partition=p)
                    for p, error in sorted(unsure.items())
                ),
            ),
        )

    def _reread(
        self, metadata: ClusterMetadata, producers: tuple[ProducerState, ...], deadline: float | None
    ) -> Collected[ProducerState]:
        by_leader = self._open_partitions_by_leader(metadata, producers)
        if not by_leader:
            return Collected(())
        return self.admin.describe_producers(by_leader, deadline=deadline)

    def _reread_result(
        self,
        metadata: ClusterMetadata,
        producers: tuple[ProducerState, ...],
        reread: Collected[ProducerState],
    ) -> tuple[Collected[ProducerState], frozenset[tuple[str, int]]]:
        """The re-read rows (errors marked as the re-read's) and the partitions it verified."""
        by_leader = self._open_partitions_by_leader(metadata, producers)
        asked = {tp for tps in by_leader.values() for tp in tps}
        failed: set[tuple[str, int]] = set()
        for e in reread.errors:
            if e.partition >= 0:
                failed.add((e.topic, e.partition))
            elif e.broker_id >= 0:
                failed.update(by_leader.get(e.broker_id, ()))
            else:
                failed.update(asked)
        errors = tuple(_tag(e, REREAD_MESSAGE) for e in reread.errors)
        rows = tuple(p for p in reread.rows if (p.topic, p.partition) in asked)
        return Collected(rows, errors), frozenset(asked - failed)

    def _plan_batch_timestamps(
        self,
        metadata: ClusterMetadata,
        producers: tuple[ProducerState, ...],
        described: tuple[TransactionDescription, ...],
    ) -> dict[int, list[tuple[str, int, int]]]:
        """The start offsets (per leader) of every open transaction whose start time the
        coordinator does not give and whose batch was not read before. Prunes the cache."""
        covered = {
            (tp.topic, tp.partition, d.producer_id)
            for d in described
            if d.error is None and d.state in OPEN_COORDINATOR_STATES
            for tp in d.partitions
        }
        open_keys = {
            (p.topic, p.partition, p.current_txn_start_offset): p
            for p in producers
            if p.current_txn_start_offset >= 0
        }
        self._timestamps = {k: v for k, v in self._timestamps.items() if k in open_keys}
        self._unreadable &= set(open_keys)
        self._fetch_failures = {k: n for k, n in self._fetch_failures.items() if k in open_keys}
        missing: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
        if not self._read_batch_timestamps:
            return missing
        for key, p in open_keys.items():
            if (
                key not in self._timestamps
                and key not in self._unreadable
                and (p.topic, p.partition, p.producer_id) not in covered
            ):
                missing[metadata.leaders.get((p.topic, p.partition), p.broker_id)].append(key)
        return missing

    def _fetch(
        self, plan: dict[int, list[tuple[str, int, int]]], deadline: float | None
    ) -> Collected[BatchTimestamp]:
        if not plan:
            return Collected(())
        return self.admin.batch_timestamps(plan, deadline=deadline)

    def _merge_batch_timestamps(
        self, plan: dict[int, list[tuple[str, int, int]]], fetched: Collected[BatchTimestamp]
    ) -> Collected[BatchTimestamp]:
        """Cache what was read (on the collecting thread: a cut fetch changes nothing)."""
        if not self._read_batch_timestamps:
            return Collected(())
        for row in fetched.rows:
            self._timestamps[(row.topic, row.partition, row.offset)] = row.timestamp_ms
        # A retriable error (a leader move, a timeout) is tried again next cycle, a few times;
        # an answer that the batch cannot be read stops asking for it at once.
        errors = {(e.topic, e.partition): e.error for e in fetched.errors if e.partition >= 0}
        for key in (k for keys in plan.values() for k in keys if (k[0], k[1]) in errors):
            failures = self._fetch_failures.get(key, 0) + 1
            self._fetch_failures[key] = failures
            if not is_retriable(errors[(key[0], key[1])]) or failures >= FETCH_ATTEMPTS:
                self._unreadable.add(key)
        return Collected(
            tuple(BatchTimestamp(t, p, o, ts) for (t, p, o), ts in sorted(self._timestamps.items())),
            fetched.errors,
        )


__all__ = ["KafkaUnavailable", "SnapshotCollector"]

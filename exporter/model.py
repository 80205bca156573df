"""The snapshot of one collection cycle, and what the pipeline makes of it.

Plain, frozen dataclasses: the collection package (``exporter.kafka``) fills a
:class:`ClusterSnapshot`; the pipeline (``exporter.pipeline``) turns it into a
:class:`CycleResult`; the Prometheus collector (``exporter.metrics``) only renders
results. Nothing here talks to Kafka or Spark.

Times are epoch milliseconds (``*_ms``) as Kafka reports them; ``-1`` means
"unknown" exactly as on the wire, so rows can be compared with Kafka's own tools.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, overload

#: TransactionTimeoutMs of a KIP-939 two-phase-commit transaction (Int.MaxValue).
TWO_PHASE_COMMIT_TIMEOUT_MS = 2_147_483_647
#: Kafka's LATE_TRANSACTION_BUFFER_MS (ReplicaManager): late = max timeout + 5 minutes.
KAFKA_LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000
#: The broker default of transaction.max.timeout.ms (15 minutes).
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000

#: Coordinator states in which a transaction is open (DescribeTransactions / ListTransactions).
OPEN_COORDINATOR_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
#: Coordinator states in which the transaction is decided and its markers are being written.
PREPARE_STATES = ("PrepareCommit", "PrepareAbort")
#: Every coordinator state Kafka reports, for zero-filled state gauges.
COORDINATOR_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


class StartTimeSource(enum.StrEnum):
    """Where the start time of an open partition-level transaction came from."""

    COORDINATOR = "coordinator"  # DescribeTransactions TransactionStartTimeMs
    BATCH_TIMESTAMP = "batch_timestamp"  # timestamp of the batch at CurrentTxnStartOffset
    LAST_TIMESTAMP = "last_timestamp"  # DescribeProducers LastTimestamp (Kafka's own proxy)


class TxnClass(enum.StrEnum):
    """Classification of an open partition-level transaction."""

    ONGOING = "ongoing"  # the coordinator owns it and it is within its timeout
    LATE = "late"  # older than transaction.max.timeout.ms + padding, coordinator still owns it
    HANGING = "hanging"  # no coordinator owns it (KIP-664), confirmed
    #: Looks hanging in this cycle only. A transaction that completes between the cycle's
    #: DescribeProducers and DescribeTransactions looks exactly like this, so a candidate is
    #: confirmed only when the same (topic, partition, producer id, start offset) is seen
    #: hanging in ``hanging_confirm_cycles`` consecutive cycles.
    SUSPECTED_HANGING = "suspected_hanging"
    TWO_PHASE_COMMIT = "two_phase_commit"  # KIP-939 2PC transaction: long-running by design
    UNKNOWN = "unknown"  # the coordinator side could not be read this cycle


class HangingReason(enum.StrEnum):
    """Why an open partition-level transaction is judged hanging (KIP-664 workflow)."""

    NO_TRANSACTIONAL_ID = "no_transactional_id"  # no coordinator lists the producer id
    TRANSACTIONAL_ID_NOT_FOUND = "transactional_id_not_found"  # DescribeTransactions: not found
    PRODUCER_ID_CHANGED = "producer_id_changed"  # the id now maps to another producer id
    COORDINATOR_NOT_OPEN = "coordinator_not_open"  # coordinator is Empty/Complete*/Dead
    PARTITION_NOT_IN_TRANSACTION = "partition_not_in_transaction"  # open, without this partition


class UnknownReason(enum.StrEnum):
    """Why an open partition-level transaction could not be classified this cycle."""

    #: DescribeTransactions for its transactional id failed (not "not found").
    COORDINATOR_UNREADABLE = "coordinator_unreadable"
    #: No coordinator lists its producer id, but not every coordinator answered.
    LISTING_INCOMPLETE = "listing_incomplete"
    #: No coordinator lists its producer id, and the exporter's principal may not Describe
    #: every transactional id (ListTransactions silently leaves those out): the owner may be
    #: a live transaction the exporter cannot see.
    OWNER_MAY_BE_INVISIBLE = "owner_may_be_invisible"
    #: No coordinator lists its producer id, but it is not yet older than its leader's
    #: transaction.max.timeout.ms plus the late padding: a live transaction whose id the
    #: principal may not see (a DENY rule or a custom authorizer the visibility probe cannot
    #: detect) can be that young, and any live one older has been aborted by its coordinator.
    UNLISTED_WITHIN_TIMEOUT = "unlisted_within_timeout"
    #: A hanging candidate whose partition could not be read again after the coordinators
    #: were read, so the candidate could not be verified.
    UNVERIFIED = "unverified"


#: The coordinators' log: its partitions map transactional ids to coordinators.
TRANSACTION_STATE_TOPIC = "__transaction_state"


@dataclass(frozen=True, slots=True)
class Broker:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Transaction-related broker settings (DescribeConfigs) and features."""

    broker_id: int
    transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
    verification_enabled: bool = True  # transaction.partition.verification.enable
    two_phase_commit_enabled: bool = False  # transaction.two.phase.commit.enable
    transaction_version: int = -1  # finalized transaction.version feature level, -1 unknown


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One partition, its leader and its offsets (ListOffsets)."""

    topic: str
    partition: int
    leader: int  # broker id, -1 when leaderless
    high_watermark: int = -1  # READ_UNCOMMITTED latest, -1 when unknown
    last_stable_offset: int = -1  # READ_COMMITTED latest, -1 when unknown
    #: The log start offset (earliest), read after the LSO and only where the LSO has passed
    #: an open transaction's start; -1 when not read. Retention or DeleteRecords moving it
    #: past an open transaction's start lift the LSO to it.
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer on one partition (DescribeProducers)."""

    topic: str
    partition: int
    broker_id: int  # the broker that answered (the leader)
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    """One row of ListTransactions from one coordinator."""

    coordinator_id: int
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One DescribeTransactions result from the transactional id's coordinator."""

    coordinator_id: int
    transactional_id: str
    error: str | None  # Kafka error name, e.g. TRANSACTIONAL_ID_NOT_FOUND; None when ok
    state: str = ""
    timeout_ms: int = -1
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchTimestamp:
    """The timestamp of the record batch at an open transaction's start offset."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """One consumer group's committed offset on one partition (OffsetFetch)."""

    group: str
    topic: str
    partition: int
    committed_offset: int  # -1: nothing committed
    coordinator_id: int  # the group coordinator that answered
    group_state: str = ""  # Stable, Empty, PreparingRebalance, ... ("" unknown)
    #: OffsetFetch with RequireStable answered UNSTABLE_OFFSET_COMMIT: a transactional offset
    #: commit for this partition is pending.
    pending_transactional_commit: bool = False


class GroupOffsets(Sequence[GroupOffset]):
    """Committed offsets as columns, one per :class:`GroupOffset` field, in that order: how the
    collector reads them and the pipeline hands them to Spark. A cycle can hold 100k of them
    (1000 groups x 100 partitions), and built as records they cost 0.14 s of the cycle's
    Python time, then as much again to turn back into columns. Indexing and iteration give
    :class:`GroupOffset` records; equal to any sequence of the same records."""

    __slots__ = ("_columns",)

    FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GroupOffset))

    def __init__(self, columns: Sequence[Sequence[Any]] = ((), (), (), (), (), (), ())) -> None:
        if len(columns) != len(self.FIELDS) or len({len(c) for c in columns}) > 1:
            raise ValueError("group offsets need one column per field, all of one length")
        self._columns = tuple(tuple(c) for c in columns)

    @classmethod
    def of(cls, records: Iterable[GroupOffset]) -> GroupOffsets:
        if isinstance(records, GroupOffsets):
            return records
        rows = tuple(records)
        return cls([[getattr(r, name) for r in rows] for name in cls.FIELDS])

    def columns(self) -> tuple[tuple[Any, ...], ...]:
        """The columns, in :attr:`FIELDS` order."""
        return self._columns

    def __len__(self) -> int:
        return len(self._columns[0])

    @overload
    def __getitem__(self, index: int) -> GroupOffset: ...
    @overload
    def __getitem__(self, index: slice) -> GroupOffsets: ...
    def __getitem__(self, index: int | slice) -> GroupOffset | GroupOffsets:
        if isinstance(index, slice):
            return GroupOffsets([c[index] for c in self._columns])
        return GroupOffset(*(c[index] for c in self._columns))

    def __iter__(self) -> Iterator[GroupOffset]:
        return map(GroupOffset, *self._columns)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GroupOffsets):
            return self._columns == other._columns
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._columns)

    def __repr__(self) -> str:
        return f"GroupOffsets({len(self)} rows)"


#: How a DescribeProducers error of the re-read (the second read of the partitions that showed
#: an open transaction, after the coordinators) begins its message: such an error leaves those
#: partitions unverified, but the first read of them stands.
REREAD_MESSAGE = "re-read after DescribeTransactions"
#: How an error of the visibility probe (FindCoordinator, DescribeTransactions of an id no
#: producer uses) begins its message: it says nothing about any coordinator's transactions.
PROBE_MESSAGE = "visibility probe"


@dataclass(frozen=True, slots=True)
class CollectionError:
    """A part of the cycle that was lost. Counted, exported, never fatal."""

    api: str  # e.g. DescribeProducers, ListOffsets, Metadata
    error: str  # Kafka error name (NOT_LEADER_OR_FOLLOWER, ...) or a client-side kind (TIMEOUT)
    broker_id: int = -1
    topic: str = ""
    partition: int = -1
    message: str = ""

    @property
    def of_visibility_probe(self) -> bool:
        return self.message.startswith(PROBE_MESSAGE)

    @property
    def first_read_of_producers(self) -> bool:
        """A DescribeProducers error of the cycle's first read (not of the re-read)."""
        return self.api == "DescribeProducers" and not self.message.startswith(REREAD_MESSAGE)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one cycle read from one cluster. Immutable once built."""

    cluster: str
    taken_at_ms: int
    brokers: tuple[Broker, ...] = ()
    broker_configs: tuple[BrokerConfig, ...] = ()
    partitions: tuple[PartitionOffsets, ...] = ()
    producers: tuple[ProducerState, ...] = ()
    listed_transactions: tuple[ListedTransaction, ...] = ()
    transactions: tuple[TransactionDescription, ...] = ()
    batch_timestamps: tuple[BatchTimestamp, ...] = ()
    errors: tuple[CollectionError, ...] = ()
    #: True when the principal may Describe any transactional id (a DescribeTransactions
    #: probe for an id nobody uses answered "not found", not an authorization error); False
    #: when ListTransactions may silently leave some ids out; None when the probe failed.
    transactional_ids_visible: bool | None = None
    #: DescribeProducers read again, after the coordinators were read, for every partition
    #: that showed an open transaction: a candidate is real only if it is still there.
    reread_producers: tuple[ProducerState, ...] = ()
    #: The partitions whose re-read succeeded (a partition absent here was not verified).
    reread_partitions: frozenset[tuple[str, int]] = frozenset()
    #: Committed offsets of the consumer groups that consume monitored topics (the collector
    #: gives :class:`GroupOffsets`; records in a tuple are read the same way).
    group_offsets: Sequence[GroupOffset] = ()
    #: What a read_committed consumer could read between a committed offset and the LSO,
    #: from the batches themselves (the "lag stuck at 1" evidence).
    consumable_checks: tuple[ConsumableCheck, ...] = ()
    #: Brokers whose transaction listing (ListTransactions) succeeded; a producer id not
    #: found is only "unknown to every coordinator" when all brokers answered.
    coordinators_listed: frozenset[int] = frozenset()
    stage_seconds: tuple[tuple[str, float], ...] = ()

    @property
    def complete(self) -> bool:
        return not self.errors

    def unread_partitions(self) -> frozenset[tuple[str, int]]:
        """Partitions whose producer state this cycle could not read (DescribeProducers failed
        for the partition, for its leader, or as a whole): no evidence either way. A failed
        re-read is not among them: the first read of its partitions stands."""
        failed = [e for e in self.errors if e.first_read_of_producers]
        if not failed:
            return frozenset()
        if any(e.broker_id < 0 and e.partition < 0 for e in failed):
            return frozenset((p.topic, p.partition) for p in self.partitions)
        brokers = {e.broker_id for e in failed if e.partition < 0}
        keys = {(e.topic, e.partition) for e in failed if e.partition >= 0}
        keys |= {(p.topic, p.partition) for p in self.partitions if p.leader in brokers}
        return frozenset(keys)

    def unread_topics(self) -> frozenset[str]:
        """Topics this cycle's metadata left out with an error (e.g. TOPIC_AUTHORIZATION_FAILED
        for a topic named in the config): none of their partitions was read."""
        return frozenset(e.topic for e in self.errors if e.api == "Metadata" and e.topic)


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """Knobs of the classification, from the config tree."""

    late_padding_ms: int = KAFKA_LATE_TRANSACTION_BUFFER_MS
    #: Which partitions get a LastStableOffsetLag series: "nonzero", "open" or "all".
    lso_lag_series: str = "nonzero"
    max_findings: int = 500
    #: Consecutive cycles a hanging candidate must be seen before it is HANGING (1: at once).
    hanging_confirm_cycles: int = 2


@dataclass(frozen=True, slots=True)
class Finding:
    """One open partition-level transaction and how it is classified."""

    topic: str
    partition: int
    broker_id: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp_ms: int
    start_time_ms: int
    start_time_source: StartTimeSource
    duration_ms: int  # now - start_time_ms
    txn_class: TxnClass
    late: bool
    hanging_reason: HangingReason | None = None
    unknown_reason: UnknownReason | None = None
    transactional_id: str | None = None
    coordinator_id: int = -1
    coordinator_state: str | None = None
    transaction_timeout_ms: int = -1
    #: The application the transactional id belongs to (attribution rules), None when unknown.
    application: str | None = None

    @property
    def hanging(self) -> bool:
        return self.txn_class is TxnClass.HANGING


@dataclass(frozen=True, slots=True)
class PartitionMetrics:
    topic: str
    partition: int
    leader: int
    lso_lag: int | None  # None when offsets were not read
    max_active_transaction_duration_ms: int | None  # None when no open transaction


@dataclass(frozen=True, slots=True)
class TopicMetrics:
    """One topic: its partitions' largest LSO lag, its oldest open transaction's age (None:
    none open) and how many of its partitions have an open transaction."""

    topic: str
    max_last_stable_offset_lag: int
    max_active_transaction_duration_ms: int | None
    partitions_with_open_transactions: int


@dataclass(frozen=True, slots=True)
class BrokerMetrics:
    broker_id: int
    partitions_with_late_transactions: int
    hanging_transactions: int
    max_last_stable_offset_lag: int
    #: None when the broker's configs could not be read this cycle (the gauge is then absent,
    #: never a guess).
    verification_enabled: bool | None
    transaction_max_timeout_ms: int
    two_phase_commit_enabled: bool | None = None


@dataclass(frozen=True, slots=True)
class CoordinatorMetrics:
    coordinator_id: int
    #: ActiveTransactionOpenTimeMaxMs: now - TransactionStartTimeMs of the oldest open txn,
    #: two-phase-commit transactions left out (they are long-running by design).
    active_transaction_open_time_max_ms: int
    #: The same, over KIP-939 two-phase-commit transactions only (0 when none is open).
    two_phase_commit_open_time_max_ms: int = 0
    transactions_by_state: tuple[tuple[str, int], ...] = ()
    #: How long the id longest in PrepareCommit/PrepareAbort has been seen there: since the
    #: first cycle that listed it in that state (0 when none; see PreparingTransaction).
    prepare_time_max_ms: int = 0


@dataclass(frozen=True, slots=True)
class CoordinatorStateCount:
    """How many transactional ids one coordinator lists in one state (ListTransactions)."""

    coordinator_id: int
    state: str
    count: int


@dataclass(frozen=True, slots=True)
class ClassCount:
    txn_class: TxnClass
    count: int


@dataclass(frozen=True, slots=True)
class ApplicationTransactions:
    """Open partition-level transactions of one application in one class: the attribution
    rules applied to the classified transactions, with or without the consumer-group family."""

    application: str  # "unknown" when no rule matched or the transactional id is unknown
    txn_class: TxnClass
    count: int


@dataclass(frozen=True, slots=True)
class UnknownCount:
    reason: UnknownReason
    count: int


@dataclass(frozen=True, slots=True)
class CoordinatorTimeoutAbort:
    """KIP-588: a transaction the coordinator aborted on timeout, seen from outside as the
    transaction Ongoing past its deadline and next seen with a bumped epoch."""

    transactional_id: str
    coordinator_id: int
    producer_id: int
    old_epoch: int
    new_epoch: int


@dataclass(frozen=True, slots=True)
class WatchedTransaction:
    """An Ongoing coordinator transaction remembered for the next cycle's KIP-588 check."""

    transactional_id: str
    coordinator_id: int
    producer_id: int
    producer_epoch: int
    deadline_ms: int  # TransactionStartTimeMs + TransactionTimeoutMs
    seen_at_ms: int  # when it was last seen Ongoing (the snapshot's time)


@dataclass(frozen=True, slots=True)
class CoordinatorOpenSince:
    """The start time of a coordinator's oldest open transaction (two-phase-commit ones
    apart), remembered so that a cycle that could not read the coordinator (it did not answer
    ListTransactions, or its DescribeTransactions failed) keeps its open-time gauges ageing
    instead of dropping them or reading 0. None: no such open transaction."""

    coordinator_id: int
    open_since_ms: int | None
    two_phase_since_ms: int | None
    #: The snapshot time of the oldest cycle this rests on: a coordinator unread for longer
    #: than :data:`COORDINATOR_OPEN_CARRY_MS` is no longer carried (its last value would
    #: only grow, whatever became of that transaction).
    read_at_ms: int


#: How long a coordinator's open times are carried through cycles that cannot read it.
COORDINATOR_OPEN_CARRY_MS = 15 * 60_000


@dataclass(frozen=True, slots=True)
class PreparingTransaction:
    """A transactional id its coordinator lists in PrepareCommit or PrepareAbort (markers
    being written), with the snapshot time of the first cycle that listed it so. Neither
    ListTransactions nor DescribeTransactions tells when the state was entered, so the
    time in the state is counted from the first sighting, one cycle's precision."""

    coordinator_id: int
    transactional_id: str
    producer_id: int
    state: str
    since_ms: int


@dataclass(frozen=True, slots=True)
class HangingCandidate:
    """A hanging candidate or confirmed hanging transaction, with its last evidence."""

    finding: Finding
    cycles: int  # consecutive cycles it was seen as a verified candidate


@dataclass(frozen=True, slots=True)
class CoordinatorCount:
    coordinator_id: int
    count: int


@dataclass(frozen=True, slots=True)
class PipelineMemory:
    """What one cycle of one cluster hands the next: owned by the pipeline, passed forward
    by the daemon, never read back from what the scrape renders."""

    candidates: tuple[HangingCandidate, ...] = ()
    watched: tuple[WatchedTransaction, ...] = ()
    #: KIP-588 timeout aborts counted since the process started, per coordinator.
    timeout_aborts_total: tuple[CoordinatorCount, ...] = ()
    #: Ids listed in PrepareCommit/PrepareAbort, with since when (markers pending).
    preparing: tuple[PreparingTransaction, ...] = ()
    #: Each coordinator's oldest open transaction start, for a cycle that cannot read it.
    coordinator_open: tuple[CoordinatorOpenSince, ...] = ()
    #: What the consumer-group family carries to the next cycle (LSO history, blocked since).
    groups: GroupsCarry = field(default_factory=lambda: GroupsCarry())  # noqa: PLW0108 - declared below

    @property
    def watched_ids(self) -> tuple[str, ...]:
        """Transactional ids the next collection must describe whatever their state."""
        return tuple(sorted({w.transactional_id for w in self.watched}))


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What the pipeline computes from one snapshot."""

    cluster: str
    computed_at_ms: int
    #: The partitions a series can need: every one with ``lso_lag_series="all"``, else those
    #: with an LSO lag above 0, an open transaction or unread offsets.
    partitions: tuple[PartitionMetrics, ...] = ()
    brokers: tuple[BrokerMetrics, ...] = ()
    coordinators: tuple[CoordinatorMetrics, ...] = ()
    #: Every topic of the partition table, whatever ``lso_lag_series`` says.
    topics: tuple[TopicMetrics, ...] = ()
    findings: tuple[Finding, ...] = ()
    open_transactions_by_class: tuple[tuple[TxnClass, int], ...] = ()
    open_transactions_unknown: tuple[tuple[UnknownReason, int], ...] = ()
    #: Open transactions by application and class (attribution; empty: none open).
    open_transactions_by_application: tuple[ApplicationTransactions, ...] = ()
    timeout_aborts: tuple[CoordinatorTimeoutAbort, ...] = ()
    #: The visibility probe's answer (see ClusterSnapshot.transactional_ids_visible).
    transactional_ids_visible: bool | None = None
    #: The finalized transaction.version feature level of the cluster, None when unknown.
    transaction_version: int | None = None
    #: The consumer-group family (None when not configured).
    groups: GroupsResult | None = None
    memory: PipelineMemory = field(default_factory=PipelineMemory)
    #: The pipeline's families whose computation failed this cycle (their outputs are empty,
    #: their memory is the previous cycle's); see ``exporter.pipeline.rounds``.
    failed_families: tuple[str, ...] = ()


# --- consumer groups and attribution (blast radius) ---------------------------------------
# Records of the consumer-group family are declared below this line.


@dataclass(frozen=True, slots=True)
class ConsumableCheck:
    """What lies between a group's committed offset and the LSO, read from the batches
    (READ_COMMITTED Fetches from the committed offset, within the cycle's byte budget):
    control batches (commit/abort markers) and aborted data are not consumable."""

    topic: str
    partition: int
    from_offset: int  # the committed offset the Fetch started at
    to_offset: int  # the LSO the gap ends at
    #: Records a read_committed consumer gets in [from, to); when not ``exact``, an upper
    #: bound: those counted in what was read plus every offset after it.
    consumable_records: int
    #: False when the byte budget ran out (or a Fetch failed) before the batches reached
    #: the LSO.
    exact: bool = True


@dataclass(frozen=True, slots=True)
class GroupLag:
    """Lag of one consumer group on one topic (``partition`` -1) or one partition.

    ``consumable_lag``: committed -> LSO, what a read_committed consumer can read now (0 when
    the batches show only markers or aborted data before the LSO). ``blocked_lag``: from
    max(committed, LSO) to the high watermark, records behind open transactions.
    ``upper_bound_partitions``: partitions whose consumable lag is an upper bound (the
    batches between committed offset and LSO were not all read within the byte budget).
    """

    group: str
    topic: str
    consumable_lag: int
    blocked_lag: int
    partition: int = -1
    upper_bound_partitions: int = 0


@dataclass(frozen=True, slots=True)
class BlockedGroupPartition:
    """A group partition blocked by a transaction: nothing consumable between its committed
    offset and the LSO (committed == LSO, or only markers and aborted data between), the
    LSO below the HWM and not moving."""

    group: str
    topic: str
    partition: int
    committed_offset: int
    last_stable_offset: int
    high_watermark: int
    #: When the group was first seen at this LSO (epoch ms), and how long ago that is.
    blocked_since_ms: int
    blocked_ms: int
    #: The open transaction whose first offset is the LSO (None/-1 when it was not read).
    transactional_id: str | None = None
    producer_id: int = -1
    start_offset: int = -1
    txn_class: TxnClass | None = None
    txn_duration_ms: int = -1
    application: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """Per consumer group: its coordinator, state and counts."""

    group: str
    coordinator_id: int
    group_state: str
    blocked_partitions: int
    unstable_offset_commits: int  # partitions with a pending transactional offset commit


@dataclass(frozen=True, slots=True)
class LsoHistory:
    """A partition's LSO and for how many consecutive cycles it has been seen unchanged."""

    topic: str
    partition: int
    last_stable_offset: int
    cycles: int


@dataclass(frozen=True, slots=True)
class GroupAtLso:
    """A group partition seen at the LSO (nothing consumable before it) with the LSO below
    the HWM, and since when (epoch ms)."""

    group: str
    topic: str
    partition: int
    last_stable_offset: int
    since_ms: int
    #: The committed offset last seen (at or below the LSO; -1: not known).
    committed_offset: int = -1


@dataclass(frozen=True, slots=True)
class GroupsCarry:
    """What the next cycle's group pipeline needs from this one."""

    lso_history: tuple[LsoHistory, ...] = ()
    at_lso: tuple[GroupAtLso, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupsResult:
    """The consumer-group family of one cycle."""

    lags: tuple[GroupLag, ...] = ()  # per group and topic
    partition_lags: tuple[GroupLag, ...] = ()  # per partition (opt-in)
    blocked: tuple[BlockedGroupPartition, ...] = ()
    groups: tuple[GroupSummary, ...] = ()
    carry: GroupsCarry = field(default_factory=GroupsCarry)
